//! Snapshots, restores and forks of computers: each is a named position of
//! the computer's continuous backup log, and a restore or a fork
//! materialises a position into a database file (docs/snapshots.md).
//!
//! A snapshot syncs the computer (everything answered before it is in the
//! log) and records the position the log reached, next to the log in the
//! store. Writers never wait for it: the shipper reads the committed WAL
//! while they go on. A restore ends the computer's running work, closes
//! it (its last changes shipped), records that point as a snapshot of its
//! own (`before-restore-<time>`, so the restore can be undone), builds the
//! snapshot's position into a new file from the log, checks it, and puts
//! it in place of the database; the next open ships it as a new snapshot
//! object. A fork builds a position into a new computer's directory.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentcomputer_fs::Fs;
use tracing::info;

use crate::backup::{BackupError, SnapshotRecord, is_valid_snapshot_name};
use crate::blocking::blocking;
use crate::computer::{self, Config, DB_FILE, Settings, Usage};

use super::backed_up::{Backups, backup_err};
use super::*;

/// How many snapshots a computer may have, and how many bytes of the log
/// they may hold on their own (bytes no restore of the computer's latest
/// state needs: what deleting them would release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// Snapshots per computer (a restore's own `before-restore-…` ones
    /// count too).
    pub max_count: usize,
    /// Bytes the computer's snapshots may hold on their own; `None` means
    /// the computer's quota (`max_bytes`).
    pub max_own_bytes: Option<u64>,
}

/// 64 snapshots, holding at most the computer's quota on their own.
pub const DEFAULT_SNAPSHOT_LIMITS: SnapshotLimits = SnapshotLimits {
    max_count: 64,
    max_own_bytes: None,
};

/// One snapshot as listed: its record and what it holds on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub record: SnapshotRecord,
    /// Bytes of log objects only this snapshot needs (released by
    /// deleting it): zero until the log gets a new snapshot object (after
    /// a restore, or an open that could not continue the log).
    pub own_bytes: u64,
    /// How long taking it took (zero when listed).
    pub took: Duration,
}

/// Where a new computer's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotSource {
    /// A snapshot, by its name (unique among the store's snapshots).
    Snapshot(String),
    /// Another computer's state now (a fork).
    Computer(String),
}

/// What a restore brings a computer back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreTo {
    /// One of its snapshots, by name.
    Snapshot(String),
    /// The latest position of its log made at or before this time.
    Time(std::time::SystemTime),
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The snapshot taken first, which undoes the restore.
    pub before: SnapshotInfo,
    /// The snapshot restored.
    pub restored: SnapshotRecord,
    /// Calls and runs that were using the computer and were ended.
    pub ended_runs: usize,
    /// How long the whole restore took.
    pub elapsed: Duration,
}

/// How long a restore waits for the runs it ended to let go.
const RESTORE_DRAIN: Duration = Duration::from_secs(30);

impl Registry {
    /// Replaces the snapshot limits ([`DEFAULT_SNAPSHOT_LIMITS`] until set).
    pub fn set_snapshot_limits(&self, limits: SnapshotLimits) {
        *self.inner.snapshot_limits.lock() = limits;
    }

    /// The snapshot limits in force.
    pub fn snapshot_limits(&self) -> SnapshotLimits {
        *self.inner.snapshot_limits.lock()
    }

    fn snapshot_store(&self, name: &str) -> Result<&Backups, RegistryError> {
        self.inner
            .backup
            .get()
            .ok_or_else(|| RegistryError::NoSnapshots(name.to_string()))
    }

