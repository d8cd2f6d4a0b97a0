//! Rows of the `inodes` table and the usage counters in `meta`.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::{Attr, Errno, FileKind, Ino, Result, Timespec};

/// An inode row: the attributes plus the engine's bookkeeping.
#[derive(Debug, Clone)]
pub(crate) struct Inode {
    pub(crate) attr: Attr,
    /// Bytes held in chunks (the quota unit).
    pub(crate) stored: u64,
}

impl Inode {
    pub(crate) fn is_dir(&self) -> bool {
        self.attr.kind == FileKind::Directory
    }
}

/// Builds an [`Inode`] from a row holding `ino, mode, uid, gid, nlink,
/// size, stored, atime, mtime, ctime, rdev` from column `at` on.
pub(crate) fn from_row(r: &Row<'_>, at: usize) -> rusqlite::Result<Inode> {
    let mode: u32 = r.get(at + 1)?;
    let kind = FileKind::from_mode(mode)
        .ok_or_else(|| rusqlite::Error::IntegralValueOutOfRange(at + 1, i64::from(mode)))?;
    let stored: i64 = r.get(at + 6)?;
    Ok(Inode {
        attr: Attr {
            ino: r.get::<_, i64>(at)? as Ino,
            kind,
            perm: mode & 0o7777,
            uid: r.get(at + 2)?,
            gid: r.get(at + 3)?,
            nlink: r.get(at + 4)?,
            size: r.get::<_, i64>(at + 5)? as u64,
            blocks: (stored as u64).div_ceil(512),
            atime: Timespec::from_nanos(r.get(at + 7)?),
            mtime: Timespec::from_nanos(r.get(at + 8)?),
            ctime: Timespec::from_nanos(r.get(at + 9)?),
            rdev: r.get(at + 10)?,
        },
        stored: stored as u64,
    })
}

/// The inode `ino`, or `None`.
pub(crate) fn find(conn: &Connection, ino: Ino) -> Result<Option<Inode>> {
    let mut st = conn.prepare_cached(
        "SELECT ino, mode, uid, gid, nlink, size, stored, atime, mtime, ctime, rdev
         FROM inodes WHERE ino = ?1",
    )?;
    Ok(st.query_row([ino as i64], |r| from_row(r, 0)).optional()?)
}

/// The inode `ino`; `ENOENT` if it does not exist.
pub(crate) fn get(conn: &Connection, ino: Ino) -> Result<Inode> {
    find(conn, ino)?.ok_or_else(|| Errno::ENOENT.into())
}

/// The directory `ino`; `ENOENT` if missing, `ENOTDIR` if not a directory.
pub(crate) fn get_dir(conn: &Connection, ino: Ino) -> Result<Inode> {
    let i = get(conn, ino)?;
    if !i.is_dir() {
        return Err(Errno::ENOTDIR.into());
    }
    Ok(i)
}

/// The `..` of directory `dir` (stored in its row; the root's is itself).
pub(crate) fn parent_of(conn: &Connection, dir: Ino) -> Result<Ino> {
    let mut st = conn.prepare_cached("SELECT mode, parent FROM inodes WHERE ino = ?1")?;
    let (mode, parent): (u32, i64) = st
        .query_row([dir as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or(Errno::ENOENT)?;
    if FileKind::from_mode(mode) != Some(FileKind::Directory) {
        return Err(Errno::ENOTDIR.into());
    }
    Ok(parent as Ino)
}

/// The fields of a new inode.
pub(crate) struct NewInode {
    pub(crate) kind: FileKind,
    pub(crate) perm: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) rdev: u32,
    pub(crate) nlink: u32,
    pub(crate) size: u64,
    /// For a directory, its parent; else 0.
    pub(crate) parent: Ino,
}

/// Inserts a new inode with all times set to `now`; returns its number.
/// Inode numbers are never reused (AUTOINCREMENT), so a stale number held by
/// a cache can't name a newer file.
pub(crate) fn insert(conn: &Connection, n: &NewInode, now: i64) -> Result<Ino> {
    let mut st = conn.prepare_cached(
        "INSERT INTO inodes (mode, uid, gid, nlink, size, stored, atime, mtime, ctime, rdev, parent)
         VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?6, ?6, ?7, ?8)",
    )?;
    st.execute(params![
        n.kind.mode_bits() | (n.perm & 0o7777),
        n.uid,
        n.gid,
        n.nlink,
        n.size as i64,
        now,
        n.rdev,
        n.parent as i64
    ])?;
    Ok(conn.last_insert_rowid() as Ino)
}

