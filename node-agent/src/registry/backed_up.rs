//! Each open computer's continuous backup: a shipper started when its
//! engine opens and stopped (after shipping everything) when it closes; a
//! computer this agent has no directory for restored from the store on
//! first use; `Sync` and `verify-backup`. See docs/backup.md, "In the node
//! agent".

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_backup::{Position, Restored, Shipper};
use agentcomputer_fs::Fs;
use tracing::{error, info, warn};

use crate::backup::{BackupError, BackupTarget};
use crate::blocking::blocking;
use crate::computer::{BackupResume, DB_FILE, SETTINGS_FILE, Settings};
use crate::layout::BACKUP_POSITION_FILE;

use super::*;

/// How computers get their backup id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupIds {
    /// A random id drawn when the computer is made (local mode); the index
    /// is by the computer's name.
    Random,
    /// The computer's directory name is its id (a cluster's uid); the
    /// index is by its display name (`NAMESPACE/NAME`).
    DirectoryName,
}

/// An open computer's shipper, or why it has none.
pub(super) enum SlotBackup {
    /// This agent has no backup store.
    Off,
    /// The shipper, and where its counts go when it stops.
    Shipping(Arc<Shipper>, Arc<Mutex<ShippedTotals>>),
    /// The shipper could not start, or stopped (fenced, or the engine was
    /// closed); `Sync` reports this.
    Failed(String),
    /// The store's log is past this node's copy (another node wrote it
    /// since): the copy must be replaced by a restore before serving.
    Stale(String),
}

/// The store and how ids are given, set once at start.
pub(super) struct Backups {
    pub(super) target: Arc<BackupTarget>,
    pub(super) ids: BackupIds,
    /// The counts of every shipper that stopped since the agent started.
    stopped: Arc<Mutex<ShippedTotals>>,
    /// One verify-backup at a time on this agent: each restores a whole
    /// computer into scratch space, which many at once would turn into a
    /// way for one tenant to fill the node's disk and bandwidth.
    verifies: tokio::sync::Semaphore,
}

/// What the shippers of this agent did, summed: every upload and failed
/// round since the agent started, closed computers' included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShippedTotals {
    pub uploads: u64,
    pub uploaded_bytes: u64,
    pub failed_rounds: u64,
}

impl ShippedTotals {
    /// Adds one shipper's counts.
    pub fn add(&mut self, p: &Position) {
        self.uploads += p.uploads;
        self.uploaded_bytes += p.uploaded_bytes;
        self.failed_rounds += p.failed_rounds;
    }
}

pub(super) fn backup_err(name: &str) -> impl Fn(BackupError) -> RegistryError + '_ {
    move |source| RegistryError::Backup {
        name: name.to_string(),
        source,
    }
}

/// What a `Sync` reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The latest position of the computer's log in the store.
    pub position: u64,
    /// Whether the computer was open (closed computers were shipped
    /// whole when they closed, so there was nothing to wait for).
    pub was_open: bool,
}

/// What `verify-backup` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub restored: Restored,
    /// Bytes of the restored database.
    pub bytes: u64,
    /// How long the restore and its checks took.
    pub elapsed: Duration,
}

/// One open computer's backup, for metrics and status.
#[derive(Debug, Clone)]
pub struct BackupReport {
    /// The computer's directory name (its uid in a cluster).
    pub name: String,
    /// Where its shipper stands, or why it has none.
    pub state: Result<Position, String>,
}

impl Registry {
    /// The backup of every open computer now (none without a store).
    pub fn backup_reports(&self) -> Vec<BackupReport> {
        if self.inner.backup.get().is_none() {
            return Vec::new();
        }
        let slots: Vec<Arc<Slot>> = self.inner.open.lock().values().cloned().collect();
        slots
            .iter()
            .filter_map(|s| {
                let state = match &*s.backup.lock() {
                    SlotBackup::Shipping(sh, _) => match sh.stopped() {
                        Some(why) => Err(why),
                        None => Ok(*sh.shipped().borrow()),
                    },
                    SlotBackup::Failed(why) | SlotBackup::Stale(why) => Err(why.clone()),
                    SlotBackup::Off => return None,
                };
                Some(BackupReport {
                    name: s.name.clone(),
                    state,
                })
            })
            .collect()
    }

