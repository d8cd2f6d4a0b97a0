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
//! shutdown, and are recorded in `<data>/mounts.json` ([`crate::mounts`]).
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

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agentcomputer_container::local::{SANDBOX_GID, SANDBOX_UID};
use agentcomputer_egress::EgressConfig;
use agentcomputer_fs::{Fs, Limits, OpenOptions, Owner, ROOT_INO, SetAttr};
use agentcomputer_fuse::{ConnectionHandle, MountHandle, MountOptions, OwnerMap};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::computer::{self, Config, DB_FILE, SETTINGS_FILE, Settings, Usage};
use crate::mounts::{self, MountRecord};
use crate::name_locks::NameLocks;
use crate::private;

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
}

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
    holder: std::sync::OnceLock<Arc<crate::holder::Client>>,
    /// Host mounts being made: recorded before `mount(2)`, so that a
    /// process killed before the mount is recorded (or its connection
    /// kept by the holder) leaves a record for the next start to find the
    /// dead mount by. Changed only under the mount table lock.
    mounting: Mutex<Vec<MountRecord>>,
    /// Until when every open keeps the orphans; see
    /// [`Registry::hold_orphans_until`].
    orphan_hold: Mutex<Option<Instant>>,
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
}

/// One host mount of a computer.
struct HostMount {
    handle: MountHandle,
    /// A duplicate of the connection's `/dev/fuse` descriptor when the
    /// descriptor holder keeps it too: a new holder gets it again when the
    /// first one dies ([`Registry::watch_holder`]).
    fd: Option<OwnedFd>,
}

/// The right to use one computer's engine; keeps it open while held.
pub struct Lease {
    slot: Arc<Slot>,
    /// Whether releasing counts as use (restarts the idle clock). Looking
    /// at a computer's usage does not.
    touch: bool,
}

impl Lease {
    /// The computer's filesystem engine.
    pub fn fs(&self) -> &Fs {
        &self.slot.fs
    }

    /// The computer's egress policy as stored in its settings.
    pub fn egress(&self) -> EgressConfig {
        lock(&self.slot.settings).egress.clone()
    }

    /// The computer's settings now (they may change while the lease is
    /// held, by [`Registry::update`]).
    pub fn settings(&self) -> Settings {
        lock(&self.slot.settings).clone()
    }

    /// The computer's name.
    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// Where execs of this computer make their scratch space (0700, only
    /// the agent's user can enter; emptied when the agent starts).
    pub fn scratch_dir(&self) -> &Path {
        &self.slot.scratch_dir
    }

    /// A token cancelled when the computer is deleted or the agent shuts down.
    pub fn cancel_token(&self) -> CancellationToken {
        self.slot.cancel.child_token()
    }

