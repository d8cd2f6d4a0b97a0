//! The file operations behind `node:fs`, over the [`Vfs`] namespace.
//!
//! Semantics follow the Linux system calls Node's fs uses (`open(2)`,
//! `mkdir(2)`, `rename(2)`, ...); each failure is a [`SysError`] naming the
//! syscall and the path as the caller wrote it, as Node's errors do.

use std::cell::RefCell;
use std::collections::HashMap;

use agentcomputer_fs::{
    Attr, Errno, FileKind, Fs, Handle, ROOT_INO, RenameFlags, SetAttr, TimeSet, Timespec, WriteMode,
};

use crate::errno::SysError;
use crate::vfs::{Mount, Node, ParentError, Place, Vfs};

/// The process umask applied to new files and directories (Node's default).
pub(crate) const UMASK: u32 = 0o022;
/// Entries fetched per `readdir` page.
const READDIR_PAGE: usize = 1024;
/// First descriptor handed out (0-2 are the standard streams).
const FIRST_FD: i32 = 3;
/// Descriptors one exec may hold open at once (`RLIMIT_NOFILE`-like).
const MAX_OPEN_FILES: usize = 1024;

/// How a file is opened (the `O_*` flags `open(2)` takes that matter here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub excl: bool,
    pub truncate: bool,
}

impl OpenFlags {
    /// Node's string flags (`fs.open` docs, "File system flags").
    pub(crate) fn parse(flags: &str) -> Option<OpenFlags> {
        let f = |read, write, append, create, excl, truncate| {
            Some(OpenFlags {
                read,
                write,
                append,
                create,
                excl,
                truncate,
            })
        };
        match flags {
            "r" | "rs" | "sr" => f(true, false, false, false, false, false),
            "r+" | "rs+" | "sr+" => f(true, true, false, false, false, false),
            "w" => f(false, true, false, true, false, true),
            "wx" | "xw" => f(false, true, false, true, true, true),
            "w+" => f(true, true, false, true, false, true),
            "wx+" | "xw+" => f(true, true, false, true, true, true),
            "a" | "as" | "sa" => f(false, true, true, true, false, false),
            "ax" | "xa" => f(false, true, true, true, true, false),
            "a+" | "as+" | "sa+" => f(true, true, true, true, false, false),
            "ax+" | "xa+" => f(true, true, true, true, true, false),
            _ => None,
        }
    }

    /// Linux `O_*` bits (x86-64 values, as `fs.constants` exposes them).
    pub(crate) fn from_bits(bits: i32) -> OpenFlags {
        let acc = bits & 3;
        OpenFlags {
            read: acc == 0 || acc == 2,
            write: acc == 1 || acc == 2,
            append: bits & 0o2000 != 0,
            create: bits & 0o100 != 0,
            excl: bits & 0o200 != 0,
            truncate: bits & 0o1000 != 0,
        }
    }
}

struct OpenFile {
    fs: Fs,
    mount: Mount,
    handle: Handle,
    flags: OpenFlags,
    position: u64,
}

/// The fs state of one exec: its namespace and its open descriptors.
pub(crate) struct FsOps {
    pub vfs: Vfs,
    files: RefCell<HashMap<i32, OpenFile>>,
    next_fd: RefCell<i32>,
}

type R<T> = Result<T, SysError>;

fn attr_now(ts: f64) -> TimeSet {
    let ns = (ts * 1e9).round() as i64;
    TimeSet::At(Timespec::from_nanos(ns))
}

impl FsOps {
    pub(crate) fn new(vfs: Vfs) -> FsOps {
        FsOps {
            vfs,
            files: RefCell::new(HashMap::new()),
            next_fd: RefCell::new(FIRST_FD),
        }
    }

    /// Closes every descriptor (end of the exec).
    pub(crate) fn close_all(&self) {
        self.files.borrow_mut().clear();
    }

    fn err(errno: Errno, syscall: &'static str, path: &str) -> SysError {
        SysError::new(errno, syscall, path)
    }

    /// `stat(2)` / `lstat(2)`.
    pub(crate) fn stat(&self, path: &str, follow: bool) -> R<Node> {
        let sc = if follow { "stat" } else { "lstat" };
        self.vfs
            .resolve(path, follow)
            .map_err(|e| Self::err(e, sc, path))
    }