/// Adds `delta` to the link count of `ino` and sets its ctime to `now`.
pub(crate) fn add_nlink(conn: &Connection, ino: Ino, delta: i64, now: i64) -> Result<()> {
    let mut st =
        conn.prepare_cached("UPDATE inodes SET nlink = nlink + ?2, ctime = ?3 WHERE ino = ?1")?;
    st.execute(params![ino as i64, delta, now])?;
    Ok(())
}

/// Sets mtime and ctime of directory `dir` to `now` and adds `delta` to its
/// link count (a subdirectory came or went).
pub(crate) fn dir_changed(conn: &Connection, dir: Ino, nlink_delta: i64, now: i64) -> Result<()> {
    let mut st = conn.prepare_cached(
        "UPDATE inodes SET nlink = nlink + ?2, mtime = ?3, ctime = ?3 WHERE ino = ?1",
    )?;
    st.execute(params![dir as i64, nlink_delta, now])?;
    Ok(())
}

/// Reads one counter of the `meta` table.
pub(crate) fn meta_get(conn: &Connection, key: &str) -> Result<i64> {
    let mut st = conn.prepare_cached("SELECT value FROM meta WHERE key = ?1")?;
    Ok(st.query_row([key], |r| r.get(0)).optional()?.unwrap_or(0))
}

/// Sets one value of the `meta` table.
pub(crate) fn meta_set(conn: &Connection, key: &str, value: i64) -> Result<()> {
    let mut st = conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?;
    st.execute(params![key, value])?;
    Ok(())
}

/// Adds `delta` to one counter of the `meta` table.
pub(crate) fn meta_add(conn: &Connection, key: &str, delta: i64) -> Result<()> {
    if delta == 0 {
        return Ok(());
    }
    let mut st = conn.prepare_cached("UPDATE meta SET value = value + ?2 WHERE key = ?1")?;
    st.execute(params![key, delta])?;
    Ok(())
}

/// Deletes inode `ino` with all its data, and updates the usage counters.
pub(crate) fn free(conn: &Connection, ino: Ino) -> Result<()> {
    let Some(i) = find(conn, ino)? else {
        return Ok(());
    };
    let id = ino as i64;
    conn.prepare_cached("DELETE FROM chunks WHERE ino = ?1")?
        .execute([id])?;
    // Xattrs and a symlink's target count in used_bytes too: one statement
    // deletes the xattrs and yields their sizes.
    let mut extra: i64 = 0;
    {
        let mut st = conn.prepare_cached(
            "DELETE FROM xattrs WHERE ino = ?1 RETURNING length(name) + length(value)",
        )?;
        let mut rows = st.query([id])?;
        while let Some(r) = rows.next()? {
            extra += r.get::<_, i64>(0)?;
        }
    }
    if i.attr.kind == FileKind::Symlink {
        extra += conn
            .prepare_cached("DELETE FROM symlinks WHERE ino = ?1 RETURNING length(target)")?
            .query_row([id], |r| r.get::<_, i64>(0))
            .optional()?
            .unwrap_or(0);
    }
    conn.prepare_cached("DELETE FROM orphans WHERE ino = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM inodes WHERE ino = ?1")?
        .execute([id])?;
    meta_add(conn, "used_bytes", -(i.stored as i64) - extra)?;
    meta_add(conn, "used_inodes", -1)?;
    Ok(())
}
