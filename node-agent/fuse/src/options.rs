//! Settings of one FUSE mount.

use std::time::Duration;

/// How a computer's filesystem is mounted. `Default` gives the tuned
/// settings measured in `docs/fuse.md`.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// How long the kernel may cache an inode's attributes without asking
    /// again. Changes made outside the mount are invalidated explicitly, so
    /// a long value is safe.
    pub attr_ttl: Duration,
    /// How long the kernel may cache a name -> inode mapping.
    pub entry_ttl: Duration,
    /// How long the kernel may cache that a name does not exist; zero
    /// disables negative caching.
    pub negative_ttl: Duration,
    /// Threads serving kernel requests, each with its own cloned
    /// `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`). At least 1.
    pub threads: usize,
    /// Let the kernel cache writes and send them in large batches
    /// (`FUSE_WRITEBACK_CACHE`); the kernel then owns mtime and size of
    /// files it has dirty pages for until it flushes them.
    pub writeback_cache: bool,
    /// Largest write request, in bytes (at most 1 MiB: the kernel's default
    /// `fs.fuse.max_pages_limit` of 256 pages).
    pub max_write: u32,
    /// Largest readahead request, in bytes.
    pub max_readahead: u32,
    /// Let users other than the mounting one use the mount (`allow_other`).
    /// `None`: on when running as root (needed for containers that run
    /// as other users), off otherwise (fusermount3 allows it for ordinary
    /// users only with `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: Option<bool>,
    /// Name shown as the mount's source in `/proc/self/mountinfo`.
    pub fsname: String,
    /// Group commit window of requests from the kernel (see
    /// `agentcomputer_fs::Fs::with_commit_window`): requests within it share
    /// one engine transaction. Data is durable at `fsync`, as on a local
    /// disk; zero commits every request before answering it.
    pub commit_window: Duration,
    /// Refuse to follow symbolic links anywhere on the mount (the
    /// `nosymfollow` mount flag, `MS_NOSYMFOLLOW`, Linux 5.10+; mount(2)):
    /// path resolution through a link on the mount fails with `ELOOP`,
    /// while `readlink(2)`, `lstat(2)` and creating links still work. For
    /// mounts on a host, so that a link a computer made cannot send the
    /// host's own tools to a host file. Off for a sandbox's mount, whose
    /// links resolve inside the sandbox's mount namespace. Setting the flag
    /// needs `CAP_SYS_ADMIN` (a root agent): [`crate::mount`] fails rather
    /// than mount without it. Not used by [`crate::serve_connection`] (the
    /// process that mounted chose the flags).
    pub nosymfollow: bool,
    /// Present every inode with one owner (see [`OwnerMap`]); `None` shows
    /// the stored owners as they are (a sandbox's mount).
    pub owner_map: Option<OwnerMap>,
}

/// Ownership on a mount made for one host user, like the `uid=` and `gid=`
/// options of filesystems without Unix owners (mount(8), "Mount options for
/// fat"): every inode is shown as owned by [`OwnerMap::uid`] and
/// [`OwnerMap::gid`], so that tools checking ownership (`git`'s
/// `safe.directory`) accept the files. Inodes created through the mount are
/// stored with [`OwnerMap::stored_uid`] and [`OwnerMap::stored_gid`] (the
/// computer's sandbox user, so its runtimes may change them), and
/// `chown(2)` to any other owner than the shown one fails with `EPERM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerMap {
    /// User id every inode is shown with (the mounting user).
    pub uid: u32,
    /// Group id every inode is shown with (the mounting user's group).
    pub gid: u32,
    /// User id stored for inodes created through the mount.
    pub stored_uid: u32,
    /// Group id stored for inodes created through the mount.
    pub stored_gid: u32,
}

/// Default attribute and entry timeout; see `docs/fuse.md` for the benchmark.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// Default group commit window; see `docs/fuse.md` for the benchmark.
pub(crate) const DEFAULT_COMMIT_WINDOW: Duration = Duration::from_millis(10);

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            attr_ttl: DEFAULT_TTL,
            entry_ttl: DEFAULT_TTL,
            negative_ttl: DEFAULT_TTL,
            threads: 4,
            writeback_cache: false,
            max_write: 1 << 20,
            max_readahead: 1 << 20,
            allow_other: None,
            fsname: "agentcomputer".to_string(),
            commit_window: DEFAULT_COMMIT_WINDOW,
            nosymfollow: false,
            owner_map: None,
        }
    }
}

/// The filesystem subtype: mounts made through fusermount3 show up as
/// type `fuse.agentcomputer`.
pub const SUBTYPE: &str = "agentcomputer";