    /// The directory and final name for creating or removing `path`.
    fn parent(
        &self,
        path: &str,
        syscall: &'static str,
        root: Errno,
        root_child: Errno,
    ) -> R<(Mount, Fs, u64, Vec<u8>)> {
        self.vfs.parent(path).map_err(|e| {
            let errno = match e {
                ParentError::Root => root,
                ParentError::RootChild => root_child,
                ParentError::Errno(e) => e,
            };
            Self::err(errno, syscall, path)
        })
    }

    /// The engine and path-inside-mount for the whole-file calls.
    fn placed(
        &self,
        path: &str,
        syscall: &'static str,
        root_child: Errno,
    ) -> R<(Mount, Fs, Vec<u8>)> {
        match self
            .vfs
            .place(path)
            .map_err(|e| Self::err(e, syscall, path))?
        {
            Place::Root => Err(Self::err(Errno::EISDIR, syscall, path)),
            Place::RootChild => Err(Self::err(root_child, syscall, path)),
            Place::In(m, rel) => {
                let fs = self.vfs.fs(m).map_err(|e| Self::err(e, syscall, path))?;
                Ok((m, fs, rel))
            }
        }
    }

    fn fs_of(&self, node: &Node, syscall: &'static str, path: &str) -> R<Fs> {
        match node.mount {
            Some(m) => self.vfs.fs(m).map_err(|e| Self::err(e, syscall, path)),
            None => Err(Self::err(Errno::EPERM, syscall, path)),
        }
    }

    /// The whole content of a regular file (following symlinks); `EFBIG`
    /// past `max` bytes, so a huge file cannot be pulled into host memory.
    pub(crate) fn read_file(&self, path: &str, max: u64) -> R<Vec<u8>> {
        let node = self
            .vfs
            .resolve(path, true)
            .map_err(|e| Self::err(e, "open", path))?;
        if node.attr.kind == FileKind::Directory {
            return Err(Self::err(Errno::EISDIR, "read", path));
        }
        if node.attr.size > max {
            return Err(Self::err(Errno::EFBIG, "read", path));
        }
        let fs = self.fs_of(&node, "open", path)?;
        fs.read_all(node.attr.ino)
            .map_err(|e| SysError::from_fs(&e, "read", path))
    }

    /// Creates, truncates or appends to a whole file in one transaction.
    pub(crate) fn write_file(
        &self,
        path: &str,
        data: &[u8],
        mode: WriteMode,
        perm: u32,
    ) -> R<Attr> {
        let (_, fs, rel) = self.placed(path, "open", Errno::EACCES)?;
        fs.write_all(ROOT_INO, &rel, data, mode, perm & !UMASK, self.vfs.owner)
            .map_err(|e| SysError::from_fs(&e, "open", path))
    }

    /// `mkdir(2)`, or `mkdir -p` when `recursive`: then returns the first
    /// directory created (as Node does), `None` if all existed.
    pub(crate) fn mkdir(&self, path: &str, perm: u32, recursive: bool) -> R<Option<String>> {
        let perm = perm & !UMASK;
        if !recursive {
            let (_, fs, dir, name) = self.parent(path, "mkdir", Errno::EEXIST, Errno::EACCES)?;
            fs.mkdir(dir, &name, perm, self.vfs.owner)
                .map_err(|e| SysError::from_fs(&e, "mkdir", path))?;
            return Ok(None);
        }
        let full = crate::vfs::normalize(&self.vfs.absolute(path));
        let mut first = None;
        let mut prefix = String::new();
        for comp in full.split('/').filter(|c| !c.is_empty()) {
            prefix.push('/');
            prefix.push_str(comp);
            match self.vfs.resolve(&prefix, true) {
                Ok(n) if n.attr.kind == FileKind::Directory => continue,
                Ok(_) if prefix.len() == full.len() => {
                    return Err(Self::err(Errno::EEXIST, "mkdir", path));
                }
                Ok(_) => return Err(Self::err(Errno::ENOTDIR, "mkdir", path)),
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(Self::err(e, "mkdir", path)),
            }
            let (_, fs, dir, name) = self.parent(&prefix, "mkdir", Errno::EEXIST, Errno::EACCES)?;
            match fs.mkdir(dir, &name, perm, self.vfs.owner) {
                Ok(_) => {
                    if first.is_none() {
                        first = Some(prefix.clone());
                    }
                }
                Err(e) if e.errno() == Errno::EEXIST => {}
                Err(e) => return Err(SysError::from_fs(&e, "mkdir", path)),
            }
        }
        Ok(first)
    }

