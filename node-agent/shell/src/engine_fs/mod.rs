//! [`EngineFs`]: bashkit's `FileSystem` trait over the engine's inode API.
//!
//! Paths arrive absolute inside the engine (`/src/main.rs` is the engine
//! root's `src/main.rs`; the sandbox layer strips the `/workspace` prefix).
//! Each operation walks the path with `lookup` and then makes one engine
//! call, so the cost is one short SQLite read per path component plus the
//! operation itself; nothing walks or caches the whole tree (bashkit's
//! `PosixFs` would add `exists`/`stat` round trips per call on top).
//! Directories already looked up in this exec come from [`DirCache`]
//! instead, kept exact by the engine's change notifications.
//!
//! Symlinks are never followed here: bashkit's outermost layer follows them
//! in the shell's own namespace, where an absolute target such as
//! `/workspace/lib` means what it means in every other runtime. A link met
//! in the middle of a path fails the walk with `ENOENT`, and that layer
//! retries with the link resolved (see bashkit `fs/follow.rs`).

mod appends;
mod dir_cache;
mod ops;

use crate::budget::ExecBudget;
use crate::errno::{errno_error, from_engine};
use agentcomputer_fs::Errno;
use agentcomputer_fs::{Attr, FileKind, Fs, Ino, Owner, ROOT_INO, Timespec};
use bashkit::{FileType, Metadata};
use dir_cache::DirCache;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Owner of inodes created by shell scripts: the sandbox user
/// ([`agentcomputer_runtime_contract::SANDBOX_UID`], 1000), the identity the
/// shell reports through `id` and `/etc/passwd` (bashkit `SANDBOX_UID`).
pub const SHELL_OWNER: Owner = Owner {
    uid: agentcomputer_runtime_contract::SANDBOX_UID,
    gid: agentcomputer_runtime_contract::SANDBOX_GID,
};

/// Mode bits given to files a script creates: `0o666` less the usual
/// umask `022`, as bash creates them.
pub(crate) const NEW_FILE_PERM: u32 = 0o644;
/// Mode bits given to directories a script creates (`0o777` less `022`).
pub(crate) const NEW_DIR_PERM: u32 = 0o755;
/// The umask applied to modes a script asks for (`mkfifo`, `cp`).
pub(crate) const UMASK: u32 = 0o022;

/// Entries fetched per `readdir` call when listing or removing a directory.
const READDIR_PAGE: usize = 512;

/// bashkit's filesystem view of one computer's engine.
///
/// Cheap to clone; holds the engine handle and the owner that new inodes
/// get. Every method is a short synchronous engine transaction, so it is
/// meant to run on the exec's own thread (see [`crate::run`]), never on a
/// shared async worker.
///
/// Named pipes are inodes in the engine (other runtimes see them), but the
/// bytes a script writes into one are buffered here, as bashkit's own
/// filesystems do: a write appends, a read takes everything buffered. The
/// buffer lives as long as this value (one exec), as does the cache of
/// directories looked up.
#[derive(Clone)]
pub struct EngineFs {
    fs: Fs,
    owner: Owner,
    fifos: Arc<Mutex<HashMap<Ino, Vec<u8>>>>,
    dirs: Arc<DirCache>,
    budget: ExecBudget,
    appends: Arc<appends::Appends>,
}

impl EngineFs {
    /// Wraps `fs`; new inodes are owned by [`SHELL_OWNER`].
    pub fn new(fs: Fs) -> Self {
        Self::with_owner(fs, SHELL_OWNER)
    }

    /// Wraps `fs`; new inodes are owned by `owner`. Whole-file reads are
    /// held to the default exec memory budget
    /// ([`crate::ShellLimits::default`]'s `memory_bytes`).
    pub fn with_owner(fs: Fs, owner: Owner) -> Self {
        Self {
            dirs: Arc::new(DirCache::new(&fs)),
            fs,
            owner,
            fifos: Arc::default(),
            appends: Arc::default(),
            budget: ExecBudget {
                memory: crate::limits::DEFAULT_MEMORY_BYTES,
                stop: crate::stop::StopFlag::new(),
                deadline: None,
                timed_out: Arc::default(),
            },
        }
    }