    /// Every upload and failed round of this agent's shippers since it
    /// started (`None` without a store): the stopped shippers' final counts
    /// plus the open ones' counts now. A shipper that is stopping is in
    /// neither for a moment, so a sum may fall short, never over: callers
    /// that need counters keep the largest sum seen.
    pub fn backup_totals(&self) -> Option<ShippedTotals> {
        let b = self.inner.backup.get()?;
        // Stopped first: a shipper moves from a slot to `stopped`, so read
        // in this order it is counted at most once.
        let mut totals = *b.stopped.lock();
        let slots: Vec<Arc<Slot>> = self.inner.open.lock().values().cloned().collect();
        for s in &slots {
            if let SlotBackup::Shipping(sh, _) = &*s.backup.lock() {
                totals.add(&sh.shipped().borrow());
            }
        }
        Some(totals)
    }

    /// Backs up every computer to `target` from now on: computers opened
    /// later ship their changes, and a computer with no directory here is
    /// restored from `target` on first use. Set once, before serving.
    pub fn set_backup(&self, target: Arc<BackupTarget>, ids: BackupIds) {
        let _ = self.inner.backup.set(Backups {
            target,
            ids,
            stopped: Arc::default(),
            verifies: tokio::sync::Semaphore::new(1),
        });
    }

    /// The backup store, if any.
    pub fn backup_target(&self) -> Option<&Arc<BackupTarget>> {
        self.inner.backup.get().map(|b| &b.target)
    }

    /// A new computer's backup id: registered in the store's index, so a
    /// name another agent already made in the store is refused here.
    pub(super) async fn new_backup_id(
        &self,
        name: &str,
        display_name: Option<&str>,
    ) -> Result<Option<String>, RegistryError> {
        let Some(b) = self.inner.backup.get() else {
            return Ok(None);
        };
        let (id, indexed) = match b.ids {
            BackupIds::Random => (format!("{:032x}", rand::random::<u128>()), name),
            BackupIds::DirectoryName => (name.to_string(), display_name.unwrap_or(name)),
        };
        b.target
            .register(indexed, &id)
            .await
            .map_err(backup_err(name))?;
        Ok(Some(id))
    }

    /// The name a computer has in the store's index.
    pub(super) fn index_name(&self, name: &str, settings: Option<&Settings>) -> String {
        match (self.inner.backup.get().map(|b| b.ids), settings) {
            (Some(BackupIds::DirectoryName), Some(s)) => s.shown_name().to_string(),
            _ => name.to_string(),
        }
    }

    /// Stores `settings` beside the computer's log, so a restore brings
    /// them back. Failures are logged: the next change or close retries.
    pub(super) async fn upload_settings(&self, settings: &Settings) {
        let (Some(b), Some(id)) = (self.inner.backup.get(), settings.backup_id.as_deref()) else {
            return;
        };
        let json = match serde_json::to_vec_pretty(settings) {
            Ok(j) => j,
            Err(e) => {
                warn!(computer = %settings.name, error = %e, "cannot encode settings for the backup store");
                return;
            }
        };
        if let Err(e) = b.target.save_settings(id, json).await {
            warn!(computer = %settings.name, error = %e, "cannot store settings in the backup store");
        }
    }