    /// Takes snapshot `snapshot` (default `<name>-<unix seconds>`) of
    /// computer `name`: every call answered before this one is in it.
    /// Opens the computer if it is closed. Errors: `NoSnapshots` without a
    /// store, `InvalidSnapshotName`, `SnapshotExists`, `SnapshotLimit`,
    /// `NotFound`, and Sync's.
    pub async fn snapshot(
        &self,
        name: &str,
        snapshot: Option<&str>,
    ) -> Result<SnapshotInfo, RegistryError> {
        check_name(name)?;
        let b = self.snapshot_store(name)?;
        let started = Instant::now();
        let snap = match snapshot.filter(|s| !s.is_empty()) {
            Some(s) => s.to_string(),
            None => format!("{name}-{}", computer::now_unix_nanos() / 1_000_000_000),
        };
        if !is_valid_snapshot_name(&snap) {
            return Err(RegistryError::InvalidSnapshotName(snap));
        }
        let lease = self.acquire(name).await?;
        let settings = lease.settings();
        let id = settings
            .backup_id
            .clone()
            .ok_or_else(|| RegistryError::NoSnapshots(name.to_string()))?;
        if b.target
            .find_snapshot(&snap)
            .await
            .map_err(backup_err(name))?
            .is_some()
        {
            return Err(RegistryError::SnapshotExists(snap));
        }
        let existing = b.target.snapshots(&id).await.map_err(backup_err(name))?;
        self.check_snapshot_limits(name, &settings, &id, &existing)
            .await?;
        let fs = lease.fs().clone();
        blocking(move || fs.flush())
            .await
            .map_err(|source| RegistryError::Engine {
                name: name.to_string(),
                source,
            })?;
        let synced = self.sync(name).await?;
        drop(lease);
        let mut info = self
            .record_snapshot(name, &id, &snap, synced.position, &existing)
            .await?;
        info.took = started.elapsed();
        info!(
            computer = name,
            snapshot = %snap,
            position = synced.position,
            ms = info.took.as_millis() as u64,
            "took snapshot"
        );
        Ok(info)
    }

    /// Refuses a snapshot past the limits.
    async fn check_snapshot_limits(
        &self,
        name: &str,
        settings: &Settings,
        id: &str,
        existing: &[SnapshotRecord],
    ) -> Result<(), RegistryError> {
        let limits = self.snapshot_limits();
        if existing.len() >= limits.max_count {
            return Err(RegistryError::SnapshotLimit {
                name: name.to_string(),
                reason: format!(
                    "it has {} snapshots, the most a computer may have ({}); delete one first (delete-snapshot {name} SNAPSHOT)",
                    existing.len(),
                    limits.max_count
                ),
            });
        }
        let max_own = limits.max_own_bytes.unwrap_or(settings.max_bytes);
        let held: u64 = self
            .with_own_bytes(name, id, existing.to_vec())
            .await?
            .iter()
            .map(|s| s.own_bytes)
            .sum();
        if held > max_own {
            return Err(RegistryError::SnapshotLimit {
                name: name.to_string(),
                reason: format!(
                    "its snapshots hold {held} bytes of the backup log on their own, over the limit of {max_own} bytes; delete one first (delete-snapshot {name} SNAPSHOT)"
                ),
            });
        }
        Ok(())
    }

    /// Records snapshot `snap` of computer `name` (backup id `id`) at
    /// log position `position`.
    async fn record_snapshot(
        &self,
        name: &str,
        id: &str,
        snap: &str,
        position: u64,
        existing: &[SnapshotRecord],
    ) -> Result<SnapshotInfo, RegistryError> {
        let b = self.snapshot_store(name)?;
        let err = backup_err(name);
        let known: BTreeMap<u64, u64> = existing.iter().map(|r| (r.position, r.base)).collect();
        let base = b.target.base_of(id, position, &known).await.map_err(&err)?;
        let database_bytes = b
            .target
            .database_bytes_at(id, position)
            .await
            .map_err(&err)?;
        let record = SnapshotRecord {
            name: snap.to_string(),
            computer: name.to_string(),
            id: id.to_string(),
            position,
            base,
            created_unix_nanos: computer::now_unix_nanos(),
            database_bytes,
        };
        if !b.target.put_snapshot(&record).await.map_err(&err)? {
            return Err(RegistryError::SnapshotExists(snap.to_string()));
        }
        let mut all = existing.to_vec();
        all.push(record.clone());
        let own_bytes = self
            .with_own_bytes(name, id, all)
            .await?
            .into_iter()
            .find(|s| s.record.name == snap)
            .map_or(0, |s| s.own_bytes);
        Ok(SnapshotInfo {
            record,
            own_bytes,
            took: Duration::ZERO,
        })
    }

