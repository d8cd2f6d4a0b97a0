//! Whole-file helpers for the API and the shell, built on the inode calls.

use crate::data::{read_in, regular};
use crate::namespace::{NewKind, readlink_in};
use crate::path::{rebase_target, resolve_in, resolve_parent_in};
use crate::{Attr, Errno, FileKind, Fs, Ino, MAX_SYMLINK_HOPS, Owner, Result, dirent, inode};

/// How [`Fs::write_all`] treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Create if missing, else replace the whole content (`O_CREAT|O_TRUNC`).
    Truncate,
    /// Create if missing, else add at the end (`O_CREAT|O_APPEND`).
    Append,
    /// Create; `EEXIST` if the name exists, even as a dangling symlink
    /// (`O_CREAT|O_EXCL`).
    CreateNew,
}

impl Fs {
    /// The whole content of file `ino`, read in one snapshot.
    ///
    /// Errors: as [`Fs::read`]. The content is held in memory: for large
    /// files read ranges with [`Fs::read`] instead.
    pub fn read_all(&self, ino: Ino) -> Result<Vec<u8>> {
        let r = self.inner.reader()?;
        let cs = self.inner.chunk_size;
        r.snapshot(|c| {
            let f = regular(inode::get(c, ino)?)?;
            let len = usize::try_from(f.attr.size).map_err(|_| Errno::EFBIG)?;
            read_in(c, cs, ino, 0, len)
        })
    }

    /// Writes a whole file at `path` in one transaction: creates it (with
    /// `perm` and `owner`) if missing, then truncates or appends per
    /// `mode`. Other readers see the old content or the new, never a mix.
    /// A final symlink is followed, also when dangling (the file is created
    /// at its target), as `open(2)` with `O_CREAT` does.
    ///
    /// Errors: `EEXIST` (`CreateNew`), `EISDIR` (a directory, or a path
    /// ending in `/` that does not exist), `EINVAL` (not a regular file),
    /// `ENOSPC`, `EFBIG`, and the path errors of [`Fs::resolve`].
    pub fn write_all(
        &self,
        cwd: Ino,
        path: &[u8],
        data: &[u8],
        mode: WriteMode,
        perm: u32,
        owner: Owner,
    ) -> Result<Attr> {
        let mut t = self.begin()?;
        let existing = match resolve_in(t.conn(), cwd, path, true) {
            Ok(a) => {
                if mode == WriteMode::CreateNew {
                    return Err(Errno::EEXIST.into());
                }
                Some(regular(inode::get(t.conn(), a.ino)?)?)
            }
            Err(e) if e.errno() == Errno::ENOENT => None,
            Err(e) => return Err(e),
        };
        let (ino, offset) = match existing {
            Some(f) if mode == WriteMode::Append => (f.attr.ino, f.attr.size),
            Some(f) => {
                t.truncate(&f, 0)?;
                (f.attr.ino, 0)
            }
            None => {
                if path.ends_with(b"/") {
                    return Err(Errno::EISDIR.into());
                }
                let (mut dir, mut name) = resolve_parent_in(t.conn(), cwd, path)?;
                // Follow dangling symlinks to the place the file goes.
                let mut hops = 0;
                while let Some(l) = dirent::find(t.conn(), dir, &name)? {
                    if l.attr.kind != FileKind::Symlink || mode == WriteMode::CreateNew {
                        return Err(Errno::EEXIST.into());
                    }
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(Errno::ELOOP.into());
                    }
                    let target = readlink_in(t.conn(), l.attr.ino)?;
                    (dir, name) = resolve_parent_in(t.conn(), dir, rebase_target(&target))?;
                }
                let a = t.create(
                    dir,
                    &name,
                    NewKind::Node(FileKind::RegularFile, 0),
                    perm,
                    owner,
                )?;
                (a.ino, 0)
            }
        };
        t.write_data(ino, offset, data)?;
        let a = inode::get(t.conn(), ino)?.attr;
        t.commit()?;
        Ok(a)
    }
}