    /// Starts shipping a just opened engine (under the computer's lock):
    /// checkpoints become the shipper's, the computer gets an id if it has
    /// none, and the shipper writes its first snapshot. A store that cannot
    /// be reached does not keep the computer from serving; `Sync` and the
    /// log say why it is not backed up.
    pub(super) async fn start_backup(
        &self,
        name: &str,
        fs: &Fs,
        settings: &mut Settings,
    ) -> SlotBackup {
        let Some(b) = self.inner.backup.get() else {
            return SlotBackup::Off;
        };
        let result: Result<Shipper, RegistryError> = async {
            let engine = fs.clone();
            blocking(move || engine.leave_checkpoints_to_backup())
                .await
                .map_err(|source| RegistryError::Engine {
                    name: name.to_string(),
                    source,
                })?;
            let id = match settings.backup_id.clone() {
                Some(id) => id,
                None => {
                    let id = self
                        .new_backup_id(name, settings.display_name.as_deref())
                        .await?;
                    let id = id.expect("backup is configured");
                    settings.backup_id = Some(id.clone());
                    let dir = self.dir_of(name);
                    let saved = settings.clone();
                    blocking(move || saved.save(&dir)).await.map_err(|source| {
                        RegistryError::Io {
                            name: name.to_string(),
                            source,
                        }
                    })?;
                    self.upload_settings(settings).await;
                    id
                }
            };
            let started = Instant::now();
            let dir = self.dir_of(name);
            let db = dir.join(DB_FILE);
            // A clean close's position holds only while the file is as
            // that close left it.
            let resume = settings
                .backup_resume
                .take()
                .and_then(|r| resume_of(&db, &r));
            let shipper = b
                .target
                .start_shipper(
                    &db,
                    &id,
                    resume,
                    &dir.join(BACKUP_POSITION_FILE),
                    fs.writer_hold(),
                )
                .await
                .map_err(backup_err(name))?;
            let wake = shipper.wake_handle();
            fs.subscribe(Box::new(move |_| wake.wake()));
            let at = *shipper.shipped().borrow();
            info!(
                computer = name,
                id = %id,
                position = at.position,
                resumed = at.snapshots == 0,
                ms = started.elapsed().as_millis() as u64,
                "backup started"
            );
            Ok(shipper)
        }
        .await;
        match result {
            Ok(s) => SlotBackup::Shipping(Arc::new(s), b.stopped.clone()),
            Err(RegistryError::Backup {
                source: BackupError::Log(e @ agentcomputer_backup::Error::Stale { .. }),
                ..
            }) => SlotBackup::Stale(e.to_string()),
            Err(e) => {
                error!(computer = name, error = %e, "computer serves without backup");
                SlotBackup::Failed(e.to_string())
            }
        }
    }

    /// Returns once every call answered on computer `name` before this one
    /// is in the store. A closed computer was shipped whole when it closed.
    /// Errors: `NoBackup` without a store; `Backup` when its shipper could
    /// not start or stopped (naming why); `NotFound`.
    pub async fn sync(&self, name: &str) -> Result<Synced, RegistryError> {
        check_name(name)?;
        if self.inner.backup.get().is_none() {
            return Err(RegistryError::NoBackup(name.to_string()));
        }
        let Some(lease) = self.try_lease(name, false) else {
            if self.dir_of(name).join(SETTINGS_FILE).exists()
                || self.stored_only(name).await?.is_some()
            {
                return Ok(Synced {
                    position: 0,
                    was_open: false,
                });
            }
            return Err(RegistryError::NotFound(name.to_string()));
        };
        let shipper = match &*lease.slot.backup.lock() {
            SlotBackup::Shipping(s, _) => s.clone(),
            SlotBackup::Failed(why) => {
                return Err(RegistryError::Backup {
                    name: name.to_string(),
                    source: BackupError::Log(agentcomputer_backup::Error::Stopped(why.clone())),
                });
            }
            SlotBackup::Off => return Err(RegistryError::NoBackup(name.to_string())),
            SlotBackup::Stale(why) => {
                return Err(RegistryError::Backup {
                    name: name.to_string(),
                    source: BackupError::Log(agentcomputer_backup::Error::Stopped(why.clone())),
                });
            }
        };
        let reached = shipper.sync().await;
        drop(lease);
        match reached {
            Ok(Position { position, .. }) => Ok(Synced {
                position,
                was_open: true,
            }),
            Err(e) => Err(RegistryError::Backup {
                name: name.to_string(),
                source: e.into(),
            }),
        }
    }

