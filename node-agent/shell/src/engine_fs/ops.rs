//! The `FileSystem` and `FileSystemExt` operations of [`EngineFs`].
//!
//! Contract from bashkit `fs/traits.rs`: `stat` has `lstat` semantics,
//! writes need an existing parent, `write_file`/`copy` replace the target
//! atomically (one engine transaction, `write_all`), `mkdir -p` accepts an
//! existing directory.

use super::{EngineFs, NEW_DIR_PERM, NEW_FILE_PERM, READDIR_PAGE, UMASK, metadata, timespec};
use crate::errno::{errno_error, from_engine};
use agentcomputer_fs::Errno;
use agentcomputer_fs::{FileKind, Ino, RenameFlags, SetAttr, TimeSet, WriteMode};
use async_trait::async_trait;
use bashkit::{DirEntry, FileSystem, FileSystemExt, FsLimits, FsUsage, Metadata};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A directory entry by its parent and name.
type Entry = (Ino, Vec<u8>);

impl EngineFs {
    /// Writes `data` to `path` in one engine transaction; `true` when it
    /// went to a regular file (not a named pipe's buffer).
    pub(super) fn write_mode(
        &self,
        path: &Path,
        data: &[u8],
        mode: WriteMode,
    ) -> bashkit::Result<bool> {
        // One write is one engine transaction, which holds the exec's write
        // fence until it ends: bounding it by the memory budget bounds how
        // long a stopped exec can keep the runtime from answering.
        self.budget.admit(data.len() as u64, "the write")?;
        let (parent, name) = self.walk_parent(path, Errno::EISDIR)?;
        match self
            .fs
            .write_all(parent, &name, data, mode, NEW_FILE_PERM, self.owner)
        {
            Ok(_) => Ok(true),
            // Not a regular file: a named pipe takes the bytes in its buffer.
            Err(e) if e.errno() == Errno::EINVAL => match self.fs.lookup(parent, &name) {
                Ok(attr) if attr.kind == FileKind::NamedPipe => {
                    let mut fifos = self.fifo_buffer();
                    let buffer = fifos.entry(attr.ino).or_default();
                    let held = (buffer.len() + data.len()) as u64;
                    self.budget.admit(held, "the named pipe's buffer")?;
                    buffer.extend_from_slice(data);
                    Ok(false)
                }
                _ => Err(from_engine(e)),
            },
            Err(e) => Err(from_engine(e)),
        }
    }