    /// The entries of a directory (names and kinds), without `.` and `..`.
    pub(crate) fn readdir(&self, path: &str) -> R<Vec<(Vec<u8>, FileKind)>> {
        let node = self.stat(path, true).map_err(|mut e| {
            e.syscall = "scandir";
            e
        })?;
        let Some(m) = node.mount else {
            return Ok(vec![
                (b"tmp".to_vec(), FileKind::Directory),
                (b"workspace".to_vec(), FileKind::Directory),
            ]);
        };
        if node.attr.kind != FileKind::Directory {
            return Err(Self::err(Errno::ENOTDIR, "scandir", path));
        }
        let fs = self.vfs.fs(m).map_err(|e| Self::err(e, "scandir", path))?;
        let mut out = Vec::new();
        self.each_entry(&fs, node.attr.ino, |e| {
            out.push((e.name, e.kind));
            Ok(())
        })
        .map_err(|e| Self::err(e, "scandir", path))?;
        Ok(out)
    }

    fn each_entry(
        &self,
        fs: &Fs,
        dir: u64,
        mut f: impl FnMut(agentcomputer_fs::DirEntry) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let mut cookie = 0;
        loop {
            let page = fs
                .readdir(dir, cookie, READDIR_PAGE)
                .map_err(|e| e.errno())?;
            let done = page.len() < READDIR_PAGE;
            for e in page {
                cookie = e.cookie;
                f(e)?;
            }
            if done {
                return Ok(());
            }
        }
    }

    /// `unlink(2)`.
    pub(crate) fn unlink(&self, path: &str) -> R<()> {
        let (_, fs, dir, name) = self.parent(path, "unlink", Errno::EISDIR, Errno::ENOENT)?;
        trailing_slash(&fs, dir, &name, path, "unlink", Slash::Source)?;
        fs.unlink(dir, &name)
            .map_err(|e| SysError::from_fs(&e, "unlink", path))
    }

    /// `rmdir(2)`.
    pub(crate) fn rmdir(&self, path: &str) -> R<()> {
        let (_, fs, dir, name) = self.parent(path, "rmdir", Errno::EBUSY, Errno::ENOENT)?;
        fs.rmdir(dir, &name)
            .map_err(|e| SysError::from_fs(&e, "rmdir", path))
    }

    /// Node's `fs.rm`: `recursive` removes whole trees, `force` ignores a
    /// missing path. Symlinks are removed, never followed.
    pub(crate) fn rm(&self, path: &str, recursive: bool, force: bool) -> R<()> {
        let node = match self.vfs.resolve(path, false) {
            Ok(n) => n,
            Err(Errno::ENOENT) if force => return Ok(()),
            Err(e) => return Err(Self::err(e, "rm", path)),
        };
        if node.attr.kind != FileKind::Directory {
            return self.unlink(path);
        }
        if !recursive {
            return Err(Self::err(Errno::EISDIR, "rm", path));
        }
        let Some(m) = node.mount else {
            return Err(Self::err(Errno::EBUSY, "rm", path));
        };
        let fs = self.vfs.fs(m).map_err(|e| Self::err(e, "rm", path))?;
        self.remove_tree(&fs, node.attr.ino)
            .map_err(|e| Self::err(e, "rm", path))?;
        self.rmdir(path)
    }

    /// Removes everything inside directory `dir` (depth first).
    fn remove_tree(&self, fs: &Fs, dir: u64) -> Result<(), Errno> {
        loop {
            // Deleting while paging would skip entries: take a page, delete
            // it, and start over until the directory is empty.
            let page = fs.readdir(dir, 0, READDIR_PAGE).map_err(|e| e.errno())?;
            if page.is_empty() {
                return Ok(());
            }
            for e in page {
                if e.kind == FileKind::Directory {
                    self.remove_tree(fs, e.ino)?;
                    fs.rmdir(dir, &e.name).map_err(|e| e.errno())?;
                } else {
                    fs.unlink(dir, &e.name).map_err(|e| e.errno())?;
                }
            }
        }
    }

