//! The computers of one node agent and their open filesystem engines.
//!
//! Each computer is a directory `<data>/computers/<name>/` (see
//! [`crate::computer`]). The registry opens a computer's engine on first use
//! and shares that one instance with every request through a [`Lease`]. A
//! computer with no lease for longer than the idle timeout is closed
//! (hibernated): its usage is written to `computer.json` and the engine is
//! dropped, so idle computers cost no memory; the next request reopens it.
//!
//! A computer mounted on the host over FUSE ([`Registry::mount`]) holds its
//! engine, so it is never hibernated; its mounts end on unmount, delete and
//! shutdown, and are recorded in `<data>/mounts.json` ([`crate::registry::mount_records`]).
//! So does a FUSE connection that the cluster's mounter handed over
//! ([`Registry::attach_connection`]), until the kernel ends it.
//!
//! Opening, closing, creating and deleting a computer are serialised by
//! that computer's own async lock ([`crate::name_locks`]), so there is never
//! more than one engine instance per computer, and one computer's open or
//! close (database files, `fsync`s) never holds up another's. Changes to
//! the host mount table take one more, agent-wide lock, always after the
//! computer's. Requests for an already open computer take only a short
//! synchronous lock.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use agentcomputer_fs::Fs;
use agentcomputer_fuse::ConnectionHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::computer::{Settings, Usage};
use crate::layout::SCRATCH_DIR;
use crate::name_locks::NameLocks;
use crate::private;
use crate::registry::mount_records::{self as mounts, MountRecord};

mod backed_up;
mod connections;
mod error;
mod forks;
mod handed_over;
mod hibernation;
mod holder_client;
mod holder_link;
mod host_mounts;
mod lease;
mod lifecycle;
pub mod mount_records;
mod moves;
mod restore;
mod snapshots;
mod stored;
mod writer_lease;

pub use backed_up::{BackupIds, BackupReport, ShippedTotals, Synced, Verified};
pub use error::RegistryError;
pub use handed_over::{Handed, TakeOverError, serve_handed_over};
pub use holder_client::{Client as HolderClient, is_descriptor_shortage};
pub use lease::Lease;
pub use snapshots::{
    DEFAULT_SNAPSHOT_LIMITS, RestoreTo, Restored as SnapshotRestored, SnapshotInfo, SnapshotLimits,
    SnapshotSource,
};
pub use writer_lease::writer_lease_name;
// Shared by the files of this module (`use super::*` in each).
pub(in crate::registry) use host_mounts::{HostMount, host_mount_options, unmount_all};
pub(in crate::registry) use lifecycle::{
    check_name, db_file_bytes, open_computer, prepare_scratch,
};

/// What the registry reports about one computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputerInfo {
    /// The settings from `computer.json` (`usage_at_close` as stored).
    pub settings: Settings,
    /// Current usage: live for an open computer, else the usage recorded
    /// when it was closed.
    pub usage: Usage,
    /// Whether the engine is open now.
    pub open: bool,
}

/// Shared handle to all computers of a data directory. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    data_dir: PathBuf,
    computers_dir: PathBuf,
    /// Per-exec scratch space (JavaScript's `/tmp`); see [`SCRATCH_DIR`].
    scratch_dir: PathBuf,
    idle_timeout: Duration,
    open: Mutex<HashMap<String, Arc<Slot>>>,
    /// Each computer's lifecycle lock: open, close, create, update, delete.
    names: NameLocks,
    /// The host mount table (`mounts.json`, `dead_mounts`); taken after a
    /// computer's lock, never before.
    mount_table: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
    /// Host mounts a killed previous run left dead (see
    /// [`mounts::recheck_recorded`]); kept in the record until mounted
    /// again or unmounted. Changed only under the mount table lock.
    dead_mounts: Mutex<Vec<MountRecord>>,
    /// Local mode's descriptor holder: host mounts are made over
    /// connections it keeps, so they outlive this process.
    holder: std::sync::OnceLock<Arc<crate::registry::HolderClient>>,
    /// Host mounts being made: recorded before `mount(2)`, so that a
    /// process killed before the mount is recorded (or its connection
    /// kept by the holder) leaves a record for the next start to find the
    /// dead mount by. Changed only under the mount table lock.
    mounting: Mutex<Vec<MountRecord>>,
    /// Until when every open keeps the orphans; see
    /// [`Registry::hold_orphans_until`].
    orphan_hold: Mutex<Option<Instant>>,
    /// Where computers are backed up, if anywhere ([`Registry::set_backup`]).
    backup: std::sync::OnceLock<backed_up::Backups>,
    /// How computers' writer Leases are taken, if they are
    /// ([`Registry::set_writer_leases`]).
    writer_leases: std::sync::OnceLock<writer_lease::WriterLeases>,
    /// Computers handed over to another node, by name ([`moves`]): calls
    /// wait while the hand-over runs, and are told where it went after.
    departing: Mutex<HashMap<String, tokio::sync::watch::Sender<moves::Departure>>>,
    /// How many snapshots a computer may have ([`Registry::set_snapshot_limits`]).
    snapshot_limits: Mutex<snapshots::SnapshotLimits>,
}

