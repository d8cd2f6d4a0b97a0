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
}

/// Default attribute and entry timeout; see `docs/fuse.md` for the benchmark.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// Default group commit window; see `docs/fuse.md` for the benchmark.
pub const DEFAULT_COMMIT_WINDOW: Duration = Duration::from_millis(10);

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
        }
    }
}

/// The filesystem subtype: mounts made through fusermount3 show up as
/// type `fuse.agentcomputer`.
pub const SUBTYPE: &str = "agentcomputer";
