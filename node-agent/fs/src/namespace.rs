//! Directory operations: lookup, create, link, unlink, rmdir, rename, readdir.
//!
//! Error order follows Linux `fs/namei.c` (`do_mkdirat`, `do_unlinkat`,
//! `do_rmdir`, `do_renameat2`, `vfs_rename`, `may_delete`), so callers see
//! the errno a local filesystem would give.

use rusqlite::params;

use crate::fs::WriteTxn;
use crate::handle::drop_link;
use crate::inode::{self, Inode, NewInode};
use crate::names::{Name, classify};
use crate::{
    Attr, DirEntry, Errno, FileKind, Fs, Ino, Owner, PATH_MAX, ROOT_INO, RenameFlags, Result,
    dirent,
};

/// How many recent swaps [`Fs::exchange_once`] remembers. A dead server
/// leaves at most one unanswered request per thread reading the device,
/// and the kernel puts resent requests at the head of its queue
/// (fs/fuse/dev.c, `fuse_resend`), so a resent swap finds its record long
/// before a thousand newer swaps could push it out.
pub const EXCHANGES_REMEMBERED: usize = 1024;

/// What kind of inode a create makes, with its kind-specific data.
pub(crate) enum NewKind<'a> {
    Dir,
    Symlink(&'a [u8]),
    Node(FileKind, u32),
}