    /// Holds whole-file reads and FIFO buffers to `budget`, and stops long
    /// calls (copies) between steps once its stop flag is set.
    pub(crate) fn with_budget(mut self, budget: ExecBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The engine handle.
    pub fn engine(&self) -> &Fs {
        &self.fs
    }

    /// The owner new inodes get.
    pub(crate) fn owner(&self) -> Owner {
        self.owner
    }

    /// Attributes of `path` without following a final symlink.
    fn walk(&self, path: &Path) -> bashkit::Result<Attr> {
        let names = components(path);
        let Some((last, dirs)) = names.split_last() else {
            return self.fs.getattr(ROOT_INO).map_err(from_engine);
        };
        let parent = self.walk_dirs(dirs)?;
        self.lookup(parent, last)
    }

    /// Entry `name` of `parent`, from the directory cache when it holds it.
    fn lookup(&self, parent: Ino, name: &[u8]) -> bashkit::Result<Attr> {
        if let Some(attr) = self.dirs.get(parent, name) {
            return Ok(attr);
        }
        let seen = self.dirs.generation();
        let attr = self.fs.lookup(parent, name).map_err(from_engine)?;
        self.dirs.insert(seen, parent, name, &attr);
        Ok(attr)
    }

    /// The parent directory's inode and the final name of `path`.
    ///
    /// `at_root` is the errno for an operation aimed at the engine root
    /// itself, which has no parent entry (`rmdir /workspace` is `EBUSY`).
    fn walk_parent(&self, path: &Path, at_root: Errno) -> bashkit::Result<(Ino, Vec<u8>)> {
        let mut names = components(path);
        let Some(last) = names.pop() else {
            return Err(errno_error(at_root));
        };
        Ok((self.walk_dirs(&names)?, last))
    }

    /// The inode of the directory reached through `names` from the root.
    fn walk_dirs(&self, names: &[Vec<u8>]) -> bashkit::Result<Ino> {
        let mut dir = ROOT_INO;
        for name in names {
            let attr = self.lookup(dir, name)?;
            dir = match attr.kind {
                FileKind::Directory => attr.ino,
                // Let the following layer resolve the link and retry.
                FileKind::Symlink => return Err(errno_error(Errno::ENOENT)),
                _ => return Err(errno_error(Errno::ENOTDIR)),
            };
        }
        Ok(dir)
    }
}

/// The names of `path` from the root, with `.` dropped and `..` applied
/// lexically (it never climbs above the root).
fn components(path: &Path) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    for name in path.as_os_str().as_encoded_bytes().split(|&b| b == b'/') {
        match name {
            b"" | b"." => {}
            b".." => {
                names.pop();
            }
            _ => names.push(name.to_vec()),
        }
    }
    names
}

/// bashkit metadata for an engine inode.
///
/// bashkit's `FileType` has no kind for device nodes and sockets; they are
/// reported as `Fifo`, the one special (non-regular, non-directory) kind it
/// has, so that `test -f`, `find -type f` and the commands that copy
/// regular files never take them for regular files. The project's own
/// `test`, `ls` and `stat` ask the engine for the exact kind.
fn metadata(attr: &Attr) -> Metadata {
    Metadata {
        file_type: match attr.kind {
            FileKind::RegularFile => FileType::File,
            FileKind::Directory => FileType::Directory,
            FileKind::Symlink => FileType::Symlink,
            FileKind::NamedPipe
            | FileKind::CharDevice
            | FileKind::BlockDevice
            | FileKind::Socket => FileType::Fifo,
        },
        size: attr.size,
        mode: attr.perm,
        modified: system_time(attr.mtime),
        // No birth time is stored; ctime is the closest the engine has.
        created: system_time(attr.ctime),
    }
}

fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec.into())
    }
}

fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(before) => Timespec::from_nanos(-(before.duration().as_nanos() as i64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &str) -> Vec<String> {
        components(Path::new(p))
            .into_iter()
            .map(|n| String::from_utf8(n).unwrap())
            .collect()
    }

    #[test]
    fn components_are_lexical_and_clamped() {
        assert!(names("/").is_empty());
        assert_eq!(names("/a//b/./c/"), ["a", "b", "c"]);
        assert_eq!(names("/a/../../b"), ["b"]);
    }

    #[test]
    fn times_round_trip() {
        for t in [
            Timespec {
                sec: 1_700_000_000,
                nsec: 123,
            },
            Timespec {
                sec: -5,
                nsec: 250_000_000,
            },
            Timespec { sec: 0, nsec: 0 },
        ] {
            assert_eq!(timespec(system_time(t)), t);
        }
    }
}