    /// Whether the computer was deleted since this lease was taken (its
    /// work was then cancelled for that reason).
    pub fn deleted(&self) -> bool {
        self.slot.deleted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Refresh the idle clock before releasing, so the sweeper never sees
        // a released slot with a stale time.
        if self.touch {
            *lock(&self.slot.last_used) = Instant::now();
        }
        self.slot.active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
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
        let computers_dir = data_dir.join("computers");
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
            }),
        })
    }

    /// The idle time after which an unused computer is closed.
    pub fn idle_timeout(&self) -> Duration {
        self.inner.idle_timeout
    }

    fn dir_of(&self, name: &str) -> PathBuf {
        self.inner.computers_dir.join(name)
    }

    /// Creates computer `name` with `limits` and egress policy `egress`
    /// (validated by the caller). The directory is built under a
    /// temporary name and renamed into place, so a crash never leaves a
    /// half-made computer. Errors: `InvalidName`, `AlreadyExists`, `Io`,
    /// `Engine`.
    pub async fn create(
        &self,
        name: &str,
        limits: Limits,
        egress: EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        let config = Config {
            limits,
            egress,
            ..Config::default()
        };
        self.create_with(name, config, Owner::ROOT).await
    }

    /// Creates computer `name` with all of `config` (see
    /// [`Registry::create`]), its root directory owned by `root` (uid and
    /// gid as the FUSE mounts show them; [`Owner::ROOT`] in local mode, the
    /// sandbox user in a cluster, so that it can write at the volume's
    /// root). Errors: as [`Registry::create`].
    pub async fn create_with(
        &self,
        name: &str,
        config: Config,
        root: Owner,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        let limits = config.limits;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if dir.exists() {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{name}-{:016x}", rand::random::<u64>()));
        let owned = name.to_string();
        let settings = blocking(move || {
            let result = build_computer(&owned, &tmp, &dir, config, root);
            if result.is_err() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            result
        })
        .await?;
        info!(
            computer = name,
            max_bytes = limits.max_bytes,
            "created computer"
        );
        let usage = settings.usage_at_close.unwrap_or(Usage {
            used_bytes: 0,
            used_inodes: 1,
            disk_bytes: 0,
        });
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }

    /// Replaces the owner's decisions about computer `name` with `config`:
    /// `computer.json` is rewritten, and an open engine gets the new quota
    /// at once (a grown quota admits the next write; no reopen). Running
    /// execs keep the limits they started with; later ones get the new.
    /// Returns whether anything changed. Errors: `InvalidName`, `NotFound`,
    /// `Io`, `Engine` (the quota could not be stored in the database; the
    /// settings are then unchanged).
    pub async fn update(&self, name: &str, config: Config) -> Result<bool, RegistryError> {
        check_name(name)?;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        let slot = lock(&self.inner.open).get(name).cloned();
        let owned = name.to_string();
        blocking(move || {
            let io_err = |source| RegistryError::Io {
                name: owned.clone(),
                source,
            };
            let mut stored = match Settings::load(&dir) {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(RegistryError::NotFound(owned.clone()));
                }
                Err(e) => return Err(io_err(e)),
            };
            let mut wanted = stored.clone();
            wanted.apply(config);
            if wanted == stored {
                return Ok(false);
            }
            if let Some(slot) = &slot {
                if slot.fs.limits() != wanted.limits() {
                    slot.fs.set_limits(wanted.limits()).map_err(|source| {
                        RegistryError::Engine {
                            name: owned.clone(),
                            source,
                        }
                    })?;
                }
                // The open engine's record says "open" (usage unknown):
                // keep it so.
                wanted.usage_at_close = None;
            }
            stored = wanted;
            stored.save(&dir).map_err(io_err)?;
            if let Some(slot) = &slot {
                *lock(&slot.settings) = stored;
            }
            Ok(true)
        })
        .await
    }

    /// Deletes computer `name` and all its files. Its running work is
    /// cancelled; leases still held keep using the (now unlinked) database
    /// until they end. Errors: `InvalidName`, `NotFound`, `Io`.
    pub async fn delete(&self, name: &str) -> Result<(), RegistryError> {
        check_name(name)?;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if !dir.join(SETTINGS_FILE).exists() {
            return Err(RegistryError::NotFound(name.to_string()));
        }
        let removed = lock(&self.inner.open).remove(name);
        if let Some(slot) = removed {
            slot.deleted
                .store(true, std::sync::atomic::Ordering::SeqCst);
            slot.cancel.cancel();
            let served = lock(&slot.connections).len();
            if served > 0 {
                warn!(
                    computer = name,
                    connections = served,
                    "deleted computer still serves handed-over FUSE connections until the mounter unmounts them"
                );
            }
            let _table = self.inner.mount_table.lock().await;
            unmount_all(&slot, &self.inner).await;
            self.save_mounts().await;
        }
        let trash = self
            .inner
            .computers_dir
            .join(format!(".deleting-{name}-{:016x}", rand::random::<u64>()));
        let owned = name.to_string();
        blocking(move || {
            // Renaming first makes the delete atomic for readers of the
            // directory; the slow removal happens out of sight.
            std::fs::rename(&dir, &trash)?;
            std::fs::remove_dir_all(&trash)
        })
        .await
        .map_err(|source| RegistryError::Io {
            name: owned,
            source,
        })?;
        info!(computer = name, "deleted computer");
        Ok(())
    }

    /// The secret of computer `name` that signs its share links
    /// ([`crate::share`]): [`SHARE_KEY_BYTES`] random bytes kept in
    /// `computers/<name>/share.key` (`0600`). Being in the computer's own
    /// directory, it goes when the computer is deleted, and with it every
    /// link it signed; a computer made again under the same name gets a new
    /// one. With `create`, a missing key is made (under the computer's lock,
    /// so never for a computer being deleted); without, a missing key or
    /// computer is `Ok(None)`. Errors: `InvalidName`, `NotFound` (with
    /// `create`), `Io` for a key file that cannot be read or written or
    /// has the wrong length.
    pub async fn share_key(
        &self,
        name: &str,
        create: bool,
    ) -> Result<Option<[u8; SHARE_KEY_BYTES]>, RegistryError> {
        check_name(name)?;
        let dir = self.dir_of(name);
        let owned = name.to_string();
        let io_err = move |source| RegistryError::Io {
            name: owned.clone(),
            source,
        };
        if !create {
            return blocking(move || read_share_key(&dir)).await.map_err(io_err);
        }
        let _guard = self.inner.names.lock(name).await;
        if !dir.join(SETTINGS_FILE).exists() {
            return Err(RegistryError::NotFound(name.to_string()));
        }
        blocking(move || {
            if let Some(key) = read_share_key(&dir)? {
                return Ok(Some(key));
            }
            let mut key = [0u8; SHARE_KEY_BYTES];
            rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut key)
                .map_err(io::Error::other)?;
            // Written aside, synced, then renamed: a reader sees no key or
            // the whole key.
            let tmp = dir.join(format!(".{SHARE_KEY_FILE}.tmp"));
            {
                use std::io::Write;
                let mut f = private::create_file(&tmp)?;
                f.write_all(&key)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, dir.join(SHARE_KEY_FILE))?;
            Ok(Some(key))
        })
        .await
        .map_err(io_err)
    }

    /// A lease on computer `name`, opening its engine if it is closed.
    /// Errors: `InvalidName`, `NotFound`, `Io`, `Engine`.
    pub async fn acquire(&self, name: &str) -> Result<Lease, RegistryError> {
        self.acquire_with(name, OpenOptions::default()).await
    }

    /// A lease on computer `name` for taking a live FUSE connection over
    /// (`agentcomputer_fuse::resume_connection`): as [`Registry::acquire`],
    /// but an engine opened here keeps the files unlinked while open
    /// ([`OpenOptions::keep_orphans`]), which the connection's kernel
    /// still holds for processes in the mount and frees with its FORGET.
    /// An engine open already is used as it is. Errors: as
    /// [`Registry::acquire`].
    pub async fn acquire_live(&self, name: &str) -> Result<Lease, RegistryError> {
        self.acquire_with(name, OpenOptions { keep_orphans: true })
            .await
    }

    /// Until `until`, every engine this registry opens keeps its orphans
    /// ([`OpenOptions::keep_orphans`]), as an open for a live connection
    /// ([`Registry::acquire_live`]) does. For cluster mode: FUSE
    /// connections a previous agent process served may still be on their
    /// way back (the mounter's `resume`), and their kernels hold files
    /// unlinked while open, which an ordinary open would free under them.
    /// Orphans that no connection comes back for are freed at the first
    /// ordinary open after the hold (the computer hibernated and opened
    /// again). Replaces an earlier hold.
    pub fn hold_orphans_until(&self, until: Instant) {
        *lock(&self.inner.orphan_hold) = Some(until);
    }

    /// Ends the hold of [`Registry::hold_orphans_until`] at `until` if it
    /// would end later (never extends it).
    pub fn shorten_orphan_hold(&self, until: Instant) {
        let mut hold = lock(&self.inner.orphan_hold);
        if let Some(end) = hold.as_mut() {
            *end = (*end).min(until);
        }
    }

    /// Whether opens keep orphans now ([`Registry::hold_orphans_until`]).
    pub fn holds_orphans(&self) -> bool {
        lock(&self.inner.orphan_hold).is_some_and(|end| Instant::now() < end)
    }

    async fn acquire_with(&self, name: &str, options: OpenOptions) -> Result<Lease, RegistryError> {
        check_name(name)?;
        if let Some(lease) = self.try_lease(name, true) {
            return Ok(lease);
        }
        let _guard = self.inner.names.lock(name).await;
        if let Some(lease) = self.try_lease(name, true) {
            return Ok(lease);
        }
        let options = if !options.keep_orphans && self.holds_orphans() {
            info!(
                computer = name,
                "opening with orphans kept: connections of the previous agent process may still be resumed"
            );
            OpenOptions { keep_orphans: true }
        } else {
            options
        };
        let dir = self.dir_of(name);
        let owned = name.to_string();
        let (fs, settings) = blocking(move || open_computer(&owned, &dir, options)).await?;
        let slot = Arc::new(Slot {
            fs,
            dir: self.dir_of(name),
            name: name.to_string(),
            settings: Mutex::new(settings),
            scratch_dir: self.inner.scratch_dir.clone(),
            active: AtomicUsize::new(1),
            last_used: Mutex::new(Instant::now()),
            cancel: self.inner.shutdown.child_token(),
            deleted: Default::default(),
            mounts: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
        });
        lock(&self.inner.open).insert(name.to_string(), slot.clone());
        info!(computer = name, "opened computer");
        Ok(Lease { slot, touch: true })
    }

    fn try_lease(&self, name: &str, touch: bool) -> Option<Lease> {
        let map = lock(&self.inner.open);
        let slot = map.get(name)?;
        slot.active.fetch_add(1, Ordering::SeqCst);
        Some(Lease {
            slot: slot.clone(),
            touch,
        })
    }

    /// Describes computer `name` without opening it when its usage is known.
    /// Looking does not count as use: it never delays hibernation.
    /// Errors: as [`Registry::acquire`].
    pub async fn get(&self, name: &str) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        if let Some(lease) = self.try_lease(name, false) {
            return live_info(lease).await;
        }
        let dir = self.dir_of(name);
        let settings = match Settings::load(&dir) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(RegistryError::NotFound(name.to_string()));
            }
            Err(source) => {
                return Err(RegistryError::Io {
                    name: name.to_string(),
                    source,
                });
            }
        };
        match settings.usage_at_close {
            Some(usage) => Ok(ComputerInfo {
                settings,
                usage,
                open: false,
            }),
            // Not closed cleanly (crash): the engine knows the truth.
            None => live_info(self.acquire(name).await?).await,
        }
    }

    /// Describes all computers, sorted by name. Entries that are not valid
    /// computers (stray files, unreadable settings) are skipped with a warning.
    pub async fn list(&self) -> Result<Vec<ComputerInfo>, RegistryError> {
        let names = self.names().await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.get(&name).await {
                Ok(info) => out.push(info),
                // Deleted while listing.
                Err(RegistryError::NotFound(_)) => {}
                Err(err) => warn!(computer = %name, error = %err, "skipping computer in list"),
            }
        }
        Ok(out)
    }

    /// The names of all computers, sorted, without opening or reading them.
    /// Errors: `Io` when the computers directory cannot be read.
    pub async fn names(&self) -> Result<Vec<String>, RegistryError> {
        let dir = self.inner.computers_dir.clone();
        let mut names = blocking(move || -> io::Result<Vec<String>> {
            let mut names = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if let Some(name) = entry.file_name().to_str()
                    && computer::is_valid_name(name)
                    && entry.path().join(SETTINGS_FILE).exists()
                {
                    names.push(name.to_string());
                }
            }
            Ok(names)
        })
        .await
        .map_err(|source| RegistryError::Io {
            name: String::new(),
            source,
        })?;
        names.sort();
        Ok(names)
    }

    /// Closes every open computer that has had no lease for the idle timeout.
    /// Returns how many were closed.
    pub async fn close_idle(&self) -> usize {
        let idle = self.inner.idle_timeout;
        let closable = |s: &Slot| {
            s.active.load(Ordering::SeqCst) == 0
                && lock(&s.last_used).elapsed() >= idle
                && lock(&s.mounts).is_empty()
                && lock(&s.connections).is_empty()
                // A lazily detached mount still serving processes holds
                // the engine: closing would let the next use open a second
                // engine on the same database.
                && !s.fs.is_shared()
        };
        let candidates: Vec<String> = lock(&self.inner.open)
            .iter()
            .filter(|(_, s)| closable(s))
            .map(|(n, _)| n.clone())
            .collect();
        let mut count = 0;
        for name in candidates {
            // Under the computer's own lock, so no open of it runs at the
            // same time; the others stay free to open and close.
            let _guard = self.inner.names.lock(&name).await;
            let victim = {
                let mut map = lock(&self.inner.open);
                match map.get(&name) {
                    Some(s) if closable(s) => map.remove(&name),
                    _ => None,
                }
            };
            if let Some(slot) = victim {
                close_slot(slot).await;
                count += 1;
            }
        }
        count
    }

    /// Gives free pages back to the host for computers that are idle but
    /// stay open (a host mount or a lazily detached mount holds them), when
    /// at least [`COMPACT_MIN_FREE_BYTES`] are free. Closing an idle
    /// computer compacts it too (see `close_slot`). Returns how many were
    /// compacted.
    pub async fn compact_idle(&self) -> usize {
        let idle = self.inner.idle_timeout;
        let slots: Vec<Arc<Slot>> = lock(&self.inner.open)
            .values()
            .filter(|s| {
                s.active.load(Ordering::SeqCst) == 0 && lock(&s.last_used).elapsed() >= idle
            })
            .cloned()
            .collect();
        let mut count = 0;
        for slot in slots {
            let worth = blocking({
                let slot = slot.clone();
                move || {
                    let free = slot.fs.disk_usage().map(|d| d.free_bytes).unwrap_or(0);
                    if free >= COMPACT_MIN_FREE_BYTES {
                        compact(&slot.name, &slot.fs);
                        true
                    } else {
                        false
                    }
                }
            })
            .await;
            count += usize::from(worth);
        }
        count
    }

    /// Cancels all running work (execs) on every computer; used at shutdown.
    pub fn cancel_all(&self) {
        self.inner.shutdown.cancel();
    }

    /// Makes host mounts over connections `holder` keeps (local mode), so
    /// they outlive this process. Set once, before the first mount.
    pub fn set_holder(&self, holder: Arc<crate::holder::Client>) {
        let _ = self.inner.holder.set(holder);
    }

    /// Tells the holder that the mount at `path` is gone.
    async fn let_go(&self, path: &Path) {
        if let Some(holder) = self.inner.holder.get().cloned() {
            let p = path.to_path_buf();
            if let Err(e) = blocking(move || holder.drop_path(&p)).await {
                warn!(path = %path.display(), error = %e, "could not tell the descriptor holder about an unmount");
            }
        }
    }

    /// Watches the link to the descriptor holder until `stop` is cancelled
    /// (local mode; returns at once without a holder). When the link
    /// breaks (the holder was killed), starts a new holder as at start-up
    /// and hands it every connection this process still serves
    /// ([`Registry::keep_served`]), so that a later crash of this process
    /// still leaves the mounts to the next one. Up to
    /// [`HOLDER_RESTART_ATTEMPTS`] attempts, [`HOLDER_RESTART_DELAY`]
    /// apart and doubling, each logged; after the last, host mounts end
    /// with this process (logged) and the watch stops.
    pub async fn watch_holder(self, stop: CancellationToken) {
        let Some(holder) = self.inner.holder.get().cloned() else {
            return;
        };
        loop {
            let h = holder.clone();
            let broken = tokio::select! {
                _ = stop.cancelled() => return,
                r = blocking(move || h.wait_broken(Duration::from_secs(1))) => r,
            };
            match broken {
                Ok(false) => continue,
                Ok(true) => {}
                // Out of descriptors says nothing about the holder: look
                // again once some are back.
                Err(e) if crate::holder::is_descriptor_shortage(&e) => {
                    warn!(error = %e, "cannot watch the link to the FUSE descriptor holder for now; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "cannot watch the link to the FUSE descriptor holder; treating it as broken");
                }
            }
            warn!(
                "the link to the FUSE descriptor holder broke (the holder died): starting a new one"
            );
            let mut delay = HOLDER_RESTART_DELAY;
            let mut replaced = false;
            for attempt in 1..=HOLDER_RESTART_ATTEMPTS {
                if stop.is_cancelled() {
                    return;
                }
                let h = holder.clone();
                let result = match blocking(move || h.restart()).await {
                    Ok(()) => self.keep_served().await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(kept) => {
                        info!(
                            attempt,
                            kept, "a new FUSE descriptor holder keeps the host mounts again"
                        );
                        replaced = true;
                        break;
                    }
                    Err(e) => {
                        warn!(attempt, of = HOLDER_RESTART_ATTEMPTS, error = %e, "replacing the FUSE descriptor holder failed");
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay *= 2;
            }
            if !replaced {
                tracing::error!(
                    attempts = HOLDER_RESTART_ATTEMPTS,
                    "no FUSE descriptor holder: host mounts will end with this process"
                );
                return;
            }
        }
    }

    /// Hands a duplicate of every host mount connection this process
    /// serves over a held connection to the holder (`keep`), under the
    /// mount table lock. Connections the kernel ended are skipped.
    /// Returns how many were kept. Errors: the first failed `keep`.
    pub async fn keep_served(&self) -> io::Result<usize> {
        let Some(holder) = self.inner.holder.get().cloned() else {
            return Ok(0);
        };
        let _table = self.inner.mount_table.lock().await;
        let mut batch = Vec::new();
        for slot in lock(&self.inner.open).values() {
            for (path, m) in lock(&slot.mounts).iter() {
                let (Some(fd), Some(init)) = (&m.fd, m.handle.init_record()) else {
                    continue;
                };
                if !agentcomputer_fuse::is_live(fd).unwrap_or(false) {
                    continue;
                }
                let held = agentcomputer_handover::holder::KeptConnection {
                    path: path.clone(),
                    computer: slot.name.clone(),
                    init: agentcomputer_handover::init::encode(init.as_bytes()),
                    dev: m.handle.device(),
                };
                batch.push((held, fd.try_clone()?));
            }
        }
        blocking(move || {
            for (held, fd) in &batch {
                holder.keep(held, fd.as_fd())?;
            }
            Ok(batch.len())
        })
        .await
    }

    /// Takes over the host mounts a previous agent process served (the
    /// holder's `list`): each is served again over its live connection
    /// (`agentcomputer_fuse::resume_connection`), so processes using it
    /// see a pause, not an error. A mount whose computer is gone, or that
    /// cannot be resumed, is unmounted lazily and let go. Returns how many
    /// were resumed.
    pub async fn resume_mounts(
        &self,
        held: Vec<(
            agentcomputer_handover::holder::KeptConnection,
            std::os::fd::OwnedFd,
        )>,
    ) -> usize {
        let mut resumed = 0;
        for (h, fd) in held {
            let started = std::time::Instant::now();
            // The mount's root, found without following the path: it is
            // unmounted through it, never through the path.
            let (p, dev) = (h.path.clone(), h.dev);
            let root = match blocking(move || agentcomputer_fuse::find_mount_root(&p, dev)).await {
                Ok(Some(root)) => Some(root),
                Ok(None) => {
                    warn!(computer = %h.computer, path = %h.path.display(), "cannot find the root of a host mount of a previous run without following its path");
                    None
                }
                Err(e) => {
                    warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot find the root of a host mount of a previous run");
                    None
                }
            };
            let result = async {
                let root = match &root {
                    Some(root) => root.try_clone(),
                    None => Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        "its mount cannot be found without following a link",
                    )),
                }
                .map_err(|source| RegistryError::Mount {
                    path: h.path.display().to_string(),
                    source,
                })?;
                let kept = fd.try_clone().map_err(|source| RegistryError::Mount {
                    path: h.path.display().to_string(),
                    source,
                })?;
                let handed = crate::handed_over::Handed::Live { init: &h.init };
                let opts = host_mount_options(&h.computer);
                let (lease, conn) =
                    crate::handed_over::serve_handed_over(self, &h.computer, fd, opts, handed)
                        .await
                        .map_err(|e| match e {
                            crate::handed_over::TakeOverError::Registry(e) => e,
                            other => RegistryError::Mount {
                                path: h.path.display().to_string(),
                                source: io::Error::other(other.to_string()),
                            },
                        })?;
                let mount = HostMount {
                    handle: MountHandle::resumed(h.path.clone(), conn).with_root(root),
                    fd: Some(kept),
                };
                lock(&lease.slot.mounts).insert(h.path.clone(), mount);
                Ok::<(), RegistryError>(())
            }
            .await;
            match result {
                Ok(()) => {
                    resumed += 1;
                    info!(computer = %h.computer, path = %h.path.display(), took = ?started.elapsed(), "resumed a host mount served by a previous run");
                }
                Err(e) => {
                    // Detached through its root, wherever it is; one that
                    // cannot be found is never unmounted by path: its
                    // connection ends when the holder lets go, and the
                    // mount is left dead (ENOTCONN) where it is.
                    match root {
                        Some(root) => {
                            warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot resume a host mount of a previous run: unmounting it");
                            if let Err(e) =
                                blocking(move || agentcomputer_fuse::detach_mount(&root)).await
                            {
                                warn!(path = %h.path.display(), error = %e, "unmount failed");
                            }
                        }
                        None => {
                            warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot resume a host mount of a previous run: ending its connection; the mount is left dead where it is");
                        }
                    }
                    self.let_go(&h.path).await;
                }
            }
        }
        self.save_mounts().await;
        resumed
    }

    /// Stops serving every host mount made over a held connection without
    /// unmounting it (the next agent process resumes it); other mounts
    /// stay for [`Registry::close_all`] to unmount. Returns how many were
    /// left.
    pub fn leave_mounts(&self) -> usize {
        let slots: Vec<Arc<Slot>> = lock(&self.inner.open).values().cloned().collect();
        let mut left = 0;
        for slot in slots {
            let mut mounts = lock(&slot.mounts);
            let held: Vec<PathBuf> = mounts
                .iter()
                .filter(|(_, m)| m.handle.init_record().is_some())
                .map(|(p, _)| p.clone())
                .collect();
            for p in held {
                if let Some(m) = mounts.remove(&p) {
                    m.handle.leave();
                    left += 1;
                }
            }
        }
        left
    }

    /// Unmounts every host mount, then closes every open computer that has
    /// no lease, recording its usage. Computers still leased are left open
    /// (and logged). For shutdown.
    pub async fn close_all(&self) {
        let mut all: Vec<Arc<Slot>> = lock(&self.inner.open).values().cloned().collect();
        // One order for every caller, so two shutdowns cannot deadlock.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        let mut held = Vec::with_capacity(all.len());
        for slot in &all {
            held.push(self.inner.names.lock(&slot.name).await);
        }
        let table = self.inner.mount_table.lock().await;
        for slot in &all {
            unmount_all(slot, &self.inner).await;
        }
        self.save_mounts().await;
        drop(table);
        let slots: Vec<Arc<Slot>> = {
            let mut map = lock(&self.inner.open);
            let names: Vec<String> = map.keys().cloned().collect();
            names
                .iter()
                .filter_map(|n| {
                    if map[n].active.load(Ordering::SeqCst) != 0 {
                        warn!(computer = %n, "computer still in use at shutdown; leaving it open");
                        None
                    } else if !lock(&map[n].connections).is_empty() {
                        // Only the kernel ends them (the mounter unmounts).
                        warn!(computer = %n, "computer still serves handed-over FUSE connections at shutdown; leaving it open");
                        None
                    } else {
                        map.remove(n)
                    }
                })
                .collect()
        };
        for slot in slots {
            close_slot(slot).await;
        }
    }

    /// Mounts computer `name` over FUSE at the host directory `path`
    /// (opened without following any link, see [`crate::mounts::MountDir`]
    /// for its checks; the mount is attached to that descriptor) and
    /// records the mount. The directory must belong to the agent's (effective)
    /// user and be empty unless `nonempty`. A dead mount a killed previous
    /// run left at `path` is replaced.
    ///
    /// The mount is made for the agent's user: `nosymfollow` (no path is
    /// resolved through a link on it, so a computer's links cannot point
    /// host tools at host files; the mount fails where the kernel refuses
    /// the flag) and every file shown as owned by the agent's effective
    /// uid and gid ([`agentcomputer_fuse::OwnerMap`]; files made through it
    /// are stored as the sandbox user).
    ///
    /// Errors: as [`Registry::acquire`], `MountNeedsRoot` (an agent that
    /// is not root: nothing is tried), `MountThroughLink` (a symbolic link
    /// in the path), `MountNotOwned`, `MountNotEmpty`, or `Mount` with
    /// `EINVAL`, `ENOENT`, `ENOTDIR`, `EBUSY` or the kernel's errno.
    pub async fn mount(
        &self,
        name: &str,
        path: &Path,
        nonempty: bool,
    ) -> Result<(), RegistryError> {
        let lease = self.acquire(name).await?;
        let _guard = self.inner.names.lock(name).await;
        let _table = self.inner.mount_table.lock().await;
        if lease.slot.cancel.is_cancelled() {
            // Deleted (or shutting down) while we waited.
            return Err(RegistryError::NotFound(name.to_string()));
        }
        let mount_err = |source| RegistryError::Mount {
            path: path.display().to_string(),
            source,
        };
        if !path.is_absolute() {
            return Err(mount_err(io::Error::from_raw_os_error(
                nix::errno::Errno::EINVAL as i32,
            )));
        }
        let agent_uid = nix::unistd::geteuid().as_raw();
        if agent_uid != 0 {
            return Err(RegistryError::MountNeedsRoot {
                path: path.display().to_string(),
                uid: agent_uid,
            });
        }
        let busy = lock(&self.inner.open)
            .values()
            .any(|s| lock(&s.mounts).contains_key(path));
        if busy {
            return Err(mount_err(io::Error::from_raw_os_error(
                nix::errno::Errno::EBUSY as i32,
            )));
        }
        let had_dead = lock(&self.inner.dead_mounts).iter().any(|r| r.path == path);
        if had_dead {
            let target = path.to_path_buf();
            if blocking(move || mounts::remove_dead(&target))
                .await
                .map_err(mount_err)?
            {
                info!(computer = name, path = %path.display(), "replacing the dead mount a previous run left");
            }
            lock(&self.inner.dead_mounts).retain(|r| r.path != path);
            self.save_mounts().await;
        }
        // The target is on disk before mount(2): a kill before the mount
        // is recorded leaves the next start a record to find the dead
        // mount by (mounts::recheck_recorded), instead of a mount no one
        // knows of.
        let intent = MountRecord {
            computer: name.to_string(),
            path: path.to_path_buf(),
        };
        lock(&self.inner.mounting).push(intent.clone());
        if let Err(e) = self.try_save_mounts().await {
            lock(&self.inner.mounting).retain(|r| *r != intent);
            return Err(RegistryError::Mount {
                path: path.display().to_string(),
                source: io::Error::new(
                    e.kind(),
                    format!("cannot record the mount before making it: {e}"),
                ),
            });
        }
        let fs = lease.fs().clone();
        let target = path.to_path_buf();
        let opts = host_mount_options(name);
        let holder = self.inner.holder.get().cloned();
        let computer = name.to_string();
        let mount = blocking(move || {
            let mount_err = |source| RegistryError::Mount {
                path: target.display().to_string(),
                source,
            };
            let dir = match mounts::MountDir::open(&target) {
                Ok(dir) => dir,
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                    return Err(RegistryError::MountThroughLink {
                        path: target.display().to_string(),
                    });
                }
                Err(e) => return Err(mount_err(e)),
            };
            let owner = dir.owner().map_err(mount_err)?;
            if owner != agent_uid {
                return Err(RegistryError::MountNotOwned {
                    path: target.display().to_string(),
                    owner,
                    agent: agent_uid,
                });
            }
            if !nonempty && !dir.is_empty().map_err(mount_err)? {
                return Err(RegistryError::MountNotEmpty {
                    path: target.display().to_string(),
                });
            }
            // Over a connection that can outlive this process: the holder,
            // when there is one, keeps a duplicate of it.
            let mounted = agentcomputer_fuse::mount_connection_at(fs, dir.as_fd(), &target, opts)
                .and_then(|(handle, kept)| {
                    let Some(holder) = &holder else {
                        return Ok(HostMount { handle, fd: None });
                    };
                    let held = agentcomputer_handover::holder::KeptConnection {
                        path: target.clone(),
                        computer,
                        init: agentcomputer_handover::init::encode(
                            handle.init_record().expect("a connection mount").as_bytes(),
                        ),
                        dev: handle.device(),
                    };
                    holder.keep(&held, kept.as_fd())?;
                    Ok(HostMount {
                        handle,
                        fd: Some(kept),
                    })
                });
            mounted.map_err(|e| {
                let refused = e
                    .get_ref()
                    .and_then(|inner| {
                        inner.downcast_ref::<agentcomputer_fuse::NosymfollowRefused>()
                    })
                    .cloned();
                match refused {
                    Some(refused) => RegistryError::MountUnsafe {
                        path: target.display().to_string(),
                        refused,
                    },
                    None => mount_err(e),
                }
            })
        })
        .await;
        lock(&self.inner.mounting).retain(|r| *r != intent);
        let mount = match mount {
            Ok(m) => m,
            Err(e) => {
                self.save_mounts().await;
                return Err(e);
            }
        };
        lock(&lease.slot.mounts).insert(path.to_path_buf(), mount);
        info!(computer = name, path = %path.display(), "mounted computer");
        self.save_mounts().await;
        Ok(())
    }

    /// Unmounts the mount of computer `name` at `path` and updates the
    /// record. A busy mount is detached lazily. A dead mount of `name` that
    /// a killed previous run left at `path` is removed. The mount is
    /// unmounted only when `path`, resolved without following any link,
    /// still leads to it (checked on the mount's own descriptor, through
    /// which it is then detached); otherwise it stays mounted and recorded.
    /// Errors: `InvalidName`, `NotMounted`, `UnmountThroughLink` (a link in
    /// the path), `UnmountElsewhere` (the path leads to another place),
    /// `Mount` with `EINVAL` (relative path) or the errno of `umount2(2)`.
    pub async fn unmount(&self, name: &str, path: &Path) -> Result<(), RegistryError> {
        check_name(name)?;
        let mount_err = |errno: nix::errno::Errno| RegistryError::Mount {
            path: path.display().to_string(),
            source: io::Error::from_raw_os_error(errno as i32),
        };
        if !path.is_absolute() {
            return Err(mount_err(nix::errno::Errno::EINVAL));
        }
        let _guard = self.inner.names.lock(name).await;
        let _table = self.inner.mount_table.lock().await;
        let slot = lock(&self.inner.open).get(name).cloned();
        let handle = slot.and_then(|s| lock(&s.mounts).remove(path));
        let Some(handle) = handle else {
            let dead = lock(&self.inner.dead_mounts)
                .iter()
                .any(|r| r.computer == name && r.path == path);
            if dead {
                let target = path.to_path_buf();
                let removed = blocking(move || mounts::remove_dead(&target)).await;
                lock(&self.inner.dead_mounts).retain(|r| r.path != path);
                self.save_mounts().await;
                removed.map_err(|source| RegistryError::Mount {
                    path: path.display().to_string(),
                    source,
                })?;
                info!(computer = name, path = %path.display(), "removed the dead mount a previous run left");
                return Ok(());
            }
            return Err(RegistryError::NotMounted {
                name: name.to_string(),
                path: path.display().to_string(),
            });
        };
        let (result, kept) = blocking(move || {
            let mut handle = handle;
            match handle.handle.try_unmount() {
                Err(e) if not_this_mount(&e).is_some() => (Err(e), Some(handle)),
                r => (r, None),
            }
        })
        .await;
        if let Some(handle) = kept {
            // The path was changed under the mount: it stays, recorded and
            // served, and a delete detaches it through its descriptor.
            let source = result.expect_err("refused");
            let slot = lock(&self.inner.open).get(name).cloned();
            if let Some(slot) = slot {
                lock(&slot.mounts).insert(path.to_path_buf(), handle);
            }
            let errno = not_this_mount(&source).unwrap_or(nix::errno::Errno::EBUSY as i32);
            warn!(computer = name, path = %path.display(), error = %source, "refused to unmount: the path no longer leads to the computer's mount");
            return Err(if errno == nix::errno::Errno::ELOOP as i32 {
                RegistryError::UnmountThroughLink {
                    path: path.display().to_string(),
                }
            } else {
                RegistryError::UnmountElsewhere {
                    path: path.display().to_string(),
                }
            });
        }
        self.let_go(path).await;
        self.save_mounts().await;
        result.map_err(|source| RegistryError::Mount {
            path: path.display().to_string(),
            source,
        })?;
        info!(computer = name, path = %path.display(), "unmounted computer");
        Ok(())
    }

    /// Keeps `conn`, a FUSE connection served over `lease`'s engine (handed
    /// over by the cluster's mounter), with the computer: it is not
    /// hibernated while the connection lives. The connection removes itself
    /// when the kernel ends it. Errors: `NotFound` when the computer was
    /// deleted (or the agent is shutting down) since `lease` was taken; the
    /// connection is then dropped, still served until the kernel ends it.
    pub async fn attach_connection(
        &self,
        lease: &Lease,
        conn: ConnectionHandle,
    ) -> Result<(), RegistryError> {
        let _guard = self.inner.names.lock(lease.name()).await;
        if lease.slot.cancel.is_cancelled() {
            return Err(RegistryError::NotFound(lease.name().to_string()));
        }
        let id = conn.id();
        let weak: Weak<Slot> = Arc::downgrade(&lease.slot);
        let name = lease.name().to_string();
        conn.on_end(move || {
            if let Some(slot) = weak.upgrade() {
                *lock(&slot.last_used) = Instant::now();
                lock(&slot.connections).remove(&id);
            }
            info!(computer = %name, connection = id, "FUSE connection ended");
        });
        // Checked under the map's lock: a session ending now runs the hook
        // after the insert, and one that already ended is not inserted.
        let mut connections = lock(&lease.slot.connections);
        if conn.is_serving() {
            connections.insert(id, conn);
        }
        Ok(())
    }

    /// How many handed-over FUSE connections serve computer `name` now.
    pub fn connection_count(&self, name: &str) -> usize {
        lock(&self.inner.open)
            .get(name)
            .map_or(0, |s| lock(&s.connections).len())
    }

    /// The host mounts now, sorted by computer then path.
    pub fn mounts(&self) -> Vec<MountRecord> {
        let mut out: Vec<MountRecord> = lock(&self.inner.open)
            .iter()
            .flat_map(|(name, s)| {
                lock(&s.mounts)
                    .keys()
                    .map(|p| MountRecord {
                        computer: name.clone(),
                        path: p.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by(|a, b| (&a.computer, &a.path).cmp(&(&b.computer, &b.path)));
        out
    }

    /// Rewrites `mounts.json` from the live mounts, those being made and
    /// the dead ones a previous run left; failures are logged (the record
    /// only helps the next start find dead mounts).
    async fn save_mounts(&self) {
        if let Err(e) = self.try_save_mounts().await {
            warn!(error = %e, "could not record host mounts");
        }
    }

    /// [`Registry::save_mounts`], returning the error.
    async fn try_save_mounts(&self) -> io::Result<()> {
        let mut records = self.mounts();
        records.extend(lock(&self.inner.mounting).iter().cloned());
        records.extend(lock(&self.inner.dead_mounts).iter().cloned());
        let dir = self.inner.data_dir.clone();
        blocking(move || mounts::save_records(&dir, &records)).await
    }

    /// How many computers have their engine open now.
    pub fn open_count(&self) -> usize {
        lock(&self.inner.open).len()
    }

    /// Runs [`Registry::close_idle`] periodically until `stop` is cancelled.
    pub async fn run_sweeper(self, stop: CancellationToken) {
        let period = (self.inner.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(period) => {
                    let closed = self.close_idle().await;
                    self.compact_idle().await;
                    if closed > 0 {
                        info!(closed, open = self.open_count(), "hibernated idle computers");
                    }
                }
            }
        }
    }
}

/// How many times [`Registry::watch_holder`] tries to replace a dead
/// descriptor holder.
pub const HOLDER_RESTART_ATTEMPTS: u32 = 5;

/// Delay after the first failed attempt to replace the descriptor holder
/// (doubling after each).
pub const HOLDER_RESTART_DELAY: Duration = Duration::from_millis(200);

/// Directory of the data directory holding per-exec scratch space, each
/// exec's in its own subdirectory (JavaScript's `/tmp` database). Mode
/// 0700; whatever it holds when the agent starts is left over from a crash
/// and is removed.
pub const SCRATCH_DIR: &str = "scratch";

/// Makes `dir` an empty directory of mode 0700, removing what a crashed run
/// left in it.
fn prepare_scratch(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.exists() {
        let mut left = 0usize;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            left += 1;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        if left > 0 {
            warn!(dir = %dir.display(), entries = left, "removed scratch space left by a previous run");
        }
    } else {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Free bytes inside an idle, still open computer's database that make
/// [`Registry::compact_idle`] give them back (16 MiB).
pub const COMPACT_MIN_FREE_BYTES: u64 = 16 << 20;

/// File of a computer's share-link key inside its directory.
pub const SHARE_KEY_FILE: &str = "share.key";

/// Bytes in a share-link key (256 bits, the output size of SHA-256, as
/// RFC 2104 section 3 recommends for an HMAC key at least).
pub const SHARE_KEY_BYTES: usize = 32;

/// The share-link key in computer directory `dir`, `None` when the file
/// (or the directory) is missing.
fn read_share_key(dir: &Path) -> io::Result<Option<[u8; SHARE_KEY_BYTES]>> {
    match std::fs::read(dir.join(SHARE_KEY_FILE)) {
        Ok(bytes) => bytes.try_into().map(Some).map_err(|bytes: Vec<u8>| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{SHARE_KEY_FILE} holds {} bytes, not {SHARE_KEY_BYTES}",
                    bytes.len()
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn check_name(name: &str) -> Result<(), RegistryError> {
    if computer::is_valid_name(name) {
        Ok(())
    } else {
        Err(RegistryError::InvalidName(name.to_string()))
    }
}

/// Makes a computer in `tmp` and renames it to `dir`.
fn build_computer(
    name: &str,
    tmp: &Path,
    dir: &Path,
    config: Config,
    root: Owner,
) -> Result<Settings, RegistryError> {
    let limits = config.limits;
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    private::create_dir(tmp).map_err(io_err)?;
    let fs = Fs::create(&tmp.join(DB_FILE), limits).map_err(|source| RegistryError::Engine {
        name: name.to_string(),
        source,
    })?;
    if root != Owner::ROOT {
        let owner = SetAttr {
            uid: Some(root.uid),
            gid: Some(root.gid),
            ..SetAttr::default()
        };
        fs.setattr(ROOT_INO, &owner)
            .map_err(|source| RegistryError::Engine {
                name: name.to_string(),
                source,
            })?;
    }
    let st = fs.statfs().map_err(|source| RegistryError::Engine {
        name: name.to_string(),
        source,
    })?;
    drop(fs);
    let disk_bytes = db_file_bytes(&tmp.join(DB_FILE));
    let mut settings = Settings {
        name: name.to_string(),
        created_unix_nanos: computer::now_unix_nanos(),
        max_bytes: limits.max_bytes,
        max_inodes: limits.max_inodes,
        usage_at_close: Some(Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes,
        }),
        egress: EgressConfig::default(),
        runtimes: Default::default(),
        exec: Default::default(),
        display_name: None,
    };
    settings.apply(config);
    settings.save(tmp).map_err(io_err)?;
    std::fs::rename(tmp, dir).map_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::AlreadyExists | io::ErrorKind::DirectoryNotEmpty
        ) {
            RegistryError::AlreadyExists(name.to_string())
        } else {
            io_err(e)
        }
    })?;
    Ok(settings)
}

/// Opens a computer's engine, applies its settings' limits and marks the
/// settings "open" (usage unknown until closed cleanly).
fn open_computer(
    name: &str,
    dir: &Path,
    options: OpenOptions,
) -> Result<(Fs, Settings), RegistryError> {
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    let engine_err = |source| RegistryError::Engine {
        name: name.to_string(),
        source,
    };
    let mut settings = match Settings::load(dir) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RegistryError::NotFound(name.to_string()));
        }
        Err(e) => return Err(io_err(e)),
    };
    let fs = Fs::open_with(&dir.join(DB_FILE), options).map_err(engine_err)?;
    if fs.limits() != settings.limits() {
        fs.set_limits(settings.limits()).map_err(engine_err)?;
    }
    settings.usage_at_close = None;
    settings.save(dir).map_err(io_err)?;
    Ok((fs, settings))
}

