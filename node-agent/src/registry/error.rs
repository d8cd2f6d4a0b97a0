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
    /// The computer was deleted while the call worked on it: nothing of
    /// the call was kept.
    #[error("computer \"{name}\" was deleted during the {what}; no {what} was kept")]
    DeletedDuring { name: String, what: &'static str },
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
    /// A snapshot operation asked of an agent without a backup store:
    /// snapshots are named positions of the continuous backup log.
    #[error(
        "computer \"{0}\" has no snapshots: a snapshot is a named position of the computer's continuous backup log, and this node agent has no backup store (node-agent local --backup file:///DIR, or s3://BUCKET/PREFIX; docs/snapshots.md)"
    )]
    NoSnapshots(String),
    /// A snapshot name that is not a DNS-1123 label.
    #[error(
        "invalid snapshot name {0:?}: use 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
    )]
    InvalidSnapshotName(String),
    /// No snapshot of this name (of this computer, when one is named).
    #[error("snapshot \"{snapshot}\" not found{}", computer.as_ref().map(|c| format!(" (computer \"{c}\" has none of that name; `snapshots {c}` lists them)")).unwrap_or_default())]
    SnapshotNotFound {
        snapshot: String,
        computer: Option<String>,
    },
    /// A snapshot name that is taken (names are unique among the
    /// computers of one backup store).
    #[error(
        "snapshot \"{0}\" already exists; snapshot names are unique on this node agent (delete-snapshot, or pick another name)"
    )]
    SnapshotExists(String),
    /// A snapshot past the computer's snapshot limits.
    #[error("computer \"{name}\": {reason}")]
    SnapshotLimit { name: String, reason: String },
    /// A restore of a computer mounted on the host.
    #[error(
        "cannot restore computer \"{name}\" while it is mounted at {paths}: processes there would keep files of the replaced tree; unmount it first (nothing was changed)"
    )]
    RestoreMounted { name: String, paths: String },
    /// A restore whose computer's running work did not end in time.
    #[error("cannot restore computer \"{name}\": {reason}")]
    RestoreBusy { name: String, reason: String },
    /// An imported database file that is not a computer's.
    #[error("cannot import computer \"{name}\": {reason}")]
    BadImport { name: String, reason: String },
    /// A point-in-time restore to before the oldest position the log keeps.
    #[error("computer \"{name}\" has no backup position at or before {at}: its log starts later")]
    NoPositionAt { name: String, at: String },
    /// A point-in-time restore to a time before the computer's retention
    /// window.
    #[error(
        "cannot restore computer \"{name}\" to {at}: that is outside its retention window of {retention}, which reaches back to {oldest} (a computer's retention is its spec.retention, else the node agent's --retention)"
    )]
    OutsideRetention {
        name: String,
        at: String,
        retention: String,
        oldest: String,
    },
}