impl WriteTxn<'_> {
    /// Directory `dir` as a place to add entries: `ENOENT` if missing or
    /// already removed, `ENOTDIR` if not a directory.
    pub(crate) fn live_dir(&self, dir: Ino) -> Result<Inode> {
        let d = inode::get_dir(self.conn(), dir)?;
        if d.attr.nlink == 0 {
            return Err(Errno::ENOENT.into());
        }
        Ok(d)
    }

    /// `ENOSPC` when the inode quota is used up.
    pub(crate) fn check_inode_quota(&self) -> Result<()> {
        let used = inode::meta_get(self.conn(), "used_inodes")?.max(0) as u64;
        if used >= self.inner.limits().inode_limit() {
            return Err(Errno::ENOSPC.into());
        }
        Ok(())
    }

    /// Creates `name` in `parent`.
    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: NewKind<'_>,
        perm: u32,
        owner: Owner,
    ) -> Result<Attr> {
        let Name::Normal(name) = classify(name)? else {
            return Err(Errno::EEXIST.into());
        };
        self.live_dir(parent)?;
        if dirent::find(self.conn(), parent, name)?.is_some() {
            return Err(Errno::EEXIST.into());
        }
        if let NewKind::Symlink(target) = kind {
            check_symlink_target(target)?;
            // Targets count against the byte quota.
            self.check_byte_quota(target.len() as i64)?;
        }
        self.check_inode_quota()?;
        let (fkind, rdev, nlink, size, dparent) = match kind {
            NewKind::Dir => (FileKind::Directory, 0, 2, 0, parent),
            NewKind::Symlink(t) => (FileKind::Symlink, 0, 1, t.len() as u64, 0),
            NewKind::Node(k, rdev) => (k, rdev, 1, 0, 0),
        };
        let ino = inode::insert(
            self.conn(),
            &NewInode {
                kind: fkind,
                perm,
                uid: owner.uid,
                gid: owner.gid,
                rdev,
                nlink,
                size,
                parent: dparent,
            },
            self.now,
        )?;
        if let NewKind::Symlink(target) = kind {
            self.conn()
                .prepare_cached("INSERT INTO symlinks (ino, target) VALUES (?1, ?2)")?
                .execute(params![ino as i64, target])?;
            inode::meta_add(self.conn(), "used_bytes", target.len() as i64)?;
        }
        inode::meta_add(self.conn(), "used_inodes", 1)?;
        dirent::insert(self.conn(), parent, name, ino)?;
        let subdir = i64::from(fkind == FileKind::Directory);
        inode::dir_changed(self.conn(), parent, subdir, self.now)?;
        self.changed_entry(parent, name);
        self.changed_inode(parent);
        Ok(inode::get(self.conn(), ino)?.attr)
    }

    pub(crate) fn link(&mut self, ino: Ino, new_parent: Ino, new_name: &[u8]) -> Result<Attr> {
        let name = classify(new_name)?;
        let src = inode::get(self.conn(), ino)?;
        let Name::Normal(name) = name else {
            return Err(Errno::EEXIST.into());
        };
        self.live_dir(new_parent)?;
        if dirent::find(self.conn(), new_parent, name)?.is_some() {
            return Err(Errno::EEXIST.into());
        }
        if src.is_dir() {
            return Err(Errno::EPERM.into());
        }
        if src.attr.nlink == 0 {
            // Linux refuses to give an unlinked file a name again (linkat(2)).
            return Err(Errno::ENOENT.into());
        }
        if src.attr.nlink >= u32::MAX - 1 {
            return Err(Errno::EMLINK.into());
        }
        // A second name costs the host a directory entry as a new file
        // would: one inode-equivalent (see `Limits::inode_limit`).
        self.check_inode_quota()?;
        dirent::insert(self.conn(), new_parent, name, ino)?;
        inode::add_nlink(self.conn(), ino, 1, self.now)?;
        inode::meta_add(self.conn(), "used_inodes", 1)?;
        inode::dir_changed(self.conn(), new_parent, 0, self.now)?;
        self.changed_entry(new_parent, name);
        self.changed_inode(new_parent);
        self.changed_inode(ino);
        Ok(inode::get(self.conn(), ino)?.attr)
    }

    pub(crate) fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<()> {
        let Name::Normal(name) = classify(name)? else {
            return Err(Errno::EISDIR.into());
        };
        inode::get_dir(self.conn(), parent)?;
        let victim = dirent::find(self.conn(), parent, name)?.ok_or(Errno::ENOENT)?;
        if victim.is_dir() {
            return Err(Errno::EISDIR.into());
        }
        dirent::remove(self.conn(), parent, name)?;
        drop_link(self, victim.attr.ino, false)?;
        inode::dir_changed(self.conn(), parent, 0, self.now)?;
        self.changed_entry(parent, name);
        self.changed_inode(parent);
        Ok(())
    }

    pub(crate) fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<()> {
        let name = match classify(name)? {
            Name::Normal(n) => n,
            Name::Dot => return Err(Errno::EINVAL.into()),
            Name::DotDot => return Err(Errno::ENOTEMPTY.into()),
            Name::Root => return Err(Errno::EBUSY.into()),
        };
        inode::get_dir(self.conn(), parent)?;
        let victim = dirent::find(self.conn(), parent, name)?.ok_or(Errno::ENOENT)?;
        if !victim.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        if dirent::has_entries(self.conn(), victim.attr.ino)? {
            return Err(Errno::ENOTEMPTY.into());
        }
        dirent::remove(self.conn(), parent, name)?;
        drop_link(self, victim.attr.ino, true)?;
        inode::dir_changed(self.conn(), parent, -1, self.now)?;
        self.changed_entry(parent, name);
        self.changed_inode(parent);
        Ok(())
    }

    pub(crate) fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.exchange && flags.noreplace {
            return Err(Errno::EINVAL.into());
        }
        let old_name = classify(name)?;
        let new_name_c = classify(new_name)?;
        inode::get_dir(self.conn(), parent)?;
        let np = inode::get_dir(self.conn(), new_parent)?;
        let Name::Normal(name) = old_name else {
            return Err(Errno::EBUSY.into());
        };
        let Name::Normal(new_name) = new_name_c else {
            return Err(if flags.noreplace {
                Errno::EEXIST
            } else {
                Errno::EBUSY
            }
            .into());
        };
        let src = dirent::find(self.conn(), parent, name)?.ok_or(Errno::ENOENT)?;
        let dst = dirent::find(self.conn(), new_parent, new_name)?;
        if flags.noreplace && dst.is_some() {
            return Err(Errno::EEXIST.into());
        }
        if flags.exchange && dst.is_none() {
            return Err(Errno::ENOENT.into());
        }
        if dst.is_none() && np.attr.nlink == 0 {
            return Err(Errno::ENOENT.into());
        }
        let src_ino = src.attr.ino;
        // Source must not be an ancestor of the target's directory.
        if parent != new_parent
            && src.is_dir()
            && dirent::is_ancestor_or_self(self.conn(), src_ino, new_parent)?
        {
            return Err(Errno::EINVAL.into());
        }
        // Target must not be an ancestor of the source's directory.
        if let Some(d) = &dst
            && parent != new_parent
            && d.is_dir()
            && dirent::is_ancestor_or_self(self.conn(), d.attr.ino, parent)?
        {
            let e = if flags.exchange {
                Errno::EINVAL
            } else {
                Errno::ENOTEMPTY
            };
            return Err(e.into());
        }
        if dst.as_ref().is_some_and(|d| d.attr.ino == src_ino) {
            // Two names of one inode: rename(2) does nothing and succeeds.
            return Ok(());
        }
        match dst {
            Some(dst) if flags.exchange => {
                self.exchange(parent, name, &src, new_parent, new_name, &dst)?
            }
            Some(dst) => {
                if src.is_dir() && !dst.is_dir() {
                    return Err(Errno::ENOTDIR.into());
                }
                if !src.is_dir() && dst.is_dir() {
                    return Err(Errno::EISDIR.into());
                }
                if dst.is_dir() && dirent::has_entries(self.conn(), dst.attr.ino)? {
                    return Err(Errno::ENOTEMPTY.into());
                }
                dirent::remove(self.conn(), new_parent, new_name)?;
                drop_link(self, dst.attr.ino, dst.is_dir())?;
                if dst.is_dir() {
                    inode::dir_changed(self.conn(), new_parent, -1, self.now)?;
                }
                self.move_entry(parent, name, &src, new_parent, new_name)?;
            }
            None => self.move_entry(parent, name, &src, new_parent, new_name)?,
        }
        self.changed_entry(parent, name);
        self.changed_entry(new_parent, new_name);
        self.changed_inode(parent);
        self.changed_inode(new_parent);
        self.changed_inode(src_ino);
        Ok(())
    }

    /// Moves entry `name` of `parent` (inode `src`) to `new_name` in
    /// `new_parent`, which is free.
    fn move_entry(
        &mut self,
        parent: Ino,
        name: &[u8],
        src: &Inode,
        new_parent: Ino,
        new_name: &[u8],
    ) -> Result<()> {
        let ino = src.attr.ino;
        dirent::remove(self.conn(), parent, name)?;
        dirent::insert(self.conn(), new_parent, new_name, ino)?;
        let moved_dir = src.is_dir() && parent != new_parent;
        if moved_dir {
            self.conn()
                .prepare_cached("UPDATE inodes SET parent = ?2 WHERE ino = ?1")?
                .execute(params![ino as i64, new_parent as i64])?;
        }
        inode::dir_changed(self.conn(), parent, -i64::from(moved_dir), self.now)?;
        inode::dir_changed(self.conn(), new_parent, i64::from(moved_dir), self.now)?;
        // Linux updates the moved inode's ctime too.
        inode::add_nlink(self.conn(), ino, 0, self.now)?;
        Ok(())
    }

    /// `RENAME_EXCHANGE`: both entries keep their names and cookies and
    /// trade inodes.
    fn exchange(
        &mut self,
        parent: Ino,
        name: &[u8],
        src: &Inode,
        new_parent: Ino,
        new_name: &[u8],
        dst: &Inode,
    ) -> Result<()> {
        dirent::repoint(self.conn(), parent, name, dst.attr.ino)?;
        dirent::repoint(self.conn(), new_parent, new_name, src.attr.ino)?;
        if parent != new_parent {
            let set_parent = |ino: Ino, p: Ino| -> Result<()> {
                self.conn()
                    .prepare_cached("UPDATE inodes SET parent = ?2 WHERE ino = ?1")?
                    .execute(params![ino as i64, p as i64])?;
                Ok(())
            };
            let s = i64::from(src.is_dir());
            let d = i64::from(dst.is_dir());
            if src.is_dir() {
                set_parent(src.attr.ino, new_parent)?;
            }
            if dst.is_dir() {
                set_parent(dst.attr.ino, parent)?;
            }
            inode::dir_changed(self.conn(), parent, d - s, self.now)?;
            inode::dir_changed(self.conn(), new_parent, s - d, self.now)?;
        } else {
            inode::dir_changed(self.conn(), parent, 0, self.now)?;
        }
        inode::add_nlink(self.conn(), src.attr.ino, 0, self.now)?;
        inode::add_nlink(self.conn(), dst.attr.ino, 0, self.now)?;
        self.changed_inode(dst.attr.ino);
        Ok(())
    }
}

