//! [`Files`]: the few whole-file and directory calls git needs, over the
//! engine, by engine-absolute path (`/proj/.git/HEAD` is the engine root's
//! `proj/.git/HEAD`).
//!
//! Every call is one short engine transaction. Files git replaces as a
//! whole (refs, the index, `HEAD`) are written through a `NAME.lock` file
//! made with `O_EXCL` and renamed over the target, the protocol real git
//! uses (git `lockfile.c`), so a real git working on the same files
//! through the mount and this code exclude each other.

use crate::error::{Error, Result};
use agentcomputer_fs::{
    Attr, Errno, FileKind, Fs, Ino, Owner, ROOT_INO, RenameFlags, SetAttr, WriteMode,
};

/// Mode bits of files git creates (`0666` less the usual umask `022`).
pub const FILE_PERM: u32 = 0o644;
/// Mode bits of executable files checked out (`0777` less `022`).
pub const EXEC_PERM: u32 = 0o755;
/// Mode bits of directories git creates.
pub const DIR_PERM: u32 = 0o755;
/// Mode bits of loose objects and packs, which git makes read-only.
pub const OBJECT_PERM: u32 = 0o444;

/// Entries read per `readdir` call.
const PAGE: usize = 1024;

/// Engine access for one git command; cheap to clone.
#[derive(Clone)]
pub struct Files {
    fs: Fs,
    owner: Owner,
    /// The most one file or object may take when held whole, bytes (the
    /// exec's memory budget); larger ones are streamed or refused.
    max_whole: u64,
}

/// Joins `a` and `b` with one `/`.
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut p = a.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(b.strip_prefix(b"/").unwrap_or(b));
    p
}

impl Files {
    /// Access to `fs`; inodes this creates belong to `owner`.
    pub fn new(fs: Fs, owner: Owner) -> Self {
        Self {
            fs,
            owner,
            max_whole: u64::MAX,
        }
    }

    /// The same access, holding no file or object of more than `bytes`
    /// whole (the exec's memory budget): past it a command fails with
    /// [`Error::TooLarge`] instead of growing the node agent's memory.
    pub fn with_max_whole(mut self, bytes: u64) -> Self {
        self.max_whole = bytes;
        self
    }

    /// The limit set by [`Files::with_max_whole`].
    pub fn max_whole(&self) -> u64 {
        self.max_whole
    }

    /// [`Error::TooLarge`] when `bytes` of `what` may not be held whole.
    pub fn admit(&self, bytes: u64, what: &str) -> Result<()> {
        if bytes > self.max_whole {
            return Err(Error::TooLarge {
                what: what.to_string(),
                bytes,
                limit: self.max_whole,
            });
        }
        Ok(())
    }

    /// The same access with the engine's group commit: calls within
    /// `window` of each other share one transaction (see
    /// `Fs::with_commit_window`); [`Files::flush`] commits the rest.
    pub fn with_commit_window(&self, window: std::time::Duration) -> Self {
        Self {
            fs: self.fs.with_commit_window(window),
            owner: self.owner,
            max_whole: self.max_whole,
        }
    }

    /// Commits what a group-commit view has not committed yet.
    pub fn flush(&self) -> Result<()> {
        self.fs.flush().map_err(|e| Error::engine(b"", e))
    }

    /// The engine handle.
    pub fn engine(&self) -> &Fs {
        &self.fs
    }

    /// The attributes of `path`, not following a final symlink; `None`
    /// when it does not exist (or a parent is not a directory).
    pub fn lstat(&self, path: &[u8]) -> Result<Option<Attr>> {
        self.stat_inner(path, false)
    }

    /// The attributes of `path`, following symlinks; `None` when missing.
    pub fn stat(&self, path: &[u8]) -> Result<Option<Attr>> {
        self.stat_inner(path, true)
    }