async fn live_info(lease: Lease) -> Result<ComputerInfo, RegistryError> {
    let name = lease.name().to_string();
    let settings = lease.settings();
    let (st, disk) = blocking(move || {
        Ok::<_, agentcomputer_fs::Error>((lease.fs().statfs()?, lease.fs().disk_usage()?))
    })
    .await
    .map_err(|source| RegistryError::Engine { name, source })?;
    Ok(ComputerInfo {
        settings,
        usage: Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes: disk.total(),
        },
        open: true,
    })
}

/// The errno of a refused unmount ([`agentcomputer_fuse::NotThisMount`]:
/// the path no longer leads to the mount), `None` for any other error.
fn not_this_mount(e: &io::Error) -> Option<i32> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<agentcomputer_fuse::NotThisMount>())
        .map(|n| n.errno)
}

/// Unmounts every host mount of `slot`, wherever each is now (through
/// its root descriptor), logging failures.
async fn unmount_all(slot: &Arc<Slot>, inner: &Inner) {
    let handles: Vec<(PathBuf, HostMount)> = lock(&slot.mounts).drain().collect();
    for (path, mount) in handles {
        let name = slot.name.clone();
        let unmounted = blocking(move || mount.handle.unmount()).await;
        if let Some(holder) = inner.holder.get().cloned() {
            let p = path.clone();
            if let Err(e) = blocking(move || holder.drop_path(&p)).await {
                warn!(path = %path.display(), error = %e, "could not tell the descriptor holder about an unmount");
            }
        }
        match unmounted {
            Ok(()) => info!(computer = %name, path = %path.display(), "unmounted computer"),
            Err(e) => warn!(computer = %name, path = %path.display(), error = %e, "unmount failed"),
        }
    }
}