/// One open computer.
struct Slot {
    fs: Fs,
    name: String,
    /// Replaced by [`Registry::update`] while the engine stays open.
    settings: Mutex<Settings>,
    dir: PathBuf,
    /// The registry's scratch directory.
    scratch_dir: PathBuf,
    active: AtomicUsize,
    last_used: Mutex<Instant>,
    /// Cancelled when the computer is deleted or the agent shuts down.
    cancel: CancellationToken,
    /// Set (before `cancel`) when the computer is deleted, so work it
    /// cancelled can say why.
    deleted: std::sync::atomic::AtomicBool,
    /// Host FUSE mounts of this engine, by mountpoint. Non-empty keeps the
    /// slot open. Changed only under the computer's lock and the mount table lock.
    mounts: Mutex<HashMap<PathBuf, HostMount>>,
    /// Handed-over FUSE connections served over this engine, by
    /// connection id. Non-empty keeps the slot open; each removes itself
    /// when the kernel ends it.
    connections: Mutex<HashMap<u64, ConnectionHandle>>,
    /// The continuous backup of this engine ([`backed_up`]).
    backup: Mutex<backed_up::SlotBackup>,
    /// The computer's writer Lease while it is open ([`writer_lease`]).
    writer_lease: Mutex<Option<agentcomputer_lease::HeldLease>>,
    /// Why the writer Lease was lost, once it was.
    lease_lost: Mutex<Option<String>>,
    /// Why this engine's work was ended while the computer goes on (a
    /// restore to a snapshot replaced its files), once it was.
    ended: Mutex<Option<String>>,
    /// Set when the computer is handed over to another node: the engine
    /// commits nothing more (checked by its commit hook with the Lease).
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Still held when a slot goes without a close (the process shuts
        // down while its FUSE threads may still serve a request): stop
        // renewing, but let the engine commit until the renew deadline
        // rather than fail those requests with EIO. No other node may take
        // the Lease before its lease duration; the next agent on this node
        // (same identity) takes it over at once.
        if let Some(held) = self.writer_lease.get_mut().take() {
            let _ = held.stop_renewing();
        }
    }
}

impl Slot {
    /// Whether this node may no longer write the computer: its writer
    /// Lease passed its renew deadline or was taken (never without one).
    fn past_writer_deadline(&self) -> bool {
        self.writer_lease
            .lock()
            .as_ref()
            .is_some_and(|held| held.valid().is_err())
    }
}

impl Registry {
    /// The directory of computer `name` (which need not exist). Errors:
    /// `InvalidName`.
    pub(crate) fn computer_dir(&self, name: &str) -> Result<PathBuf, RegistryError> {
        lifecycle::check_name(name)?;
        Ok(self.dir_of(name))
    }

