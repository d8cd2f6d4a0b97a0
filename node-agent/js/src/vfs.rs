//! The namespace JavaScript sees: `/workspace` is the computer's engine,
//! `/tmp` a scratch engine private to the exec, `/` a read-only directory
//! holding just those two. Nothing else exists, so no host file is reachable.
//!
//! A path is split lexically only up to the mount point (`/workspace/../tmp`
//! is `/tmp`); everything below a mount point is resolved by the engine,
//! which follows symlinks as Linux does and keeps `..` inside the mount.

use std::cell::{Ref, RefCell};

use agentcomputer_fs::{Attr, Errno, FileKind, Fs, Limits, Owner, ROOT_INO, Timespec};

use crate::SCRATCH_MAX_BYTES;

/// One of the two filesystems under the virtual root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mount {
    Workspace,
    Tmp,
}

impl Mount {
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Mount::Workspace => "/workspace",
            Mount::Tmp => "/tmp",
        }
    }

    /// `st_dev` reported for files of this mount.
    pub(crate) fn dev(self) -> u64 {
        match self {
            Mount::Workspace => 1,
            Mount::Tmp => 2,
        }
    }
}

/// Where a path lands, before the engine resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// `/` itself.
    Root,
    /// A name directly under `/` other than the mounts: it never exists and
    /// cannot be created.
    RootChild,
    /// A path inside a mount, absolute from the mount's root (`/` for the
    /// mount point itself), as the engine's path calls take it.
    In(Mount, Vec<u8>),
}

/// The mount and inode a path resolved to.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// `None` for the virtual root.
    pub mount: Option<Mount>,
    pub attr: Attr,
}

struct Scratch {
    // Field order matters: the engine closes before its directory goes.
    fs: Fs,
    _dir: tempfile::TempDir,
}

pub(crate) struct Vfs {
    workspace: Fs,
    scratch: RefCell<Option<Scratch>>,
    /// Where the scratch database's directory is made; `None`: the system's
    /// temporary directory.
    scratch_dir: Option<std::path::PathBuf>,
    cwd: RefCell<String>,
    pub owner: Owner,
}

/// Attributes of the virtual root directory.
fn root_attr() -> Attr {
    Attr {
        ino: 0,
        kind: FileKind::Directory,
        perm: 0o755,
        nlink: 4,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        rdev: 0,
    }
}

impl Vfs {
    pub(crate) fn new(workspace: Fs, owner: Owner) -> Vfs {
        Vfs {
            workspace,
            scratch: RefCell::new(None),
            scratch_dir: None,
            cwd: RefCell::new("/workspace".to_string()),
            owner,
        }
    }

    /// Makes `/tmp`'s database under `dir` (see `RunOptions::scratch_dir`).
    pub(crate) fn with_scratch_dir(mut self, dir: Option<std::path::PathBuf>) -> Vfs {
        self.scratch_dir = dir;
        self
    }