/// A symlink target: non-empty (`ENOENT`, as Linux), shorter than
/// [`PATH_MAX`] (`ENAMETOOLONG`), no NUL (`EINVAL`).
fn check_symlink_target(target: &[u8]) -> Result<()> {
    if target.is_empty() {
        return Err(Errno::ENOENT.into());
    }
    if target.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG.into());
    }
    if target.contains(&0) {
        return Err(Errno::EINVAL.into());
    }
    Ok(())
}

/// Looks `name` up in `parent` on any connection.
pub(crate) fn lookup_in(conn: &rusqlite::Connection, parent: Ino, name: &[u8]) -> Result<Attr> {
    match classify(name)? {
        Name::Normal(n) => match dirent::find(conn, parent, n)? {
            Some(i) => Ok(i.attr),
            None => {
                // Tell a missing entry from a parent that isn't a directory.
                inode::get_dir(conn, parent)?;
                Err(Errno::ENOENT.into())
            }
        },
        Name::Dot => Ok(inode::get_dir(conn, parent)?.attr),
        Name::DotDot => {
            let up = inode::parent_of(conn, parent)?;
            Ok(inode::get(conn, up)?.attr)
        }
        Name::Root => Ok(inode::get(conn, ROOT_INO)?.attr),
    }
}

impl Fs {
    /// The attributes of entry `name` in directory `parent`. `.` and `..`
    /// are understood; `/` names the root (see [`Fs::resolve_parent`]).
    ///
    /// Errors: `ENOENT`, `ENOTDIR` (parent is not a directory),
    /// `ENAMETOOLONG` (name over 255 bytes), `EINVAL` (`/` or NUL in name).
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let r = self.inner.reader()?;
        r.snapshot(|c| lookup_in(c, parent, name))
    }

    /// Creates a regular file, FIFO, character or block device or socket
    /// named `name` in `parent` with permission bits `perm & 0o7777`
    /// (no umask is applied: callers do that).
    ///
    /// Errors: `EEXIST` if the name exists (also for `.`, `..`), `ENOENT` if
    /// `parent` is missing or removed, `ENOTDIR`, `ENOSPC` past the inode
    /// quota, `EINVAL` for a directory or symlink `kind` (use `mkdir` or
    /// `symlink`).
    pub fn mknod(
        &self,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u32,
        owner: Owner,
    ) -> Result<Attr> {
        if matches!(kind, FileKind::Directory | FileKind::Symlink) {
            return Err(Errno::EINVAL.into());
        }
        let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            rdev
        } else {
            0
        };
        let mut t = self.begin()?;
        let a = t.create(parent, name, NewKind::Node(kind, rdev), perm, owner)?;
        t.commit()?;
        Ok(a)
    }

    /// Creates directory `name` in `parent` (`nlink` 2; the parent gains a link).
    ///
    /// Errors: as [`Fs::mknod`].
    pub fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        let mut t = self.begin()?;
        let a = t.create(parent, name, NewKind::Dir, perm, owner)?;
        t.commit()?;
        Ok(a)
    }

    /// Creates symlink `name` in `parent` pointing at `target` (raw bytes,
    /// not checked for existence). Permission bits are `0o777` as on Linux.
    ///
    /// Errors: as [`Fs::mknod`]; `ENOENT` for an empty target,
    /// `ENAMETOOLONG` for a target of 4096 bytes or more.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        let mut t = self.begin()?;
        let a = t.create(parent, name, NewKind::Symlink(target), 0o777, owner)?;
        t.commit()?;
        Ok(a)
    }

    /// The target of symlink `ino`. Errors: `ENOENT`; `EINVAL` if not a symlink.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let r = self.inner.reader()?;
        r.snapshot(|c| readlink_in(c, ino))
    }

    /// Adds the name `new_name` in `new_parent` for inode `ino`.
    ///
    /// Errors: `ENOENT` (no such inode, or it has no links left), `EEXIST`,
    /// `EPERM` for a directory, `ENOTDIR`, `EMLINK`.
    pub fn link(&self, ino: Ino, new_parent: Ino, new_name: &[u8]) -> Result<Attr> {
        let mut t = self.begin()?;
        let a = t.link(ino, new_parent, new_name)?;
        t.commit()?;
        Ok(a)
    }

    /// Removes the non-directory entry `name` from `parent`. The inode goes
    /// with its last link, unless a [`crate::Handle`] keeps it open.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`, `EISDIR` for a directory (Linux; also
    /// for `.`, `..`).
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let mut t = self.begin()?;
        t.unlink(parent, name)?;
        t.commit()
    }

    /// Removes the empty directory `name` from `parent`.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`, `ENOTEMPTY` (also for `..`), `EINVAL`
    /// for `.`, `EBUSY` for the root (`/`).
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let mut t = self.begin()?;
        t.rmdir(parent, name)?;
        t.commit()
    }

    /// Renames `parent/name` to `new_parent/new_name` atomically, as Linux
    /// `renameat2(2)`: replaces a file by a non-directory or an empty
    /// directory by a directory; renaming a name onto another name of the
    /// same inode does nothing.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`, `EISDIR`, `ENOTEMPTY`, `EINVAL` (moving
    /// a directory into its own subtree; both flags), `EEXIST`
    /// (`noreplace`), `EBUSY` (`.`, `..` or `/` as a name).
    pub fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let mut t = self.begin()?;
        t.rename(parent, name, new_parent, new_name, flags)?;
        t.commit()
    }

    /// `RENAME_EXCHANGE` of `parent/name` and `new_parent/new_name`,
    /// applied at most once for one FUSE request: `request` is the
    /// request's id without the `FUSE_UNIQUE_RESEND` bit, and `resent` says
    /// whether the kernel sent it again after a take-over
    /// (include/uapi/linux/fuse.h). Every swap is recorded with its request
    /// in its own transaction; a resent request that finds its record was
    /// applied by the server that died before answering, and is not
    /// swapped back. The last [`EXCHANGES_REMEMBERED`] swaps are kept.
    ///
    /// Returns true if this call swapped, false if the record showed the
    /// swap was already applied. Errors: as [`Fs::rename`] with
    /// `exchange`.
    pub fn exchange_once(
        &self,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        request: u64,
        resent: bool,
    ) -> Result<bool> {
        let mut t = self.begin()?;
        let request = request as i64;
        if resent {
            let applied = t
                .conn()
                .prepare_cached(
                    "SELECT 1 FROM applied_exchanges WHERE request = ?1 AND parent = ?2
                     AND name = ?3 AND new_parent = ?4 AND new_name = ?5",
                )?
                .exists(params![
                    request,
                    parent as i64,
                    name,
                    new_parent as i64,
                    new_name
                ])?;
            if applied {
                return Ok(false);
            }
        }
        let flags = RenameFlags {
            noreplace: false,
            exchange: true,
        };
        t.rename(parent, name, new_parent, new_name, flags)?;
        t.conn()
            .prepare_cached(
                "INSERT INTO applied_exchanges (request, parent, name, new_parent, new_name)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                request,
                parent as i64,
                name,
                new_parent as i64,
                new_name
            ])?;
        let newest = t.conn().last_insert_rowid();
        t.conn()
            .prepare_cached("DELETE FROM applied_exchanges WHERE rowid <= ?1")?
            .execute([newest - EXCHANGES_REMEMBERED as i64])?;
        t.commit()?;
        Ok(true)
    }

    /// Up to `limit` entries of directory `dir` after the entry whose
    /// cookie is `after_cookie` (0 to start), in cookie order, without `.`
    /// and `..`. Cookies are stable: an entry keeps its cookie until removed
    /// or renamed, and cookies are never below 3 (a FUSE layer may use 1 and
    /// 2 for `.` and `..`). Entries added during a listing may be missed.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`.
    pub fn readdir(&self, dir: Ino, after_cookie: u64, limit: usize) -> Result<Vec<DirEntry>> {
        let (_, entries) = self.readdir_plus(dir, after_cookie, limit)?;
        Ok(entries.into_iter().map(|(e, _)| e).collect())
    }

    /// Like [`Fs::readdir`], with each entry's attributes, all read in one
    /// snapshot (one query instead of one per entry, for FUSE
    /// `READDIRPLUS`). Also returns the parent (`..`) of `dir`.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`.
    pub fn readdir_plus(
        &self,
        dir: Ino,
        after_cookie: u64,
        limit: usize,
    ) -> Result<(Ino, Vec<(DirEntry, Attr)>)> {
        let r = self.inner.reader()?;
        r.snapshot(|c| {
            let parent = inode::parent_of(c, dir)?;
            let mut st = c.prepare_cached(
                "SELECT d.name, d.cookie, i.ino, i.mode, i.uid, i.gid, i.nlink, i.size,
                        i.stored, i.atime, i.mtime, i.ctime, i.rdev
                 FROM dirents d JOIN inodes i ON i.ino = d.ino
                 WHERE d.parent = ?1 AND d.cookie > ?2
                 ORDER BY d.cookie LIMIT ?3",
            )?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = st.query_map(
                params![dir as i64, after_cookie.min(i64::MAX as u64) as i64, limit],
                |r| {
                    let attr = inode::from_row(r, 2)?.attr;
                    Ok((
                        DirEntry {
                            name: r.get(0)?,
                            ino: attr.ino,
                            cookie: r.get::<_, i64>(1)? as u64,
                            kind: attr.kind,
                        },
                        attr,
                    ))
                },
            )?;
            Ok((parent, rows.collect::<rusqlite::Result<Vec<_>>>()?))
        })
    }

    /// The parent (`..`) of directory `dir`; the root's parent is the root.
    ///
    /// Errors: `ENOENT`, `ENOTDIR`.
    pub fn parent_of(&self, dir: Ino) -> Result<Ino> {
        let r = self.inner.reader()?;
        inode::parent_of(&r, dir)
    }
}

/// The target of symlink `ino` on any connection.
pub(crate) fn readlink_in(conn: &rusqlite::Connection, ino: Ino) -> Result<Vec<u8>> {
    use rusqlite::OptionalExtension;
    let target: Option<Vec<u8>> = conn
        .prepare_cached("SELECT target FROM symlinks WHERE ino = ?1")?
        .query_row([ino as i64], |r| r.get(0))
        .optional()?;
    match target {
        Some(t) => Ok(t),
        None => {
            inode::get(conn, ino)?;
            Err(Errno::EINVAL.into())
        }
    }
}