    fn fifo_buffer(&self) -> parking_lot::MutexGuard<'_, std::collections::HashMap<Ino, Vec<u8>>> {
        self.fifos.lock()
    }

    fn mkdir_p(&self, path: &Path) -> bashkit::Result<()> {
        let mut dir = agentcomputer_fs::ROOT_INO;
        for name in super::components(path) {
            dir = match self.fs.lookup(dir, &name) {
                Ok(attr) if attr.kind == FileKind::Directory => attr.ino,
                // A link to a directory is resolved by the following layer.
                Ok(attr) if attr.kind == FileKind::Symlink => {
                    return Err(errno_error(Errno::ENOENT));
                }
                Ok(_) => return Err(errno_error(Errno::EEXIST)),
                Err(e) if e.errno() == Errno::ENOENT => {
                    match self.fs.mkdir(dir, &name, NEW_DIR_PERM, self.owner) {
                        Ok(attr) => attr.ino,
                        // Lost a race with another writer: take theirs.
                        Err(e) if e.errno() == Errno::EEXIST => {
                            let attr = self.fs.lookup(dir, &name).map_err(from_engine)?;
                            if attr.kind != FileKind::Directory {
                                return Err(errno_error(Errno::EEXIST));
                            }
                            attr.ino
                        }
                        Err(e) => return Err(from_engine(e)),
                    }
                }
                Err(e) => return Err(from_engine(e)),
            };
        }
        Ok(())
    }

    /// Empties directory `root` depth first, with an explicit stack so deep
    /// trees cannot exhaust the thread's stack. Each stack entry is a
    /// directory and, below the root, the (parent, name) entry naming it.
    fn clear_dir(&self, root: Ino) -> bashkit::Result<()> {
        let mut stack: Vec<(Ino, Option<Entry>)> = vec![(root, None)];
        while let Some((dir, _)) = stack.last() {
            let dir = *dir;
            let page = self.fs.readdir(dir, 0, READDIR_PAGE).map_err(from_engine)?;
            if page.is_empty() {
                if let Some((_, Some((parent, name)))) = stack.pop() {
                    self.fs.rmdir(parent, &name).map_err(from_engine)?;
                }
                continue;
            }
            for entry in page {
                if entry.kind == FileKind::Directory {
                    stack.push((entry.ino, Some((dir, entry.name))));
                    break;
                }
                self.fs.unlink(dir, &entry.name).map_err(from_engine)?;
            }
        }
        Ok(())
    }

    /// Every entry of `dir` with its attributes, one engine snapshot per
    /// page of entries; subdirectories go into the directory cache, since a
    /// listing is usually followed by walks into them (`find`, `grep -r`).
    fn list(&self, dir: Ino) -> bashkit::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let seen = self.dirs.generation();
            let (_, page) = self
                .fs
                .readdir_plus(dir, cookie, READDIR_PAGE)
                .map_err(from_engine)?;
            let Some((last, _)) = page.last() else { break };
            cookie = last.cookie;
            let full = page.len() == READDIR_PAGE;
            for (entry, attr) in page {
                self.dirs.insert(seen, dir, &entry.name, &attr);
                out.push(DirEntry {
                    name: String::from_utf8_lossy(&entry.name).into_owned(),
                    metadata: metadata(&attr),
                });
            }
            if !full {
                break;
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl FileSystem for EngineFs {
    async fn read_file(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        self.flush_appends()?;
        let attr = self.walk(path)?;
        match attr.kind {
            FileKind::Directory => Err(errno_error(Errno::EISDIR)),
            // The following layer resolves the link and retries.
            FileKind::Symlink => Err(errno_error(Errno::ENOENT)),
            FileKind::NamedPipe => Ok(self.fifo_buffer().remove(&attr.ino).unwrap_or_default()),
            _ => {
                // The logical size, not what is stored: a sparse file can
                // claim terabytes. Refuse before allocating.
                self.budget.admit(attr.size, "the file")?;
                self.fs.read_all(attr.ino).map_err(from_engine)
            }
        }
    }

    async fn write_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.flush_appends()?;
        self.write_mode(path, content, WriteMode::Truncate)
            .map(drop)
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.append(path, content)
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.flush_appends()?;
        if recursive {
            return self.mkdir_p(path);
        }
        let (parent, name) = self.walk_parent(path, Errno::EEXIST)?;
        self.fs
            .mkdir(parent, &name, NEW_DIR_PERM, self.owner)
            .map(drop)
            .map_err(from_engine)
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.flush_appends()?;
        let (parent, name) = self.walk_parent(path, Errno::EBUSY)?;
        let attr = self.fs.lookup(parent, &name).map_err(from_engine)?;
        if attr.kind != FileKind::Directory {
            return self.fs.unlink(parent, &name).map_err(from_engine);
        }
        if recursive {
            self.clear_dir(attr.ino)?;
        }
        self.fs.rmdir(parent, &name).map_err(from_engine)
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        // bashkit looks at the target before every piece of redirected
        // output: the file being appended to answers from its buffer.
        if let Some(meta) = self.appending(path) {
            return Ok(meta);
        }
        self.flush_appends()?;
        self.walk(path).map(|attr| metadata(&attr))
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        self.flush_appends()?;
        let attr = self.walk(path)?;
        match attr.kind {
            FileKind::Directory => self.list(attr.ino),
            FileKind::Symlink => Err(errno_error(Errno::ENOENT)),
            _ => Err(errno_error(Errno::ENOTDIR)),
        }
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        self.flush_appends()?;
        match self.walk(path) {
            Ok(_) => Ok(true),
            Err(bashkit::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.flush_appends()?;
        let (from_parent, from_name) = self.walk_parent(from, Errno::EBUSY)?;
        let (to_parent, to_name) = self.walk_parent(to, Errno::EBUSY)?;
        self.fs
            .rename(
                from_parent,
                &from_name,
                to_parent,
                &to_name,
                RenameFlags::default(),
            )
            .map_err(from_engine)
    }

    /// Streams the content through the engine in bounded steps (see
    /// `Fs::copy_file`), stopping between steps when the exec must stop;
    /// the target appears whole at the end or not at all. An existing
    /// target is replaced by the copy and keeps its permission bits; a new
    /// one gets the source's, less the umask, as cp(1) does.
    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.flush_appends()?;
        let src = self.walk(from)?;
        match src.kind {
            FileKind::Directory => return Err(errno_error(Errno::EISDIR)),
            FileKind::Symlink => return Err(errno_error(Errno::ENOENT)),
            _ => {}
        }
        let (mut parent, mut name) = self.walk_parent(to, Errno::EISDIR)?;
        let mut perm = src.perm & 0o777 & !UMASK;
        // Follow a symlink at the target, as open(2) of the target would.
        for _ in 0..=agentcomputer_fs::MAX_SYMLINK_HOPS {
            match self.fs.lookup(parent, &name) {
                Ok(attr) if attr.kind == FileKind::Symlink => {
                    let target = self.fs.readlink(attr.ino).map_err(from_engine)?;
                    (parent, name) = self
                        .fs
                        .resolve_parent(parent, rebase_target(&target))
                        .map_err(from_engine)?;
                    continue;
                }
                Ok(attr) if attr.kind == FileKind::Directory => {
                    return Err(errno_error(Errno::EISDIR));
                }
                Ok(attr) => perm = attr.perm,
                Err(e) if e.errno() == Errno::ENOENT => {}
                Err(e) => return Err(from_engine(e)),
            }
            let stop = || self.budget.stopped();
            return self
                .fs
                .copy_file(src.ino, parent, &name, perm, self.owner, true, &stop)
                .map(drop)
                .map_err(from_engine);
        }
        Err(errno_error(Errno::ELOOP))
    }

    async fn symlink(&self, target: &Path, link: &Path) -> bashkit::Result<()> {
        self.flush_appends()?;
        let (parent, name) = self.walk_parent(link, Errno::EEXIST)?;
        let target = target.as_os_str().as_encoded_bytes();
        self.fs
            .symlink(parent, &name, target, self.owner)
            .map(drop)
            .map_err(from_engine)
    }

    async fn read_link(&self, path: &Path) -> bashkit::Result<PathBuf> {
        self.flush_appends()?;
        let attr = self.walk(path)?;
        if attr.kind != FileKind::Symlink {
            return Err(errno_error(Errno::EINVAL));
        }
        let target = self.fs.readlink(attr.ino).map_err(from_engine)?;
        Ok(PathBuf::from(OsString::from_vec(target)))
    }

    async fn chmod(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        self.flush_appends()?;
        let attr = self.walk(path)?;
        let change = SetAttr {
            perm: Some(mode & 0o7777),
            ..SetAttr::default()
        };
        self.fs
            .setattr(attr.ino, &change)
            .map(drop)
            .map_err(from_engine)
    }

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> bashkit::Result<()> {
        self.flush_appends()?;
        let attr = self.walk(path)?;
        let change = SetAttr {
            mtime: Some(TimeSet::At(timespec(time))),
            ..SetAttr::default()
        };
        self.fs
            .setattr(attr.ino, &change)
            .map(drop)
            .map_err(from_engine)
    }
}

#[async_trait]
impl FileSystemExt for EngineFs {
    /// Bytes and inodes in use, from the engine's O(1) counters. The engine
    /// does not count directories apart, so every inode shows as a file.
    fn usage(&self) -> FsUsage {
        match self.fs.statfs() {
            Ok(s) => FsUsage::new(s.used_bytes, s.used_inodes, 0),
            Err(_) => FsUsage::default(),
        }
    }

    /// The computer's quota as bashkit limits: `max_total_bytes` and
    /// `max_file_size` are the byte quota (in whole statfs blocks), the file
    /// and directory counts the inode quota; name and path lengths are Linux
    /// `NAME_MAX`/`PATH_MAX`. bashkit asks for these on every path it
    /// checks, so they come from the engine's in-memory quota, not a
    /// transaction.
    fn limits(&self) -> FsLimits {
        let mut limits = FsLimits::default();
        let quota = self.fs.limits();
        let block = u64::from(agentcomputer_fs::STATFS_BLOCK_SIZE);
        let bytes = quota.max_bytes / block * block;
        limits.max_total_bytes = bytes;
        limits.max_file_size = bytes;
        limits.max_file_count = quota.max_inodes;
        limits.max_dir_count = quota.max_inodes;
        limits.max_filename_length = agentcomputer_fs::NAME_MAX;
        limits.max_path_length = agentcomputer_fs::PATH_MAX;
        limits
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        self.flush_appends()?;
        let (parent, name) = self.walk_parent(path, Errno::EEXIST)?;
        self.fs
            .mknod(
                parent,
                &name,
                FileKind::NamedPipe,
                // bashkit passes 0666 when no -m was given; bash's umask
                // would take group and other write away.
                mode & 0o7777 & !UMASK,
                0,
                self.owner,
            )
            .map(drop)
            .map_err(from_engine)
    }

    fn backend_kind(&self) -> &'static str {
        "agentcomputer-engine"
    }
}

/// An absolute symlink target (a path of the shell's namespace) as a path
/// from the engine's root: `/workspace/a` is `/a`.
fn rebase_target(target: &[u8]) -> &[u8] {
    let prefix = crate::WORKSPACE.as_bytes();
    match target.strip_prefix(prefix) {
        Some(b"") => b"/",
        Some(rest) if rest.starts_with(b"/") => rest,
        _ => target,
    }
}