    /// Restores computer `name`'s latest backup into a scratch file, runs
    /// the restore's checks (every object's digest and chain, `PRAGMA
    /// integrity_check`, the engine's check) and removes the file. An open
    /// computer is synced first, so the check covers every call answered
    /// before this one. Errors: as [`Registry::sync`], and `Backup` naming
    /// a damaged or missing object.
    pub async fn verify_backup(&self, name: &str) -> Result<Verified, RegistryError> {
        check_name(name)?;
        let Some(b) = self.inner.backup.get() else {
            return Err(RegistryError::NoBackup(name.to_string()));
        };
        self.sync(name).await?;
        let id = match Settings::load(&self.dir_of(name)) {
            Ok(s) => s.backup_id,
            Err(_) => None,
        };
        let id = match id {
            Some(id) => id,
            None => self
                .stored_id(name)
                .await?
                .ok_or_else(|| RegistryError::NotFound(name.to_string()))?,
        };
        let _turn = b
            .verifies
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let scratch = self
            .inner
            .scratch_dir
            .join(format!("verify-{name}-{:016x}.db", rand::random::<u64>()));
        let started = Instant::now();
        let restored = b.target.restore(&id, &scratch).await;
        let bytes = std::fs::metadata(&scratch).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&scratch);
        let restored = restored.map_err(backup_err(name))?;
        Ok(Verified {
            restored,
            bytes,
            elapsed: started.elapsed(),
        })
    }
}

/// Stops a closing computer's shipper after everything it committed is
/// shipped; returns where the log stands then. A failure is logged: the
/// next open ships a new snapshot.
pub(super) async fn stop_backup(slot: &Slot) -> Option<Position> {
    let (shipper, stopped) = match std::mem::replace(&mut *slot.backup.lock(), SlotBackup::Off) {
        SlotBackup::Shipping(s, stopped) => (s, stopped),
        _ => return None,
    };
    let result = shipper.stop().await;
    // Its final counts, the last round's included, whether it stopped
    // cleanly or not.
    stopped.lock().add(&shipper.shipped().borrow());
    match result {
        Ok(p) => {
            info!(computer = %slot.name, position = p.position, "backup shipped at close");
            Some(p)
        }
        Err(e) => {
            warn!(computer = %slot.name, error = %e, "backup at close failed; the next open ships a new snapshot");
            None
        }
    }
}

/// What a clean close records so the next open can continue the log:
/// `at`, and the database file as the close left it. Called after the
/// engine closed.
pub(super) fn resume_record(db: &std::path::Path, at: Position) -> Option<BackupResume> {
    let (db_bytes, db_mtime_ns) = file_stamp(db)?;
    Some(BackupResume {
        position: at.position,
        digest: hex::encode(at.digest),
        db_bytes,
        db_mtime_ns,
    })
}

/// The log position a closed file holds, if `r` (what its close or
/// restore recorded) still describes it: same length and modification
/// time, and a well-formed digest.
pub(super) fn resume_of(
    db: &std::path::Path,
    r: &BackupResume,
) -> Option<agentcomputer_backup::Resume> {
    let (bytes, mtime) = file_stamp(db)?;
    let digest: [u8; 32] = hex::decode(&r.digest).ok()?.try_into().ok()?;
    (bytes == r.db_bytes && mtime == r.db_mtime_ns).then_some(agentcomputer_backup::Resume {
        position: r.position,
        digest,
    })
}

