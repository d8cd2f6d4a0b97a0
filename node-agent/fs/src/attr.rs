//! Inode attributes: `getattr` and `setattr`.

use rusqlite::params;

use crate::data::regular;
use crate::fs::WriteTxn;
use crate::{Attr, FileKind, Fs, Ino, Result, SetAttr, TimeSet, inode};

impl WriteTxn<'_> {
    pub(crate) fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let i = inode::get(self.conn(), ino)?;
        if let Some(size) = set.size {
            let f = regular(i.clone())?;
            self.truncate(&f, size)?;
        }
        let mut perm = i.attr.perm;
        if let Some(p) = set.perm {
            perm = p & 0o7777;
        }
        let uid = set.uid.unwrap_or(i.attr.uid);
        let gid = set.gid.unwrap_or(i.attr.gid);
        let owner_changed = uid != i.attr.uid || gid != i.attr.gid;
        if owner_changed && set.perm.is_none() && i.attr.kind != FileKind::Directory {
            // chown(2): changing the owner clears set-user-ID, and
            // set-group-ID when group execute is set (Linux, root included).
            perm &= !libc::S_ISUID;
            if perm & libc::S_IXGRP != 0 {
                perm &= !libc::S_ISGID;
            }
        }
        let time = |t: Option<TimeSet>, old| match t {
            None => old,
            Some(TimeSet::Now) => self.now,
            Some(TimeSet::At(ts)) => ts.as_nanos(),
        };
        let atime = time(set.atime, i.attr.atime.as_nanos());
        let mtime = time(set.mtime, i.attr.mtime.as_nanos());
        let any = set.perm.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.atime.is_some()
            || set.mtime.is_some();
        if any {
            self.conn()
                .prepare_cached(
                    "UPDATE inodes SET mode = ?2, uid = ?3, gid = ?4, atime = ?5, mtime = ?6,
                     ctime = ?7 WHERE ino = ?1",
                )?
                .execute(params![
                    ino as i64,
                    i.attr.kind.mode_bits() | perm,
                    uid,
                    gid,
                    atime,
                    mtime,
                    self.now
                ])?;
            self.changed_inode(ino);
        }
        Ok(inode::get(self.conn(), ino)?.attr)
    }
}

impl Fs {
    /// The attributes of inode `ino`. Errors: `ENOENT`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let r = self.inner.reader()?;
        Ok(inode::get(&r, ino)?.attr)
    }

    /// Changes the attributes named in `set` in one transaction; ctime
    /// becomes now. `size` truncates or extends (a hole) a regular file,
    /// touching only the chunks past the new end, and sets mtime.
    ///
    /// Errors: `ENOENT`; for `size`: `EISDIR`, `EINVAL` (not a regular
    /// file), `EFBIG` growing past [`crate::Limits::file_size_limit`].
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let mut t = self.begin()?;
        let a = t.setattr(ino, set)?;
        t.commit()?;
        Ok(a)
    }
}