    fn stat_inner(&self, path: &[u8], follow: bool) -> Result<Option<Attr>> {
        match self.fs.resolve(ROOT_INO, path, follow) {
            Ok(a) => Ok(Some(a)),
            Err(e) if matches!(e.errno(), Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(Error::engine(path, e)),
        }
    }

    /// Whole content of the regular file at `path`; `None` when missing.
    pub fn read(&self, path: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(a) = self.stat(path)? else {
            return Ok(None);
        };
        if a.kind != FileKind::RegularFile {
            return Ok(None);
        }
        self.read_ino(a.ino).map(Some).map_err(|e| e.at(path))
    }

    /// Whole content of file `ino`.
    pub fn read_ino(&self, ino: Ino) -> Result<Vec<u8>> {
        let size = self
            .fs
            .getattr(ino)
            .map_err(|e| Error::engine(b"", e))?
            .size;
        self.admit(size, "a file")?;
        self.fs.read_all(ino).map_err(|e| Error::engine(b"", e))
    }

    /// The target of the symlink at `path`.
    pub fn readlink(&self, path: &[u8]) -> Result<Vec<u8>> {
        let a = self
            .fs
            .resolve(ROOT_INO, path, false)
            .map_err(|e| Error::engine(path, e))?;
        self.fs.readlink(a.ino).map_err(|e| Error::engine(path, e))
    }

    /// Makes `path` and its missing parents directories.
    pub fn mkdir_p(&self, path: &[u8]) -> Result<()> {
        let mut dir = ROOT_INO;
        for part in path.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
            dir = match self.fs.lookup(dir, part) {
                Ok(a) if a.kind == FileKind::Directory => a.ino,
                Ok(_) => return Err(Error::engine(path, Errno::ENOTDIR.into())),
                Err(e) if e.errno() == Errno::ENOENT => {
                    match self.fs.mkdir(dir, part, DIR_PERM, self.owner) {
                        Ok(a) => a.ino,
                        // Made by someone else meanwhile.
                        Err(e) if e.errno() == Errno::EEXIST => {
                            self.fs
                                .lookup(dir, part)
                                .map_err(|e| Error::engine(path, e))?
                                .ino
                        }
                        Err(e) => return Err(Error::engine(path, e)),
                    }
                }
                Err(e) => return Err(Error::engine(path, e)),
            };
        }
        Ok(())
    }

    /// Writes `data` as the whole content of `path` in one transaction,
    /// making missing parents; `perm` applies to a new file and is set on
    /// an existing one.
    pub fn write(&self, path: &[u8], data: &[u8], perm: u32) -> Result<()> {
        self.mkdir_parent(path)?;
        let a = self
            .fs
            .write_all(ROOT_INO, path, data, WriteMode::Truncate, perm, self.owner)
            .map_err(|e| Error::engine(path, e))?;
        if a.perm & 0o7777 != perm {
            self.chmod_ino(a.ino, perm, path)?;
        }
        Ok(())
    }

    /// Writes `data` to `path` only if nothing is there: objects are named
    /// by their content, so an existing one already holds these bytes.
    pub fn write_new(&self, path: &[u8], data: &[u8], perm: u32) -> Result<()> {
        // Try first: the parent (`objects/xx`) usually exists already.
        for attempt in 0..2 {
            match self
                .fs
                .write_all(ROOT_INO, path, data, WriteMode::CreateNew, perm, self.owner)
            {
                Ok(_) => return Ok(()),
                Err(e) if e.errno() == Errno::EEXIST => return Ok(()),
                Err(e) if e.errno() == Errno::ENOENT && attempt == 0 => self.mkdir_parent(path)?,
                Err(e) => return Err(Error::engine(path, e)),
            }
        }
        Ok(())
    }

    /// Replaces `path` with `data` through `path.lock` (see the module doc).
    ///
    /// Errors: [`Error::Locked`] when the lock file exists, which real git
    /// reports as "Unable to create '….lock': File exists."
    pub fn replace_locked(&self, path: &[u8], data: &[u8]) -> Result<()> {
        self.mkdir_parent(path)?;
        let mut lock = path.to_vec();
        lock.extend_from_slice(b".lock");
        match self.fs.write_all(
            ROOT_INO,
            &lock,
            data,
            WriteMode::CreateNew,
            FILE_PERM,
            self.owner,
        ) {
            Ok(_) => {}
            Err(e) if e.errno() == Errno::EEXIST => {
                return Err(Error::Locked(String::from_utf8_lossy(&lock).into_owned()));
            }
            Err(e) => return Err(Error::engine(&lock, e)),
        }
        self.rename(&lock, path).inspect_err(|_| {
            let _ = self.remove_file(&lock);
        })
    }

