//! Rows of the `dirents` table.

use rusqlite::{Connection, OptionalExtension, params};

use crate::inode::{self, Inode};
use crate::{Ino, Result};

/// The inode named `name` in directory `parent`, if any.
pub(crate) fn find(conn: &Connection, parent: Ino, name: &[u8]) -> Result<Option<Inode>> {
    let mut st = conn.prepare_cached(
        "SELECT i.ino, i.mode, i.uid, i.gid, i.nlink, i.size, i.stored, i.atime, i.mtime,
                i.ctime, i.rdev
         FROM dirents d JOIN inodes i ON i.ino = d.ino
         WHERE d.parent = ?1 AND d.name = ?2",
    )?;
    Ok(st
        .query_row(params![parent as i64, name], |r| inode::from_row(r, 0))
        .optional()?)
}

/// Adds entry `name` -> `ino` to `parent` with the directory's next cookie.
pub(crate) fn insert(conn: &Connection, parent: Ino, name: &[u8], ino: Ino) -> Result<()> {
    let cookie: i64 = conn
        .prepare_cached(
            "UPDATE inodes SET next_cookie = next_cookie + 1 WHERE ino = ?1
             RETURNING next_cookie - 1",
        )?
        .query_row([parent as i64], |r| r.get(0))?;
    conn.prepare_cached("INSERT INTO dirents (parent, name, ino, cookie) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![parent as i64, name, ino as i64, cookie])?;
    Ok(())
}

/// Removes entry `name` from `parent`.
pub(crate) fn remove(conn: &Connection, parent: Ino, name: &[u8]) -> Result<()> {
    conn.prepare_cached("DELETE FROM dirents WHERE parent = ?1 AND name = ?2")?
        .execute(params![parent as i64, name])?;
    Ok(())
}

/// Points the existing entry `name` of `parent` at `ino`, keeping its cookie.
pub(crate) fn repoint(conn: &Connection, parent: Ino, name: &[u8], ino: Ino) -> Result<()> {
    conn.prepare_cached("UPDATE dirents SET ino = ?3 WHERE parent = ?1 AND name = ?2")?
        .execute(params![parent as i64, name, ino as i64])?;
    Ok(())
}

/// Whether directory `dir` has any entry.
pub(crate) fn has_entries(conn: &Connection, dir: Ino) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM dirents WHERE parent = ?1 LIMIT 1")?
        .query_row([dir as i64], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Whether `anc` is `dir` or one of its ancestors (walking `..` to the root).
pub(crate) fn is_ancestor_or_self(conn: &Connection, anc: Ino, dir: Ino) -> Result<bool> {
    let mut cur = dir;
    // Depth is bounded by the number of directories; the guard only stops
    // a corrupt cycle.
    for _ in 0..1_000_000 {
        if cur == anc {
            return Ok(true);
        }
        let up = inode::parent_of(conn, cur)?;
        if up == cur {
            return Ok(false);
        }
        cur = up;
    }
    Ok(false)
}
