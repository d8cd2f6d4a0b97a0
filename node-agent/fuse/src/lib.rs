//! FUSE server: a computer's filesystem engine as a kernel mount.
//!
//! Container runtimes (bubblewrap locally, sandbox pods through the CSI node
//! plugin) see a computer's files through this mount, served over the same
//! [`agentcomputer_fs::Fs`] instance that the shell, JavaScript and API use.
//!
//! * [`mount`] mounts an engine at a directory and serves it on several
//!   threads; the returned [`MountHandle`] unmounts when dropped.
//!   [`mount_connection_at`] mounts over a directory the caller opened
//!   (no path resolved between its checks and the mount).
//! * Changes made directly on the engine (not through this mount) reach the
//!   kernel as cache invalidations, sent from a dedicated thread, so a
//!   `cat` in a container sees an API write at once.
//! * [`cleanup_stale_mounts`] removes mounts left behind by a killed server;
//!   [`is_dead_mount`] finds one.
//! * [`serve_connection`] serves a connection another process mounted and
//!   handed over (the cluster's privileged mounter), for an agent that
//!   cannot mount; [`resume_connection`] takes such a connection over
//!   again after the agent restarted (its [`InitRecord`] replayed).
//!
//! Semantics, caching and measurements: `docs/fuse.md`.

mod connection;
mod convert;
mod handshake;
mod invalidate;
mod lookups;
mod mount;
mod mount_at;
mod options;
mod server;
mod stale;
mod unmount_at;

pub use connection::{
    ConnectionHandle, INIT_TIMEOUT, is_live, resume_connection, serve_connection,
};
pub use handshake::InitRecord;
pub use mount::{MountHandle, NosymfollowRefused, mount, mount_connection};
pub use mount_at::mount_connection_at;
pub use options::{DEFAULT_TTL, MountOptions, OwnerMap, SUBTYPE};
pub use stale::{cleanup_stale_mounts, is_dead_mount};
pub use unmount_at::{NotThisMount, detach as detach_mount, find_mount_root};