    /// Renames `from` to `to`, replacing `to`.
    pub fn rename(&self, from: &[u8], to: &[u8]) -> Result<()> {
        let (fp, fname) = self
            .fs
            .resolve_parent(ROOT_INO, from)
            .map_err(|e| Error::engine(from, e))?;
        self.mkdir_parent(to)?;
        let (tp, tname) = self
            .fs
            .resolve_parent(ROOT_INO, to)
            .map_err(|e| Error::engine(to, e))?;
        self.fs
            .rename(fp, &fname, tp, &tname, RenameFlags::default())
            .map_err(|e| Error::engine(to, e))
    }

    /// Removes the file or symlink at `path`; missing is not an error.
    pub fn remove_file(&self, path: &[u8]) -> Result<()> {
        let (parent, name) = match self.fs.resolve_parent(ROOT_INO, path) {
            Ok(p) => p,
            Err(e) if matches!(e.errno(), Errno::ENOENT | Errno::ENOTDIR) => return Ok(()),
            Err(e) => return Err(Error::engine(path, e)),
        };
        match self.fs.unlink(parent, &name) {
            Ok(()) => Ok(()),
            Err(e) if e.errno() == Errno::ENOENT => Ok(()),
            Err(e) => Err(Error::engine(path, e)),
        }
    }

    /// Removes the directory at `path` and then each parent up to (not
    /// including) `stop` while they are empty, as git does after removing
    /// a file from the work tree.
    pub fn remove_empty_dirs(&self, path: &[u8], stop: &[u8]) -> Result<()> {
        let mut dir = path.to_vec();
        while dir.len() > stop.len() && dir.starts_with(stop) {
            let (parent, name) = match self.fs.resolve_parent(ROOT_INO, &dir) {
                Ok(p) => p,
                Err(_) => return Ok(()),
            };
            if self.fs.rmdir(parent, &name).is_err() {
                return Ok(());
            }
            match dir.iter().rposition(|b| *b == b'/') {
                Some(i) => dir.truncate(i),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Makes a symlink at `path` pointing at `target`, replacing a file.
    pub fn symlink(&self, path: &[u8], target: &[u8]) -> Result<()> {
        self.mkdir_parent(path)?;
        self.remove_file(path)?;
        let (parent, name) = self
            .fs
            .resolve_parent(ROOT_INO, path)
            .map_err(|e| Error::engine(path, e))?;
        self.fs
            .symlink(parent, &name, target, self.owner)
            .map(|_| ())
            .map_err(|e| Error::engine(path, e))
    }

    fn chmod_ino(&self, ino: Ino, perm: u32, path: &[u8]) -> Result<()> {
        let set = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.fs
            .setattr(ino, &set)
            .map(|_| ())
            .map_err(|e| Error::engine(path, e))
    }

    /// The entries of directory `dir` (an inode), with their attributes,
    /// without `.` and `..`, in the engine's order.
    pub fn list_ino(&self, dir: Ino) -> Result<Vec<(Vec<u8>, Attr)>> {
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let (_, page) = self
                .fs
                .readdir_plus(dir, cookie, PAGE)
                .map_err(|e| Error::engine(b"", e))?;
            let Some(last) = page.last() else { break };
            cookie = last.0.cookie;
            let full = page.len() == PAGE;
            out.extend(
                page.into_iter()
                    .filter(|(d, _)| d.name != b"." && d.name != b"..")
                    .map(|(d, a)| (d.name, a)),
            );
            if !full {
                break;
            }
        }
        Ok(out)
    }

    /// The entry names of directory `path`; empty when it does not exist.
    pub fn list(&self, path: &[u8]) -> Result<Vec<(Vec<u8>, Attr)>> {
        match self.stat(path)? {
            Some(a) if a.kind == FileKind::Directory => self.list_ino(a.ino),
            _ => Ok(Vec::new()),
        }
    }

    fn mkdir_parent(&self, path: &[u8]) -> Result<()> {
        if let Some(i) = path.iter().rposition(|b| *b == b'/')
            && i > 0
        {
            self.mkdir_p(&path[..i])?;
        }
        Ok(())
    }
}