    pub(crate) fn cwd(&self) -> Ref<'_, String> {
        self.cwd.borrow()
    }

    /// Changes the working directory; `path` must name a directory.
    pub(crate) fn chdir(&self, path: &str) -> Result<(), Errno> {
        if path == "/workspace" || path == "/tmp" {
            // Mount points always exist: skip the engine round trip.
            *self.cwd.borrow_mut() = path.to_string();
            return Ok(());
        }
        let node = self.resolve(path, true)?;
        if node.attr.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let joined = self.absolute(path);
        *self.cwd.borrow_mut() = normalize(&joined);
        Ok(())
    }

    /// `path` made absolute against the working directory (not normalized).
    pub(crate) fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            let cwd = self.cwd.borrow();
            format!("{}/{}", cwd.trim_end_matches('/'), path)
        }
    }

    /// The filesystem of `mount`; `/tmp`'s is made on first use.
    pub(crate) fn fs(&self, mount: Mount) -> Result<Fs, Errno> {
        match mount {
            Mount::Workspace => Ok(self.workspace.clone()),
            Mount::Tmp => {
                if let Some(s) = self.scratch.borrow().as_ref() {
                    return Ok(s.fs.clone());
                }
                // A fresh directory only the agent's user can enter (0700),
                // holding a database only it can read (the engine makes
                // database files 0600, and SQLite gives its WAL the same
                // mode). Never a shared place such as /dev/shm: other local
                // users could read a running exec's files there, and a
                // crash would leave them behind; the agent's scratch
                // directory is emptied when it starts.
                let mut builder = tempfile::Builder::new();
                builder.prefix("js-tmp-");
                builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
                let dir = match &self.scratch_dir {
                    Some(d) => builder.tempdir_in(d),
                    None => builder.tempdir(),
                }
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot make the scratch directory of /tmp");
                    Errno::EIO
                })?;
                let limits = Limits {
                    max_bytes: SCRATCH_MAX_BYTES,
                    max_inodes: 100_000,
                };
                let fs = Fs::create(&dir.path().join("tmp.db"), limits).map_err(|e| e.errno())?;
                // The scratch root is world-writable and sticky, as /tmp is.
                let _ = fs.setattr(
                    ROOT_INO,
                    &agentcomputer_fs::SetAttr {
                        perm: Some(0o1777),
                        ..Default::default()
                    },
                );
                *self.scratch.borrow_mut() = Some(Scratch {
                    fs: fs.clone(),
                    _dir: dir,
                });
                Ok(fs)
            }
        }
    }

    /// Splits `path` (relative to the working directory) at its mount point.
    pub(crate) fn place(&self, path: &str) -> Result<Place, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if path.contains('\0') {
            return Err(Errno::EINVAL);
        }
        let full = self.absolute(path);
        let trailing = full.ends_with('/');
        let comps: Vec<&str> = full.split('/').filter(|c| !c.is_empty()).collect();
        let mut mount = None;
        let mut i = 0;
        while i < comps.len() {
            let c = comps[i];
            match (mount, c) {
                (_, ".") => {}
                (None, "..") => {}
                (Some(_), "..") => mount = None,
                (None, "workspace") => mount = Some(Mount::Workspace),
                (None, "tmp") => mount = Some(Mount::Tmp),
                (None, _) if i + 1 == comps.len() => return Ok(Place::RootChild),
                (None, _) => return Err(Errno::ENOENT),
                (Some(_), _) => break,
            }
            i += 1;
        }
        let Some(m) = mount else {
            return Ok(Place::Root);
        };
        let mut rel = String::from("/");
        rel.push_str(&comps[i..].join("/"));
        if trailing && i < comps.len() {
            rel.push('/');
        }
        Ok(Place::In(m, rel.into_bytes()))
    }

    /// Resolves `path` to an inode (`follow_last`: `stat` vs `lstat`).
    pub(crate) fn resolve(&self, path: &str, follow_last: bool) -> Result<Node, Errno> {
        match self.place(path)? {
            Place::Root => Ok(Node {
                mount: None,
                attr: root_attr(),
            }),
            Place::RootChild => Err(Errno::ENOENT),
            Place::In(m, rel) => {
                let attr = self
                    .fs(m)?
                    .resolve(ROOT_INO, &rel, follow_last)
                    .map_err(|e| e.errno())?;
                Ok(Node {
                    mount: Some(m),
                    attr,
                })
            }
        }
    }

    /// The directory that holds (or would hold) the final name of `path`.
    ///
    /// `Err(EACCES)`-style answers for names in the read-only root are left
    /// to the caller through [`Place`]; this returns the engine's answer
    /// (for a mount point itself the name is `/`).
    pub(crate) fn parent(&self, path: &str) -> Result<(Mount, Fs, u64, Vec<u8>), ParentError> {
        match self.place(path).map_err(ParentError::Errno)? {
            Place::Root => Err(ParentError::Root),
            Place::RootChild => Err(ParentError::RootChild),
            Place::In(m, rel) => {
                let fs = self.fs(m).map_err(ParentError::Errno)?;
                let (dir, name) = fs
                    .resolve_parent(ROOT_INO, &rel)
                    .map_err(|e| ParentError::Errno(e.errno()))?;
                Ok((m, fs, dir, name))
            }
        }
    }

    /// The canonical absolute path of `path`: symlinks followed, no `.`,
    /// `..` or repeated slashes (`realpath(3)`).
    pub(crate) fn realpath(&self, path: &str) -> Result<String, Errno> {
        let (m, rel) = match self.place(path)? {
            Place::Root => return Ok("/".into()),
            Place::RootChild => return Err(Errno::ENOENT),
            Place::In(m, rel) => (m, rel),
        };
        let fs = self.fs(m)?;
        // Names from the mount root down, with their inodes.
        let mut names: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut todo: Vec<Vec<u8>> = components(&rel).rev().collect();
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            match c.as_slice() {
                b"." => continue,
                b".." => {
                    names.pop();
                    continue;
                }
                _ => {}
            }
            let dir = names.last().map(|n| n.1).unwrap_or(ROOT_INO);
            let attr = fs.lookup(dir, &c).map_err(|e| e.errno())?;
            if attr.kind == FileKind::Symlink {
                hops += 1;
                if hops > agentcomputer_fs::MAX_SYMLINK_HOPS {
                    return Err(Errno::ELOOP);
                }
                let target = fs.readlink(attr.ino).map_err(|e| e.errno())?;
                let target = if target.starts_with(b"/") {
                    names.clear();
                    rebase(m, &target).to_vec()
                } else {
                    target
                };
                todo.extend(components(&target).rev());
            } else {
                if !todo.is_empty() && attr.kind != FileKind::Directory {
                    return Err(Errno::ENOTDIR);
                }
                names.push((c, attr.ino));
            }
        }
        let mut out = m.prefix().to_string();
        for (n, _) in names {
            out.push('/');
            out.push_str(&String::from_utf8_lossy(&n));
        }
        Ok(out)
    }
}