    /// `rename(2)`; across `/workspace` and `/tmp` it is `EXDEV`.
    pub(crate) fn rename(&self, from: &str, to: &str) -> R<()> {
        let with_dest = |e: SysError| e.with_dest(to);
        let (m1, fs, d1, n1) = self
            .parent(from, "rename", Errno::EBUSY, Errno::ENOENT)
            .map_err(with_dest)?;
        let (m2, _, d2, n2) = self
            .parent(to, "rename", Errno::EBUSY, Errno::EACCES)
            .map_err(with_dest)?;
        if m1 != m2 {
            return Err(Self::err(Errno::EXDEV, "rename", from).with_dest(to));
        }
        if ends_in_slash(to) && !ends_in_slash(from) {
            // `to/` too makes the source a directory or ENOTDIR.
            trailing_slash(&fs, d1, &n1, to, "rename", Slash::Source).map_err(with_dest)?;
        }
        trailing_slash(&fs, d1, &n1, from, "rename", Slash::Source).map_err(with_dest)?;
        fs.rename(d1, &n1, d2, &n2, RenameFlags::default())
            .map_err(|e| SysError::from_fs(&e, "rename", from).with_dest(to))
    }

    /// `copyFile`: content and permission bits; `excl` fails if `to` exists.
    ///
    /// The content moves in bounded steps ([`agentcomputer_fs::COPY_STEP_BYTES`]),
    /// never whole: a sparse file of any logical size copies in memory of
    /// one step, its holes skipped. `stop` is asked between steps; when it
    /// says yes the copy fails with `ECANCELED`. Within one filesystem the
    /// copy is built unnamed and named at the end (the target is the old
    /// file or the whole copy, never a part); across filesystems (`/tmp`
    /// and `/workspace`), or onto a symlink, it is written in place.
    pub(crate) fn copy_file(
        &self,
        from: &str,
        to: &str,
        excl: bool,
        stop: &dyn Fn() -> bool,
    ) -> R<()> {
        let with_dest = |mut e: SysError| {
            e.syscall = "copyfile";
            e.path = Some(from.to_string());
            e.with_dest(to)
        };
        let node = self.stat(from, true).map_err(with_dest)?;
        if node.attr.kind != FileKind::RegularFile {
            let errno = if node.attr.kind == FileKind::Directory {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            };
            return Err(with_dest(Self::err(errno, "copyfile", from)));
        }
        let src_fs = self.fs_of(&node, "open", from).map_err(with_dest)?;
        let (mount, fs, rel) = self
            .placed(to, "copyfile", Errno::EACCES)
            .map_err(with_dest)?;
        let fail = |e: agentcomputer_fs::Error| with_dest(SysError::from_fs(&e, "copyfile", from));
        if node.mount == Some(mount) {
            let (dir, name) = fs.resolve_parent(ROOT_INO, &rel).map_err(fail)?;
            let target = match fs.lookup(dir, &name) {
                Ok(a) => Some(a),
                Err(e) if e.errno() == Errno::ENOENT => None,
                Err(e) => return Err(fail(e)),
            };
            match target {
                Some(_) if excl => return Err(fail(Errno::EEXIST.into())),
                Some(a) if a.kind == FileKind::Directory => return Err(fail(Errno::EISDIR.into())),
                Some(a) if a.kind == FileKind::Symlink => {}
                _ => {
                    fs.copy_file(
                        node.attr.ino,
                        dir,
                        &name,
                        node.attr.perm,
                        self.vfs.owner,
                        !excl,
                        stop,
                    )
                    .map_err(fail)?;
                    return Ok(());
                }
            }
        }
        let mode = if excl {
            WriteMode::CreateNew
        } else {
            WriteMode::Truncate
        };
        let attr = fs
            .write_all(ROOT_INO, &rel, &[], mode, node.attr.perm, self.vfs.owner)
            .map_err(fail)?;
        let mut buf = vec![0u8; agentcomputer_fs::COPY_STEP_BYTES];
        let mut offset = 0u64;
        loop {
            if stop() {
                return Err(fail(Errno::ECANCELED.into()));
            }
            let n = src_fs
                .read_into(node.attr.ino, offset, &mut buf)
                .map_err(fail)?;
            if n == 0 {
                break;
            }
            if buf[..n].iter().any(|&b| b != 0) {
                fs.write(attr.ino, offset, &buf[..n]).map_err(fail)?;
            }
            offset += n as u64;
        }
        let set = SetAttr {
            size: Some(offset),
            perm: (attr.perm != node.attr.perm).then_some(node.attr.perm),
            ..Default::default()
        };
        fs.setattr(attr.ino, &set).map_err(fail)?;
        Ok(())
    }

