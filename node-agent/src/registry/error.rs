//! Why a registry call failed.

use std::io;

/// Why a registry call failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The name is not a DNS-1123 label.
    #[error(
        "invalid computer name {0:?}: use 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
    )]
    InvalidName(String),
    /// No computer has this name.
    #[error("computer \"{0}\" not found")]
    NotFound(String),
    /// `create` of a name that is taken.
    #[error("computer \"{0}\" already exists")]
    AlreadyExists(String),
    /// The computer's directory or settings could not be read or written.
    #[error("computer \"{name}\": {source}")]
    Io { name: String, source: io::Error },
    /// The filesystem engine failed to create or open the database.
    #[error("computer \"{name}\": {source}")]
    Engine {
        name: String,
        source: agentcomputer_fs::Error,
    },
    /// A host mount or unmount failed; `source` carries the errno
    /// (`EINVAL`, `ENOENT`, `ENOTDIR`, `EBUSY`, or the kernel's).
    #[error("{path}: {source}")]
    Mount { path: String, source: io::Error },
    /// A mount over a directory that another user owns: the agent acts for
    /// its own user only.
    #[error(
        "cannot mount over {path}: it belongs to uid {owner}, not to the node agent's user (uid {agent})"
    )]
    MountNotOwned {
        path: String,
        owner: u32,
        agent: u32,
    },
    /// A mount at a path with a symbolic link in it: the link could be
    /// another user's, pointing the mount at a directory the caller never
    /// named, so none is followed.
    #[error(
        "cannot mount at {path}: a component of the path is a symbolic link, and host mounts follow none; give the path without links"
    )]
    MountThroughLink { path: String },
    /// A mount over a directory with entries, not asked for: the mount
    /// would hide them.
    #[error(
        "cannot mount over {path}: it is not empty, and the mount would hide its files until unmounted; use an empty directory, or ask for it with --nonempty"
    )]
    MountNotEmpty { path: String },
    /// A host mount asked of an agent that is not root. Host mounts are
    /// `nosymfollow`, which takes `CAP_SYS_ADMIN` (the bind remount that
    /// sets it); without root the mount would otherwise fail further in,
    /// with an errno that names neither cause (`EACCES` opening a
    /// `/dev/fuse` of mode 0600, `ENOENT` without `fusermount3`).
    #[error(
        "cannot mount at {path}: this node agent runs as uid {uid}, and host mounts need one running as root (they refuse symbolic links with nosymfollow, which takes CAP_SYS_ADMIN); start node-agent local as root to mount"
    )]
    MountNeedsRoot { path: String, uid: u32 },
    /// The kernel would not make the mount refuse symbolic links
    /// (`nosymfollow`); nothing was mounted.
    #[error("cannot mount over {path} safely: {refused}")]
    MountUnsafe {
        path: String,
        refused: agentcomputer_fuse::NosymfollowRefused,
    },
    /// `unmount` at a path with a symbolic link in it: the link could be
    /// another user's, leading the unmount to a mount the caller never
    /// named. The computer's mount is kept.
    #[error(
        "cannot unmount at {path}: a component of the path is a symbolic link, and host mounts follow none; nothing was unmounted, and the computer's mount stays until it is unmounted by a path without links or the computer is deleted"
    )]
    UnmountThroughLink { path: String },
    /// `unmount` at a path that no longer leads to the computer's mount
    /// (a directory of it was renamed or replaced, or another mount
    /// covers it). The computer's mount is kept.
    #[error(
        "cannot unmount at {path}: the path no longer leads to this computer's mount (a directory of it was moved or replaced, or another mount covers it); nothing was unmounted, and the computer's mount stays until the path leads to it again or the computer is deleted"
    )]
    UnmountElsewhere { path: String },
    /// `unmount` of a path where this agent has no mount of the computer.
    #[error("computer \"{name}\" is not mounted at {path}")]
    NotMounted { name: String, path: String },
    /// The computer's backup failed: the store, its index, a restore
    /// (a damaged object is named), or a shipper that stopped.
    #[error("computer \"{name}\": {source}")]
    Backup {
        name: String,
        source: crate::backup::BackupError,
    },
    /// Sync or verify-backup asked of an agent without a backup store.
    #[error(
        "computer \"{0}\" is not backed up: this node agent has no backup store (node-agent local --backup URL, or the chart's backup.url)"
    )]
    NoBackup(String),
    /// Another node holds the computer's writer Lease: it serves the
    /// computer now (or did until lately and may still).
    #[error(
        "computer \"{name}\" is served by {holder} now (it holds the computer's writer lease until {until} unless it renews it); it is not opened here"
    )]
    WriterElsewhere {
        name: String,
        holder: String,
        until: String,
    },
    /// The computer was handed over to another node, which serves it now.
    #[error("computer \"{name}\" moved to node {node}; call that node's agent")]
    Moved { name: String, node: String },
    /// The computer is being handed over to another node and did not
    /// arrive within the wait.
    #[error("computer \"{name}\" is moving to another node (waited {waited:?}); try again")]
    Moving {
        name: String,
        waited: std::time::Duration,
    },
    /// The computer could not be handed over to another node; it stays
    /// here.
    #[error("computer \"{name}\" could not be handed over: {reason}; it stays on this node")]
    HandOver { name: String, reason: String },
    /// The computer's writer Lease could not be taken or checked.
    #[error("computer \"{name}\": cannot take its writer lease: {reason}")]
    WriterLease { name: String, reason: String },
}