    /// `records` with the bytes each holds on its own: log objects in its
    /// range (its base to its position) that neither the latest state's
    /// range nor another snapshot's covers.
    async fn with_own_bytes(
        &self,
        name: &str,
        id: &str,
        records: Vec<SnapshotRecord>,
    ) -> Result<Vec<SnapshotInfo>, RegistryError> {
        let b = self.snapshot_store(name)?;
        let err = backup_err(name);
        let objects = b.target.log_objects(id).await.map_err(&err)?;
        let Some(head) = objects.last().map(|o| o.position) else {
            return Ok(records
                .into_iter()
                .map(|record| SnapshotInfo {
                    record,
                    own_bytes: 0,
                    took: Duration::ZERO,
                })
                .collect());
        };
        let known: BTreeMap<u64, u64> = records.iter().map(|r| (r.position, r.base)).collect();
        let head_base = b.target.base_of(id, head, &known).await.map_err(&err)?;
        let ranges: Vec<(u64, u64)> = records.iter().map(|r| (r.base, r.position)).collect();
        Ok(records
            .into_iter()
            .enumerate()
            .map(|(i, record)| {
                let own_bytes = objects
                    .iter()
                    .filter(|o| (record.base..=record.position).contains(&o.position))
                    .filter(|o| !(head_base..=head).contains(&o.position))
                    .filter(|o| {
                        !ranges
                            .iter()
                            .enumerate()
                            .any(|(j, r)| j != i && (r.0..=r.1).contains(&o.position))
                    })
                    .map(|o| o.bytes)
                    .sum();
                SnapshotInfo {
                    record,
                    own_bytes,
                    took: Duration::ZERO,
                }
            })
            .collect())
    }

    /// The backup id of computer `name`: from its settings here, else the
    /// store's index. Errors: `NotFound`, `NoSnapshots` for a computer
    /// that was never shipped.
    async fn log_id(&self, name: &str) -> Result<String, RegistryError> {
        match Settings::load(&self.dir_of(name)) {
            Ok(s) => s
                .backup_id
                .ok_or_else(|| RegistryError::NoSnapshots(name.to_string())),
            Err(_) => self
                .stored_id(name)
                .await?
                .ok_or_else(|| RegistryError::NotFound(name.to_string())),
        }
    }

    /// Computer `name`'s snapshots, oldest first, with what each holds on
    /// its own. Errors: `NoSnapshots`, `NotFound`, the store's.
    pub async fn snapshots(&self, name: &str) -> Result<Vec<SnapshotInfo>, RegistryError> {
        check_name(name)?;
        let b = self.snapshot_store(name)?;
        let id = self.log_id(name).await?;
        let records = b.target.snapshots(&id).await.map_err(backup_err(name))?;
        self.with_own_bytes(name, &id, records).await
    }

    /// Deletes computer `name`'s snapshot `snap` and releases the log
    /// objects no restore needs any more (those below the base of the
    /// latest state and of every snapshot left). Returns the objects and
    /// bytes released. Errors: `SnapshotNotFound`, `NoSnapshots`,
    /// `NotFound`, the store's.
    pub async fn delete_snapshot(
        &self,
        name: &str,
        snap: &str,
    ) -> Result<(u64, u64), RegistryError> {
        check_name(name)?;
        let b = self.snapshot_store(name)?;
        let err = backup_err(name);
        let id = self.log_id(name).await?;
        if b.target.snapshot(&id, snap).await.map_err(&err)?.is_none() {
            return Err(RegistryError::SnapshotNotFound {
                snapshot: snap.to_string(),
                computer: Some(name.to_string()),
            });
        }
        b.target.remove_snapshot(&id, snap).await.map_err(&err)?;
        let rest = b.target.snapshots(&id).await.map_err(&err)?;
        let objects = b.target.log_objects(&id).await.map_err(&err)?;
        let Some(head) = objects.last().map(|o| o.position) else {
            return Ok((0, 0));
        };
        let known: BTreeMap<u64, u64> = rest.iter().map(|r| (r.position, r.base)).collect();
        let head_base = b.target.base_of(&id, head, &known).await.map_err(&err)?;
        let keep_from = rest.iter().map(|r| r.base).fold(head_base, u64::min);
        let released = b.target.prune_below(&id, keep_from).await.map_err(&err)?;
        info!(
            computer = name,
            snapshot = snap,
            released_objects = released.0,
            released_bytes = released.1,
            "deleted snapshot"
        );
        Ok(released)
    }