    /// `symlink(2)`: `path` becomes a link to `target` (stored as given).
    pub(crate) fn symlink(&self, target: &str, path: &str) -> R<()> {
        let with_dest = |e: SysError| {
            SysError {
                path: Some(target.to_string()),
                ..e
            }
            .with_dest(path)
        };
        let (_, fs, dir, name) = self
            .parent(path, "symlink", Errno::EEXIST, Errno::EACCES)
            .map_err(with_dest)?;
        trailing_slash(&fs, dir, &name, path, "symlink", Slash::NewName).map_err(with_dest)?;
        fs.symlink(dir, &name, target.as_bytes(), self.vfs.owner)
            .map_err(|e| with_dest(SysError::from_fs(&e, "symlink", path)))?;
        Ok(())
    }

    /// `readlink(2)`.
    pub(crate) fn readlink(&self, path: &str) -> R<Vec<u8>> {
        let node = self.stat(path, false).map_err(|mut e| {
            e.syscall = "readlink";
            e
        })?;
        if node.attr.kind != FileKind::Symlink {
            return Err(Self::err(Errno::EINVAL, "readlink", path));
        }
        let fs = self.fs_of(&node, "readlink", path)?;
        fs.readlink(node.attr.ino)
            .map_err(|e| SysError::from_fs(&e, "readlink", path))
    }

    /// `link(2)` (does not follow a symlink at `existing`).
    pub(crate) fn link(&self, existing: &str, new: &str) -> R<()> {
        let with_dest = |e: SysError| {
            SysError {
                path: Some(existing.to_string()),
                ..e
            }
            .with_dest(new)
        };
        let node = self.stat(existing, false).map_err(|mut e| {
            e.syscall = "link";
            with_dest(e)
        })?;
        let (m, fs, dir, name) = self
            .parent(new, "link", Errno::EEXIST, Errno::EACCES)
            .map_err(with_dest)?;
        if node.mount != Some(m) {
            return Err(with_dest(Self::err(Errno::EXDEV, "link", existing)));
        }
        trailing_slash(&fs, dir, &name, new, "link", Slash::NewName).map_err(with_dest)?;
        fs.link(node.attr.ino, dir, &name)
            .map_err(|e| with_dest(SysError::from_fs(&e, "link", existing)))?;
        Ok(())
    }

    fn setattr(&self, path: &str, follow: bool, syscall: &'static str, set: SetAttr) -> R<Attr> {
        let node = self.stat(path, follow).map_err(|mut e| {
            e.syscall = syscall;
            e
        })?;
        let fs = self.fs_of(&node, syscall, path)?;
        fs.setattr(node.attr.ino, &set)
            .map_err(|e| SysError::from_fs(&e, syscall, path))
    }

    /// `chmod(2)`: permission bits `mode & 0o7777`.
    pub(crate) fn chmod(&self, path: &str, mode: u32) -> R<()> {
        let set = SetAttr {
            perm: Some(mode & 0o7777),
            ..Default::default()
        };
        self.setattr(path, true, "chmod", set).map(|_| ())
    }

    /// `utimes(2)` (or `lutimes` without `follow`); times in seconds.
    pub(crate) fn utimes(&self, path: &str, atime: f64, mtime: f64, follow: bool) -> R<()> {
        let set = SetAttr {
            atime: Some(attr_now(atime)),
            mtime: Some(attr_now(mtime)),
            ..Default::default()
        };
        let sc = if follow { "utime" } else { "lutime" };
        self.setattr(path, follow, sc, set).map(|_| ())
    }

    /// `truncate(2)`.
    pub(crate) fn truncate(&self, path: &str, len: u64) -> R<()> {
        let set = SetAttr {
            size: Some(len),
            ..Default::default()
        };
        self.setattr(path, true, "open", set).map(|_| ())
    }

    /// `access(2)` for the exec's owner: `mode` is `F_OK` (0) or a mix of
    /// `R_OK` (4), `W_OK` (2), `X_OK` (1). Root passes read and write
    /// checks and needs one execute bit for `X_OK`, as on Linux.
    pub(crate) fn access(&self, path: &str, mode: u32) -> R<()> {
        let node = self.stat(path, true).map_err(|mut e| {
            e.syscall = "access";
            e
        })?;
        let a = &node.attr;
        let owner = self.vfs.owner;
        let denied = if owner.uid == 0 {
            mode & 1 != 0 && a.kind != FileKind::Directory && a.perm & 0o111 == 0
        } else {
            let bits = if a.uid == owner.uid {
                (a.perm >> 6) & 7
            } else if a.gid == owner.gid {
                (a.perm >> 3) & 7
            } else {
                a.perm & 7
            };
            mode & 7 & !bits != 0
        };
        let read_only_root = node.mount.is_none() && mode & 2 != 0;
        if denied || read_only_root {
            return Err(Self::err(Errno::EACCES, "access", path));
        }
        Ok(())
    }