/// [`resume_of`] for a closed database file: also none when a non-empty
/// write-ahead log lies beside it (a session that stopped without a clean
/// close), which the next open would replay over the file.
pub(super) fn closed_resume_of(
    db: &std::path::Path,
    r: &BackupResume,
) -> Option<agentcomputer_backup::Resume> {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(std::path::Path::new(&wal)).is_ok_and(|m| m.len() > 0) {
        return None;
    }
    resume_of(db, r)
}

/// The last log position computer directory `dir`'s shipper recorded
/// (its `backup-position` file), if any.
pub(super) fn recorded_position(dir: &std::path::Path) -> Option<u64> {
    // `POSITION [DIGEST]`: the shipper's position file.
    std::fs::read_to_string(dir.join(BACKUP_POSITION_FILE))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A file's length and modification time in ns since the epoch.
fn file_stamp(path: &std::path::Path) -> Option<(u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.len(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    ))
}

#[cfg(test)]
mod tests {
    /// The shipper's position file, in both the form with the digest of
    /// the object it was about to write and the older bare one.
    #[test]
    fn the_recorded_position_is_read_with_or_without_a_digest() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(recorded_position(dir.path()), None);
        let file = dir.path().join(BACKUP_POSITION_FILE);
        std::fs::write(&file, format!("17 {}\n", "ab".repeat(32))).unwrap();
        assert_eq!(recorded_position(dir.path()), Some(17));
        std::fs::write(&file, "9\n").unwrap();
        assert_eq!(recorded_position(dir.path()), Some(9));
    }

    use super::*;
    use crate::backup::BackupUrl;
    use agentcomputer_egress::EgressConfig;
    use agentcomputer_fs::{FileKind, Limits, Owner, ROOT_INO};

    async fn write_file(registry: &Registry, name: &[u8]) {
        let lease = registry.acquire("demo").await.unwrap();
        let fs = lease.fs();
        let f = fs
            .mknod(ROOT_INO, name, FileKind::RegularFile, 0o644, 0, Owner::ROOT)
            .unwrap();
        fs.write(f.ino, 0, &[7u8; 10_000]).unwrap();
        drop(lease);
        registry.sync("demo").await.unwrap();
    }

    /// The totals count every upload, also the ones of shippers that
    /// stopped when their computer closed: they never go down across a
    /// hibernation, and a reopened computer's uploads add to them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn totals_keep_the_uploads_of_closed_computers() {
        let data = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let registry = Registry::new(data.path(), Duration::ZERO).unwrap();
        assert_eq!(registry.backup_totals(), None, "no store, no totals");
        let url = BackupUrl::parse(&format!("file://{}", store.path().display())).unwrap();
        registry.set_backup(
            Arc::new(BackupTarget::open(&url).unwrap()),
            BackupIds::Random,
        );
        registry
            .create("demo", Limits::default(), EgressConfig::default())
            .await
            .unwrap();
        write_file(&registry, b"a").await;
        let open = registry.backup_totals().unwrap();
        assert!(open.uploads >= 2, "snapshot and a change: {open:?}");
        assert!(open.uploaded_bytes >= 10_000, "{open:?}");
        let reports = registry.backup_reports();
        assert_eq!(reports.len(), 1);
        assert!(reports[0].state.is_ok(), "{reports:?}");

        assert_eq!(registry.close_idle().await, 1);
        assert!(registry.backup_reports().is_empty(), "closed: no shipper");
        let closed = registry.backup_totals().unwrap();
        assert!(closed.uploads >= open.uploads, "{closed:?} < {open:?}");
        assert!(closed.uploaded_bytes >= open.uploaded_bytes);

        write_file(&registry, b"b").await;
        let again = registry.backup_totals().unwrap();
        assert!(again.uploads > closed.uploads, "{again:?} vs {closed:?}");
        assert!(again.uploaded_bytes >= closed.uploaded_bytes + 10_000);
        registry.close_all().await;
        assert!(registry.backup_totals().unwrap().uploads >= again.uploads);
    }
}
