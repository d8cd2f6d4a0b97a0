//! The filesystem engine: a whole POSIX filesystem stored in one SQLite file.
//!
//! * [`Fs`] is cheap to clone (an `Arc` inside) and `Send + Sync`; every method
//!   takes `&self` and may be called from many threads at once. Writes go
//!   through one writer connection; reads use a pool of read-only
//!   connections and never wait for writes (WAL mode).
//! * Inode-level calls (`lookup`, `getattr`, `read`, `write`, ...) mirror the
//!   FUSE low-level protocol so the FUSE layer is a thin adapter. They make
//!   no permission checks.
//! * Path-level calls ([`Fs::resolve`], [`Fs::resolve_parent`],
//!   [`Fs::write_all`]) resolve a byte path inside the computer: absolute
//!   paths start at the root inode, `..` at the root stays at the root, so
//!   no path can leave the computer (see the `path` module docs for
//!   symlinks).
//! * Every mutating call is one SQLite transaction, committed before it
//!   returns, unless it is made through a view with a commit window
//!   ([`Fs::with_commit_window`]: group commit, used by the FUSE server);
//!   [`Fs::fsync`] makes every completed call survive power loss.
//! * Every error is an [`Error`] that carries a POSIX errno.
//!
//! Storage layout and measurements: `docs/engine.md`; crash guarantees:
//! `docs/durability.md`.

mod attr;
mod backup;
mod check;
mod checkpoints;
mod commit;
mod convenience;
mod copy;
mod data;
mod db;
mod dirent;
mod error;
mod fence;
mod fs;
mod handle;
mod inode;
mod lock;
mod names;
mod namespace;
mod notify;
mod path;
mod schema;
mod snapshot;
mod space;
mod tmpfile;
mod types;
mod vfs;
mod writer_lease;
mod xattr;

pub use checkpoints::{Truncation, WriterHold};
pub use convenience::WriteMode;
pub use copy::COPY_STEP_BYTES;
pub use db::WAL_SIZE_LIMIT;
pub use error::{Errno, Error, Result, errno_name};
pub use fence::Fence;
pub use fs::{
    DB_FILE_MODE, DEFAULT_CHUNK_SIZE, DEFAULT_PAGE_SIZE, Fs, MAX_FILE_SIZE, OpenOptions,
    STATFS_BLOCK_SIZE, Tuning,
};
pub use handle::Handle;
pub use namespace::EXCHANGES_REMEMBERED;
pub use notify::{Change, Subscriber, SubscriptionId};
pub use path::WORKSPACE;
pub use snapshot::ReadSnapshot;
pub use space::{Compacted, DiskUsage};
pub use types::*;
pub use xattr::{XATTR_NAME_MAX, XATTR_SIZE_MAX, XattrFlags};