    /// Computer `name`'s lifecycle lock (open, close, create, update,
    /// delete), for work that must not overlap with those: held until the
    /// guard is dropped.
    pub(crate) async fn lock_computer(&self, name: &str) -> crate::name_locks::NameGuard<'_> {
        self.inner.names.lock(name).await
    }

    /// Opens the registry of `data_dir`, creating `data_dir/computers` if
    /// needed (directories private to the agent's user, `0700`) and
    /// removing leftovers of interrupted creates and deletes.
    /// Computers idle for `idle_timeout` are closed by [`Registry::close_idle`].
    pub fn new(data_dir: &Path, idle_timeout: Duration) -> io::Result<Registry> {
        Registry::new_with_held(data_dir, idle_timeout, &[])
    }

    /// [`Registry::new`] for an agent whose descriptor holder keeps the
    /// host mounts at `held` alive: those are not probed as dead mounts
    /// (a probe would wait for a server) but left for
    /// [`Registry::resume_mounts`].
    pub fn new_with_held(
        data_dir: &Path,
        idle_timeout: Duration,
        held: &[PathBuf],
    ) -> io::Result<Registry> {
        let computers_dir = data_dir.join(crate::layout::COMPUTERS_DIR);
        private::ensure_dir(data_dir)?;
        private::ensure_dir(&computers_dir)?;
        let scratch_dir = data_dir.join(SCRATCH_DIR);
        prepare_scratch(&scratch_dir)?;
        for entry in std::fs::read_dir(&computers_dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".creating-") || name.starts_with(".deleting-") {
                warn!(dir = %entry.path().display(), "removing leftover of an interrupted create/delete");
                std::fs::remove_dir_all(entry.path())?;
            } else if entry.file_type()?.is_dir() {
                // A restore killed before its rename leaves its rebuilt copy;
                // the database beside it is untouched.
                for file in std::fs::read_dir(entry.path())? {
                    let file = file?;
                    if file
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".restoring-")
                    {
                        warn!(file = %file.path().display(), "removing leftover of an interrupted restore");
                        std::fs::remove_file(file.path())?;
                    }
                }
            }
        }
        let dead_mounts = mounts::recheck_recorded(data_dir, held)?;
        Ok(Registry {
            inner: Arc::new(Inner {
                data_dir: data_dir.to_path_buf(),
                computers_dir,
                scratch_dir,
                idle_timeout,
                open: Mutex::new(HashMap::new()),
                names: NameLocks::default(),
                mount_table: tokio::sync::Mutex::new(()),
                shutdown: CancellationToken::new(),
                dead_mounts: Mutex::new(dead_mounts),
                holder: std::sync::OnceLock::new(),
                mounting: Mutex::new(Vec::new()),
                orphan_hold: Mutex::new(None),
                backup: std::sync::OnceLock::new(),
                writer_leases: std::sync::OnceLock::new(),
                departing: Mutex::new(HashMap::new()),
                snapshot_limits: Mutex::new(snapshots::DEFAULT_SNAPSHOT_LIMITS),
            }),
        })
    }

    pub(super) fn dir_of(&self, name: &str) -> PathBuf {
        self.inner.computers_dir.join(name)
    }

    /// How many computers have their engine open now.
    pub fn open_count(&self) -> usize {
        self.inner.open.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_egress::EgressConfig;
    use agentcomputer_fs::{Limits, Owner, ROOT_INO};

    /// Makes an orphan in computer `name` as a crashed process leaves it
    /// (a file unlinked while open, the engine dropped without a clean
    /// close) and returns its inode.
    async fn crash_with_orphan(data: &Path, name: &str) -> u64 {
        let registry = Registry::new(data, Duration::ZERO).unwrap();
        registry
            .create(name, Limits::default(), EgressConfig::default())
            .await
            .unwrap();
        let lease = registry.acquire(name).await.unwrap();
        let fs = lease.fs();
        let f = fs
            .mknod(
                ROOT_INO,
                b"f",
                agentcomputer_fs::FileKind::RegularFile,
                0o644,
                0,
                Owner::ROOT,
            )
            .unwrap();
        fs.write(f.ino, 0, b"still open").unwrap();
        // An engine handle that is never released: the file stays an orphan.
        std::mem::forget(fs.open_inode(f.ino).unwrap());
        fs.unlink(ROOT_INO, b"f").unwrap();
        drop(lease);
        // No close_all: the settings keep saying "open", as after a crash.
        drop(registry);
        f.ino
    }

    /// During an orphan hold (a cluster agent waiting for the mounter's
    /// `resume`), an ordinary open keeps the orphans a live connection may
    /// hold; once the hold is over, an orphan no connection came back for
    /// is freed at the next ordinary open. Without a hold, at once.
    #[tokio::test]
    async fn orphans_are_kept_during_the_hold_and_freed_after_it() {
        let data = tempfile::tempdir().unwrap();
        let ino = crash_with_orphan(data.path(), "demo").await;

        let registry = Registry::new(data.path(), Duration::ZERO).unwrap();
        registry.hold_orphans_until(Instant::now() + Duration::from_secs(600));
        let lease = registry.acquire("demo").await.unwrap();
        assert_eq!(lease.fs().kept_orphans(), 1);
        assert_eq!(lease.fs().read_all(ino).unwrap(), b"still open");
        drop(lease);
        // Hibernated and opened again during the hold: still kept.
        assert_eq!(registry.close_idle().await, 1);
        let lease = registry.acquire("demo").await.unwrap();
        assert_eq!(lease.fs().kept_orphans(), 1);
        drop(lease);
        // The hold ends (shortened, as once the mounter is linked): the
        // next ordinary open frees it.
        registry.shorten_orphan_hold(Instant::now());
        assert!(!registry.holds_orphans());
        assert_eq!(registry.close_idle().await, 1);
        let lease = registry.acquire("demo").await.unwrap();
        assert_eq!(lease.fs().kept_orphans(), 0);
        assert!(lease.fs().getattr(ino).is_err(), "the orphan was freed");
        drop(lease);
        registry.close_all().await;

        // Without a hold, the first ordinary open frees it.
        let data = tempfile::tempdir().unwrap();
        let ino = crash_with_orphan(data.path(), "demo").await;
        let registry = Registry::new(data.path(), Duration::ZERO).unwrap();
        let lease = registry.acquire("demo").await.unwrap();
        assert_eq!(lease.fs().kept_orphans(), 0);
        assert!(lease.fs().getattr(ino).is_err());
        drop(lease);
        registry.close_all().await;
    }
}