/// Why [`Vfs::parent`] has no engine directory to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParentError {
    /// The path is `/`.
    Root,
    /// The path names something directly under `/` that is not a mount.
    RootChild,
    Errno(Errno),
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| c.to_vec())
}

/// An absolute symlink target as the engine reads it (see the engine's
/// `path` module): `/workspace/...` means the workspace's root.
fn rebase(mount: Mount, target: &[u8]) -> &[u8] {
    let _ = mount;
    match target.strip_prefix(b"/workspace".as_slice()) {
        Some(b"") => b"/",
        Some(rest) if rest.starts_with(b"/") => rest,
        _ => target,
    }
}

/// Lexical normalization of an absolute path (`/a/./b/../c` -> `/a/c`).
pub(crate) fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vfs() -> (tempfile::TempDir, Vfs) {
        let d = tempfile::tempdir().unwrap();
        let fs = Fs::create(&d.path().join("c.db"), Limits::default()).unwrap();
        (d, Vfs::new(fs, Owner::ROOT))
    }

    #[test]
    fn places() {
        let (_d, v) = vfs();
        let p = |s: &str| v.place(s);
        assert_eq!(p("/"), Ok(Place::Root));
        assert_eq!(p("/.."), Ok(Place::Root));
        assert_eq!(p("/etc"), Ok(Place::RootChild));
        assert_eq!(p("/etc/passwd"), Err(Errno::ENOENT));
        assert_eq!(
            p("/workspace"),
            Ok(Place::In(Mount::Workspace, b"/".to_vec()))
        );
        assert_eq!(
            p("a/b/"),
            Ok(Place::In(Mount::Workspace, b"/a/b/".to_vec()))
        );
        assert_eq!(p("../tmp/x"), Ok(Place::In(Mount::Tmp, b"/x".to_vec())));
        assert_eq!(p("../../../etc/passwd"), Err(Errno::ENOENT));
        assert_eq!(
            p("/workspace/a/../../etc"),
            Ok(Place::In(Mount::Workspace, b"/a/../../etc".to_vec()))
        );
        assert_eq!(p(""), Err(Errno::ENOENT));
        assert_eq!(p("a\0b"), Err(Errno::EINVAL));
    }

    #[test]
    fn realpath_follows_symlinks() {
        let (_d, v) = vfs();
        let fs = v.fs(Mount::Workspace).unwrap();
        let a = fs.mkdir(ROOT_INO, b"a", 0o755, Owner::ROOT).unwrap();
        fs.mkdir(a.ino, b"b", 0o755, Owner::ROOT).unwrap();
        fs.symlink(ROOT_INO, b"l", b"a/b", Owner::ROOT).unwrap();
        fs.symlink(ROOT_INO, b"abs", b"/workspace/a", Owner::ROOT)
            .unwrap();
        assert_eq!(v.realpath("l/..").unwrap(), "/workspace/a");
        assert_eq!(v.realpath("/workspace/abs/b/.").unwrap(), "/workspace/a/b");
        assert_eq!(v.realpath("nope"), Err(Errno::ENOENT));
        assert_eq!(v.realpath("/").unwrap(), "/");
    }

    #[test]
    fn normalizes() {
        assert_eq!(normalize("/a/./b/../c/"), "/a/c");
        assert_eq!(normalize("/.."), "/");
    }
}