    /// Brings computer `name` back to its snapshot `snap` (see
    /// [`Registry::restore_to`]).
    pub async fn restore_snapshot(
        &self,
        name: &str,
        snap: &str,
    ) -> Result<Restored, RegistryError> {
        self.restore_to(name, &RestoreTo::Snapshot(snap.to_string()))
            .await
    }

    /// Brings computer `name` back to `to`: one of its snapshots, or the
    /// latest position of its log made at or before a time (within what
    /// the log keeps). Running execs are ended (their exit says why), the
    /// state it leaves is taken as snapshot `before-restore-<unix ms>`
    /// first, and the files of `to` replace the computer's. Refused while
    /// the computer is mounted on the host. Errors: `SnapshotNotFound`,
    /// `NoPositionAt`, `RestoreMounted`, `RestoreBusy`, `SnapshotLimit`
    /// (the undo snapshot would pass it), `NoSnapshots`, `NotFound`, the
    /// store's.
    pub async fn restore_to(&self, name: &str, to: &RestoreTo) -> Result<Restored, RegistryError> {
        check_name(name)?;
        let b = self.snapshot_store(name)?;
        let err = backup_err(name);
        let started = Instant::now();
        // Here and shipping (restored from the store first if it is not).
        drop(self.acquire(name).await?);
        let guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        let io_err = |source| RegistryError::Io {
            name: name.to_string(),
            source,
        };
        let settings = {
            let dir = dir.clone();
            blocking(move || Settings::load(&dir))
                .await
                .map_err(io_err)?
        };
        let id = settings
            .backup_id
            .clone()
            .ok_or_else(|| RegistryError::NoSnapshots(name.to_string()))?;
        let named = match to {
            RestoreTo::Snapshot(snap) => match b.target.snapshot(&id, snap).await.map_err(&err)? {
                Some(record) => Some(record),
                None => {
                    return Err(RegistryError::SnapshotNotFound {
                        snapshot: snap.to_string(),
                        computer: Some(name.to_string()),
                    });
                }
            },
            RestoreTo::Time(_) => None,
        };
        let snap = match to {
            RestoreTo::Snapshot(s) => format!("snapshot {s}"),
            RestoreTo::Time(t) => format!("its state at {}", humantime::format_rfc3339_millis(*t)),
        };
        let snap = snap.as_str();
        let existing = b.target.snapshots(&id).await.map_err(&err)?;
        self.check_snapshot_limits(name, &settings, &id, &existing)
            .await?;
        let slot = self.inner.open.lock().get(name).cloned();
        let mut ended_runs = 0;
        if let Some(slot) = slot {
            let mounted: Vec<String> = slot
                .mounts
                .lock()
                .keys()
                .map(|p| p.display().to_string())
                .collect();
            if !mounted.is_empty() || !slot.connections.lock().is_empty() {
                return Err(RegistryError::RestoreMounted {
                    name: name.to_string(),
                    paths: if mounted.is_empty() {
                        "a FUSE connection".into()
                    } else {
                        mounted.join(", ")
                    },
                });
            }
            self.inner.open.lock().remove(name);
            ended_runs = slot.active.load(Ordering::SeqCst);
            *slot.ended.lock() = Some(format!(
                "computer {name} was restored to {snap}; what the run wrote is not in the restored files"
            ));
            slot.cancel.cancel();
            let deadline = Instant::now() + RESTORE_DRAIN;
            // Every lease let go, and every copy of the engine a run held
            // (a lazily detached mount would keep one: it is waited for,
            // then refused like a mount).
            while slot.active.load(Ordering::SeqCst) > 0 || slot.fs.is_shared() {
                if Instant::now() >= deadline {
                    // Still in use: it stays open as it is (new runs on
                    // this engine end at once; it closes when idle).
                    *slot.ended.lock() = Some(format!(
                        "a restore of computer {name} to {snap} ended it, then gave up because calls still used the computer; the computer was not restored"
                    ));
                    self.inner
                        .open
                        .lock()
                        .insert(name.to_string(), slot.clone());
                    return Err(RegistryError::RestoreBusy {
                        name: name.to_string(),
                        reason: format!(
                            "{} calls (or a lazily detached mount) still use it {}s after their runs were ended; nothing was restored, try again",
                            slot.active.load(Ordering::SeqCst),
                            RESTORE_DRAIN.as_secs()
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let (_, shipped) = super::hibernation::close_slot_with(slot, false).await;
            if shipped.is_none() {
                return Err(RegistryError::RestoreBusy {
                    name: name.to_string(),
                    reason: "its latest changes could not be shipped to the backup store, so the restore could not be undone; nothing was restored (sync-backup shows why)".into(),
                });
            }
        }
        // The closed computer is exactly the log's latest position.
        let head = b
            .target
            .log_objects(&id)
            .await
            .map_err(&err)?
            .last()
            .map(|o| o.position)
            .ok_or_else(|| RegistryError::NoSnapshots(name.to_string()))?;
        let target = match named {
            Some(record) => record,
            None => {
                let RestoreTo::Time(t) = to else {
                    unreachable!("a snapshot was looked up above")
                };
                let at_ms = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let Some(position) = b.target.position_at_time(&id, at_ms).await.map_err(&err)?
                else {
                    return Err(RegistryError::NoPositionAt {
                        name: name.to_string(),
                        at: humantime::format_rfc3339_millis(*t).to_string(),
                    });
                };
                SnapshotRecord {
                    name: String::new(),
                    computer: name.to_string(),
                    id: id.clone(),
                    position,
                    base: 0,
                    created_unix_nanos: at_ms as i64 * 1_000_000,
                    database_bytes: b
                        .target
                        .database_bytes_at(&id, position)
                        .await
                        .map_err(&err)?,
                }
            }
        };
        let before_name = format!("before-restore-{}", computer::now_unix_nanos() / 1_000_000);
        let before = self
            .record_snapshot(name, &id, &before_name, head, &existing)
            .await?;
        let tmp = dir.join(format!(".restoring-{:016x}.db", rand::random::<u64>()));
        if let Err(e) = b.target.restore_at(&id, &tmp, target.position).await {
            let _ = std::fs::remove_file(&tmp);
            return Err(err(e));
        }
        {
            let dir = dir.clone();
            let mut settings = settings;
            blocking(move || {
                let db = dir.join(DB_FILE);
                for suffix in ["-wal", "-shm"] {
                    let mut side = db.as_os_str().to_owned();
                    side.push(suffix);
                    match std::fs::remove_file(std::path::PathBuf::from(side)) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                        _ => {}
                    }
                }
                std::fs::rename(&tmp, &db)?;
                std::fs::File::open(&dir)?.sync_all()?;
                // Not the log's latest position: the next open ships the
                // file as a new snapshot object.
                settings.backup_resume = None;
                settings.usage_at_close = None;
                settings.save(&dir)
            })
            .await
            .map_err(io_err)?;
        }
        drop(guard);
        // Open again at once: the shipper's new snapshot object makes the
        // restored state the log's latest.
        drop(self.acquire(name).await?);
        let elapsed = started.elapsed();
        info!(
            computer = name,
            to = snap,
            position = target.position,
            undo = %before_name,
            ended_runs,
            ms = elapsed.as_millis() as u64,
            "restored computer to snapshot"
        );
        Ok(Restored {
            before,
            restored: target,
            ended_runs,
            elapsed,
        })
    }

    /// Makes computer `new` from `source`: a snapshot's position, or
    /// another computer's state now (a fork). The new computer has the
    /// source's files, quota, egress policy and runtime settings, a log of
    /// its own, and changes independently. Errors: `AlreadyExists`,
    /// `SnapshotNotFound`, `NotFound` (the source computer),
    /// `NoSnapshots`, `InvalidName`, the store's.
    pub async fn create_from(
        &self,
        new: &str,
        source: &SnapshotSource,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(new)?;
        let started = Instant::now();
        let (id, position, mut settings) = match source {
            SnapshotSource::Snapshot(snap) => {
                let b = self.snapshot_store(new)?;
                let err = backup_err(new);
                let not_found = || RegistryError::SnapshotNotFound {
                    snapshot: snap.clone(),
                    computer: None,
                };
                if !is_valid_snapshot_name(snap) {
                    return Err(RegistryError::InvalidSnapshotName(snap.clone()));
                }
                let id = b
                    .target
                    .find_snapshot(snap)
                    .await
                    .map_err(&err)?
                    .ok_or_else(not_found)?;
                let record = b
                    .target
                    .snapshot(&id, snap)
                    .await
                    .map_err(&err)?
                    .ok_or_else(not_found)?;
                let settings = match self.settings_of_log(&record.computer, &id).await {
                    Ok(s) => s,
                    Err(e) => return Err(e),
                };
                (id, record.position, settings)
            }
            SnapshotSource::Computer(from) => {
                check_name(from)?;
                let b = self.snapshot_store(from)?;
                let lease = self.acquire(from).await?;
                let settings = lease.settings();
                let id = settings
                    .backup_id
                    .clone()
                    .ok_or_else(|| RegistryError::NoSnapshots(from.to_string()))?;
                let fs = lease.fs().clone();
                blocking(move || fs.flush())
                    .await
                    .map_err(|source| RegistryError::Engine {
                        name: from.to_string(),
                        source,
                    })?;
                let position = self.sync(from).await?.position;
                drop(lease);
                let _ = b;
                (id, position, settings)
            }
        };
        let b = self.snapshot_store(new)?;
        let _guard = self.inner.names.lock(new).await;
        let dir = self.dir_of(new);
        if dir.exists() || self.stored_only(new).await?.is_some() {
            return Err(RegistryError::AlreadyExists(new.to_string()));
        }
        let new_id = self
            .new_backup_id(new, None)
            .await?
            .expect("a backup store is configured");
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{new}-{:016x}", rand::random::<u64>()));
        let made: Result<Settings, RegistryError> = async {
            let io_err = |source| RegistryError::Io {
                name: new.to_string(),
                source,
            };
            {
                let tmp = tmp.clone();
                blocking(move || private::create_dir(&tmp))
                    .await
                    .map_err(io_err)?;
            }
            b.target
                .restore_at(&id, &tmp.join(DB_FILE), position)
                .await
                .map_err(backup_err(new))?;
            settings.name = new.to_string();
            settings.created_unix_nanos = computer::now_unix_nanos();
            settings.display_name = None;
            settings.backup_id = Some(new_id.clone());
            settings.backup_resume = None;
            let tmp = tmp.clone();
            let dir = dir.clone();
            let owned = new.to_string();
            blocking(move || place_computer(&owned, &tmp, &dir, settings)).await
        }
        .await;
        let settings = match made {
            Ok(s) => s,
            Err(e) => {
                let _ = blocking(move || std::fs::remove_dir_all(&tmp)).await;
                let _ = b.target.forget(new, &new_id).await;
                return Err(e);
            }
        };
        self.upload_settings(&settings).await;
        info!(
            computer = new,
            source = ?source,
            position,
            ms = started.elapsed().as_millis() as u64,
            "created computer from a snapshot"
        );
        let usage = settings.usage_at_close.unwrap_or_default();
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }

    /// The settings of the computer whose log is `id`: its directory's
    /// when it is here, else those stored beside the log.
    async fn settings_of_log(&self, name: &str, id: &str) -> Result<Settings, RegistryError> {
        if let Ok(s) = Settings::load(&self.dir_of(name))
            && s.backup_id.as_deref() == Some(id)
        {
            return Ok(s);
        }
        let b = self.snapshot_store(name)?;
        let json = b.target.load_settings(id).await.map_err(backup_err(name))?;
        serde_json::from_slice(&json).map_err(|e| RegistryError::Backup {
            name: name.to_string(),
            source: BackupError::Unreadable {
                key: b
                    .target
                    .computer_prefix(id)
                    .join("computer.json")
                    .to_string(),
                reason: e.to_string(),
            },
        })
    }

    /// A path in the agent's private scratch space for a database being
    /// uploaded ([`Registry::import`]).
    pub fn import_path(&self, name: &str) -> PathBuf {
        self.inner
            .scratch_dir
            .join(format!("import-{name}-{:016x}.db", rand::random::<u64>()))
    }

    /// Makes computer `name` from the database file `file` (a copy made
    /// by Backup, uploaded into [`Registry::import_path`]), which is
    /// checked first (`PRAGMA integrity_check` and the engine's check) and
    /// moved, never copied. `limits` replaces the quota the file holds
    /// when given; the egress policy is `egress`. The file is removed on
    /// any error. Errors: `BadImport`, `AlreadyExists`, `InvalidName`,
    /// `Io`, the store's (registering the name).
    pub async fn import(
        &self,
        name: &str,
        file: PathBuf,
        limits: Option<agentcomputer_fs::Limits>,
        egress: agentcomputer_egress::EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        let result = self.import_inner(name, &file, limits, egress).await;
        let _ = std::fs::remove_file(&file);
        result
    }

    async fn import_inner(
        &self,
        name: &str,
        file: &std::path::Path,
        limits: Option<agentcomputer_fs::Limits>,
        egress: agentcomputer_egress::EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        {
            let file = file.to_path_buf();
            blocking(move || agentcomputer_backup::check_database(&file))
                .await
                .map_err(|e| RegistryError::BadImport {
                    name: name.to_string(),
                    reason: format!("the file is not a sound computer database: {e}"),
                })?;
        }
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if dir.exists() || self.stored_only(name).await?.is_some() {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        let backup_id = self.new_backup_id(name, None).await?;
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{name}-{:016x}", rand::random::<u64>()));
        let made = {
            let tmp = tmp.clone();
            let file = file.to_path_buf();
            let owned = name.to_string();
            let backup_id = backup_id.clone();
            blocking(move || {
                let io_err = |source| RegistryError::Io {
                    name: owned.clone(),
                    source,
                };
                private::create_dir(&tmp).map_err(io_err)?;
                std::fs::rename(&file, tmp.join(DB_FILE)).map_err(io_err)?;
                let own_limits = Fs::open(&tmp.join(DB_FILE))
                    .map_err(|source| RegistryError::Engine {
                        name: owned.clone(),
                        source,
                    })?
                    .limits();
                let mut settings = Settings {
                    name: owned.clone(),
                    created_unix_nanos: computer::now_unix_nanos(),
                    max_bytes: 0,
                    max_inodes: 0,
                    usage_at_close: None,
                    egress: Default::default(),
                    runtimes: Default::default(),
                    exec: Default::default(),
                    display_name: None,
                    backup_id,
                    backup_resume: None,
                };
                settings.apply(Config {
                    limits: limits.unwrap_or(own_limits),
                    egress,
                    ..Config::default()
                });
                place_computer(&owned, &tmp, &dir, settings)
            })
            .await
        };
        let settings = match made {
            Ok(s) => s,
            Err(e) => {
                let _ = blocking(move || std::fs::remove_dir_all(&tmp)).await;
                if let (Some(b), Some(id)) = (self.inner.backup.get(), backup_id) {
                    let _ = b.target.forget(name, &id).await;
                }
                return Err(e);
            }
        };
        self.upload_settings(&settings).await;
        info!(
            computer = name,
            "created computer from an imported database"
        );
        let usage = settings.usage_at_close.unwrap_or_default();
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }
}

/// Finishes a computer whose database is at `tmp/fs.db`: applies the
/// settings' quota to the database, records its usage, writes the
/// settings and renames `tmp` to `dir` (durably).
fn place_computer(
    name: &str,
    tmp: &std::path::Path,
    dir: &std::path::Path,
    mut settings: Settings,
) -> Result<Settings, RegistryError> {
    let engine_err = |source| RegistryError::Engine {
        name: name.to_string(),
        source,
    };
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    let db = tmp.join(DB_FILE);
    {
        let fs = Fs::open(&db).map_err(engine_err)?;
        if fs.limits() != settings.limits() {
            fs.set_limits(settings.limits()).map_err(engine_err)?;
        }
        let st = fs.statfs().map_err(engine_err)?;
        drop(fs);
        settings.usage_at_close = Some(Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes: db_file_bytes(&db),
        });
    }
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
    std::fs::File::open(dir.parent().unwrap_or(dir))
        .and_then(|d| d.sync_all())
        .map_err(io_err)?;
    Ok(settings)
}