    /// `realpath(3)`.
    pub(crate) fn realpath(&self, path: &str) -> R<String> {
        self.vfs
            .realpath(path)
            .map_err(|e| Self::err(e, "realpath", path))
    }

    /// `mkdtemp(3)`: `prefix` plus six random characters.
    pub(crate) fn mkdtemp(&self, prefix: &str) -> R<String> {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        for _ in 0..100 {
            let mut rnd = [0u8; 6];
            getrandom::fill(&mut rnd).map_err(|_| Self::err(Errno::EIO, "mkdtemp", prefix))?;
            let suffix: String = rnd
                .iter()
                .map(|b| CHARS[*b as usize % CHARS.len()] as char)
                .collect();
            let path = format!("{prefix}{suffix}");
            match self.mkdir(&path, 0o700, false) {
                Ok(_) => return Ok(path),
                Err(e) if e.errno == Errno::EEXIST => continue,
                Err(mut e) => {
                    e.syscall = "mkdtemp";
                    e.path = Some(format!("{prefix}XXXXXX"));
                    return Err(e);
                }
            }
        }
        Err(Self::err(Errno::EEXIST, "mkdtemp", prefix))
    }

    /// `open(2)`: returns a descriptor.
    pub(crate) fn open(&self, path: &str, flags: OpenFlags, perm: u32) -> R<i32> {
        if self.files.borrow().len() >= MAX_OPEN_FILES {
            return Err(Self::err(Errno::EMFILE, "open", path));
        }
        let (mount, fs, attr) = if flags.create {
            let mode = if flags.excl {
                WriteMode::CreateNew
            } else {
                WriteMode::Append
            };
            let (m, fs, rel) = self.placed(path, "open", Errno::EACCES)?;
            match fs.write_all(ROOT_INO, &rel, b"", mode, perm & !UMASK, self.vfs.owner) {
                Ok(a) => (m, fs, a),
                // A directory opened with O_CREAT: Linux says EISDIR.
                Err(e) => return Err(SysError::from_fs(&e, "open", path)),
            }
        } else {
            let node = self.stat(path, true).map_err(|mut e| {
                e.syscall = "open";
                e
            })?;
            let fs = self.fs_of(&node, "open", path)?;
            (node.mount.unwrap_or(Mount::Workspace), fs, node.attr)
        };
        if attr.kind == FileKind::Directory && flags.write {
            return Err(Self::err(Errno::EISDIR, "open", path));
        }
        if flags.truncate && flags.write && attr.kind == FileKind::RegularFile && attr.size > 0 {
            let set = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(attr.ino, &set)
                .map_err(|e| SysError::from_fs(&e, "open", path))?;
        }
        let handle = fs
            .open_inode(attr.ino)
            .map_err(|e| SysError::from_fs(&e, "open", path))?;
        let mut next = self.next_fd.borrow_mut();
        let fd = *next;
        *next += 1;
        self.files.borrow_mut().insert(
            fd,
            OpenFile {
                fs,
                mount,
                handle,
                flags,
                position: 0,
            },
        );
        Ok(fd)
    }

    fn with_file<T>(
        &self,
        fd: i32,
        syscall: &'static str,
        f: impl FnOnce(&mut OpenFile) -> R<T>,
    ) -> R<T> {
        let mut files = self.files.borrow_mut();
        let file = files.get_mut(&fd).ok_or(SysError {
            errno: Errno::EBADF,
            syscall,
            path: None,
            dest: None,
        })?;
        f(file)
    }

    fn ebadf(syscall: &'static str) -> SysError {
        SysError {
            errno: Errno::EBADF,
            syscall,
            path: None,
            dest: None,
        }
    }

    /// `close(2)`.
    pub(crate) fn close(&self, fd: i32) -> R<()> {
        self.files
            .borrow_mut()
            .remove(&fd)
            .map(|_| ())
            .ok_or(Self::ebadf("close"))
    }

