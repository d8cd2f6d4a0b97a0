//! Unnamed files, as `open(2)` with `O_TMPFILE` and `linkat(2)` give them.
//!
//! An unnamed file is a regular inode with no directory entry, recorded in
//! the `orphans` table from its first transaction on. Its creator writes it
//! through the returned [`Handle`] and may then give it a name in one
//! transaction ([`Fs::link_unnamed`]), replacing an existing entry if asked.
//! If the creator drops the handle first, or the process dies, the inode is
//! freed like any unlinked file: at the last handle's drop, or by the orphan
//! purge when the database is next opened. So an upload cut short leaves
//! nothing behind in any directory.

use crate::fs::WriteTxn;
use crate::handle::drop_link;
use crate::inode::{self, NewInode};
use crate::names::{Name, classify};
use crate::{Attr, Errno, FileKind, Fs, Handle, Ino, Owner, Result, dirent};

impl WriteTxn<'_> {
    fn create_unnamed(&mut self, dir: Ino, perm: u32, owner: Owner) -> Result<Ino> {
        self.live_dir(dir)?;
        self.check_inode_quota()?;
        let ino = inode::insert(
            self.conn(),
            &NewInode {
                kind: FileKind::RegularFile,
                perm,
                uid: owner.uid,
                gid: owner.gid,
                rdev: 0,
                nlink: 0,
                size: 0,
                parent: 0,
            },
            self.now,
        )?;
        inode::meta_add(self.conn(), "used_inodes", 1)?;
        self.conn()
            .prepare_cached("INSERT INTO orphans (ino) VALUES (?1)")?
            .execute([ino as i64])?;
        Ok(ino)
    }

    fn link_unnamed(&mut self, ino: Ino, parent: Ino, name: &[u8], replace: bool) -> Result<Attr> {
        let Name::Normal(name) = classify(name)? else {
            return Err(Errno::EEXIST.into());
        };
        let src = inode::get(self.conn(), ino)?;
        let unnamed = src.attr.nlink == 0
            && self
                .conn()
                .prepare_cached("SELECT 1 FROM orphans WHERE ino = ?1")?
                .exists([ino as i64])?;
        if !unnamed || src.attr.kind != FileKind::RegularFile {
            return Err(Errno::EINVAL.into());
        }
        self.live_dir(parent)?;
        match dirent::find(self.conn(), parent, name)? {
            Some(_) if !replace => return Err(Errno::EEXIST.into()),
            Some(old) if old.is_dir() => return Err(Errno::EISDIR.into()),
            Some(old) => {
                dirent::remove(self.conn(), parent, name)?;
                drop_link(self, old.attr.ino, false)?;
            }
            None => {}
        }
        dirent::insert(self.conn(), parent, name, ino)?;
        inode::add_nlink(self.conn(), ino, 1, self.now)?;
        self.conn()
            .prepare_cached("DELETE FROM orphans WHERE ino = ?1")?
            .execute([ino as i64])?;
        inode::dir_changed(self.conn(), parent, 0, self.now)?;
        self.changed_entry(parent, name);
        self.changed_inode(parent);
        self.changed_inode(ino);
        Ok(inode::get(self.conn(), ino)?.attr)
    }
}

impl Fs {
    /// Creates a regular file with no name on the filesystem of directory
    /// `dir` (`open(2)` with `O_TMPFILE`), open through the returned handle.
    /// It counts against the quota like any file. Give it a name with
    /// [`Fs::link_unnamed`]; without one it is freed when the handle is
    /// dropped, or at the next open of the database after a crash.
    ///
    /// Errors: `ENOENT` (`dir` missing or removed), `ENOTDIR`, `ENOSPC`
    /// (inode quota).
    pub fn create_unnamed(&self, dir: Ino, perm: u32, owner: Owner) -> Result<(Attr, Handle)> {
        let mut t = self.begin()?;
        let ino = t.create_unnamed(dir, perm, owner)?;
        t.commit()?;
        // Nothing frees an orphan between the commit and this open but a
        // restart, which purges it anyway.
        let handle = self.open_inode(ino)?;
        Ok((self.getattr(ino)?, handle))
    }

    /// Gives unnamed file `ino` (from [`Fs::create_unnamed`]) the name
    /// `name` in `parent`, as `linkat(2)` of an `O_TMPFILE` descriptor does.
    /// With `replace`, an existing non-directory entry of that name is
    /// replaced in the same transaction (as `rename(2)` would replace it),
    /// so readers see either the old file or the whole new one.
    ///
    /// Unlike linkat(2), any regular file whose last name is gone while a
    /// handle holds it is accepted, not only one from
    /// [`Fs::create_unnamed`]: callers pass inodes they created.
    ///
    /// Errors: `EEXIST` (name taken and not `replace`), `EISDIR` (the name
    /// is a directory), `EINVAL` (`ino` is not a regular file without a
    /// name), `ENOENT`, `ENOTDIR`, `ENAMETOOLONG`.
    pub fn link_unnamed(&self, ino: Ino, parent: Ino, name: &[u8], replace: bool) -> Result<Attr> {
        let mut t = self.begin()?;
        let a = t.link_unnamed(ino, parent, name, replace)?;
        t.commit()?;
        Ok(a)
    }
}