/// Options of a host mount of computer `name`: made for the agent's
/// user, `nosymfollow`, files shown as the agent's uid and gid.
fn host_mount_options(name: &str) -> MountOptions {
    MountOptions {
        fsname: agentcomputer_handover::fsname::source(name),
        nosymfollow: true,
        owner_map: Some(OwnerMap {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            stored_uid: SANDBOX_UID,
            stored_gid: SANDBOX_GID,
        }),
        ..MountOptions::default()
    }
}

/// Gives a computer's free pages back to the host (see [`Fs::compact`]),
/// logging what it did; failures are logged, never fatal.
fn compact(name: &str, fs: &Fs) {
    match fs.compact() {
        Ok(c) if c.after < c.before => info!(
            computer = %name,
            before_bytes = c.before,
            after_bytes = c.after,
            "gave free database pages back to the host"
        ),
        Ok(_) => {}
        Err(e) => warn!(computer = %name, error = %e, "compacting the database failed"),
    }
}

/// Host bytes of a closed computer's database (the file plus any WAL).
fn db_file_bytes(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    [db.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Gives the computer's free pages back to the host (it is going idle),
/// records its usage and drops its engine.
async fn close_slot(slot: Arc<Slot>) {
    let name = slot.name.clone();
    blocking(move || {
        let mut settings = lock(&slot.settings).clone();
        compact(&settings.name, &slot.fs);
        let st = slot.fs.statfs();
        let dir = slot.dir.clone();
        // Dropping the last connection checkpoints and removes the WAL.
        drop(slot);
        match st {
            Ok(st) => {
                settings.usage_at_close = Some(Usage {
                    used_bytes: st.used_bytes,
                    used_inodes: st.used_inodes,
                    disk_bytes: db_file_bytes(&dir.join(DB_FILE)),
                });
                if let Err(e) = settings.save(&dir) {
                    warn!(computer = %settings.name, error = %e, "could not record usage at close");
                }
            }
            Err(e) => warn!(computer = %settings.name, error = %e, "statfs failed at close"),
        }
    })
    .await;
    info!(computer = %name, "closed computer");
}

#[cfg(test)]
mod tests {
    use super::*;

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