    /// `pread(2)` at `position`, or `read(2)` at the file position.
    pub(crate) fn read(&self, fd: i32, len: usize, position: Option<u64>) -> R<Vec<u8>> {
        self.with_file(fd, "read", |f| {
            if !f.flags.read {
                return Err(Self::ebadf("read"));
            }
            let at = position.unwrap_or(f.position);
            let ino = f.handle.ino();
            let data = f.fs.read(ino, at, len).map_err(|e| SysError {
                path: None,
                ..SysError::from_fs(&e, "read", "")
            })?;
            if position.is_none() {
                f.position = at + data.len() as u64;
            }
            Ok(data)
        })
    }

    /// `pwrite(2)` at `position`, or `write(2)` at the file position (at the
    /// end for `O_APPEND`).
    pub(crate) fn write(&self, fd: i32, data: &[u8], position: Option<u64>) -> R<usize> {
        self.with_file(fd, "write", |f| {
            if !f.flags.write {
                return Err(Self::ebadf("write"));
            }
            let ino = f.handle.ino();
            let fail = |e: agentcomputer_fs::Error| SysError {
                path: None,
                ..SysError::from_fs(&e, "write", "")
            };
            let at = if f.flags.append {
                f.fs.getattr(ino).map_err(fail)?.size
            } else {
                position.unwrap_or(f.position)
            };
            let n = f.fs.write(ino, at, data).map_err(fail)?;
            if position.is_none() || f.flags.append {
                f.position = at + n as u64;
            }
            Ok(n)
        })
    }

    /// `fstat(2)`.
    pub(crate) fn fstat(&self, fd: i32) -> R<Node> {
        self.with_file(fd, "fstat", |f| {
            let attr = f.fs.getattr(f.handle.ino()).map_err(|e| SysError {
                path: None,
                ..SysError::from_fs(&e, "fstat", "")
            })?;
            Ok(Node {
                mount: Some(f.mount),
                attr,
            })
        })
    }

    /// `ftruncate(2)`.
    pub(crate) fn ftruncate(&self, fd: i32, len: u64) -> R<()> {
        self.with_file(fd, "ftruncate", |f| {
            if !f.flags.write {
                return Err(SysError {
                    errno: Errno::EINVAL,
                    syscall: "ftruncate",
                    path: None,
                    dest: None,
                });
            }
            let set = SetAttr {
                size: Some(len),
                ..Default::default()
            };
            f.fs.setattr(f.handle.ino(), &set).map_err(|e| SysError {
                path: None,
                ..SysError::from_fs(&e, "ftruncate", "")
            })?;
            Ok(())
        })
    }

    /// `fsync(2)`: the file's committed data survives power loss.
    pub(crate) fn fsync(&self, fd: i32) -> R<()> {
        self.with_file(fd, "fsync", |f| {
            f.fs.fsync(Some(f.handle.ino())).map_err(|e| SysError {
                path: None,
                ..SysError::from_fs(&e, "fsync", "")
            })
        })
    }
}

/// Whether `path` ends in `/` after a name (so it must name a directory).
fn ends_in_slash(path: &str) -> bool {
    path.len() > 1 && path.ends_with('/')
}

/// What a path ending in `/` names for a call.
#[derive(Clone, Copy)]
enum Slash {
    /// An existing entry the call acts on (unlink, rename): `ENOTDIR` if it
    /// is not a directory; a missing one is left to the call.
    Source,
    /// A non-directory the call creates (symlink, link): `EEXIST` if the
    /// name exists, else `ENOENT`.
    NewName,
}

/// Linux's answer for `path` written with a trailing `/` whose final name
/// is `name` in `dir`; `Ok` when `path` has none or the call may go on.
fn trailing_slash(
    fs: &Fs,
    dir: u64,
    name: &[u8],
    path: &str,
    syscall: &'static str,
    role: Slash,
) -> R<()> {
    if !ends_in_slash(path) {
        return Ok(());
    }
    let found = fs.lookup(dir, name).ok();
    let errno = match (role, found) {
        (Slash::Source, Some(a)) if a.kind != FileKind::Directory => Errno::ENOTDIR,
        (Slash::Source, _) => return Ok(()),
        (Slash::NewName, Some(_)) => Errno::EEXIST,
        (Slash::NewName, None) => Errno::ENOENT,
    };
    Err(FsOps::err(errno, syscall, path))
}
