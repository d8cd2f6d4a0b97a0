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
//! snapshot's position into a new file from the log, checks it, writes a
//! rewind object making that position the log's latest, and puts the file
//! in place of the database; the next open continues the log from it. A
//! fork builds a position into a new computer's directory.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::info;

use crate::backup::{DEFAULT_RETENTION, SnapshotRecord, is_valid_snapshot_name};
use crate::blocking::blocking;
use crate::computer::{self, Settings};

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

/// The names of the snapshots a restore takes first (`before-restore-<unix
/// ms>`), which expire with the computer's retention window.
pub(super) const UNDO_PREFIX: &str = "before-restore-";

/// How long a restore waits for the runs it ended to let go.
pub(super) const RESTORE_DRAIN: Duration = Duration::from_secs(30);

impl Registry {
    /// Replaces the snapshot limits ([`DEFAULT_SNAPSHOT_LIMITS`] until set).
    pub fn set_snapshot_limits(&self, limits: SnapshotLimits) {
        *self.inner.snapshot_limits.lock() = limits;
    }

    /// The snapshot limits in force.
    pub fn snapshot_limits(&self) -> SnapshotLimits {
        *self.inner.snapshot_limits.lock()
    }

    pub(super) fn snapshot_store(&self, name: &str) -> Result<&Backups, RegistryError> {
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
        let deleted = || RegistryError::DeletedDuring {
            name: name.to_string(),
            what: "snapshot",
        };
        let synced = match self.sync(name).await {
            Ok(synced) => synced,
            // Its log went with it.
            Err(_) if lease.deleted() => return Err(deleted()),
            Err(e) => return Err(e),
        };
        drop(lease);
        // Recorded under the computer's lock, which a deletion holds from
        // its start to the end of its log's removal, and only while the
        // computer still has the log the position is of: a record written
        // after the deletion listed the log's snapshots would outlive it
        // (its name taken for good, a position of a log that is gone).
        let _guard = self.inner.names.lock(name).await;
        let current = Settings::load(&self.dir_of(name))
            .ok()
            .and_then(|s| s.backup_id);
        if current.as_deref() != Some(id.as_str()) {
            return Err(deleted());
        }
        let mut info = self
            .record_snapshot(name, &id, &snap, synced.position, &existing, None)
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
    pub(super) async fn check_snapshot_limits(
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
    pub(super) async fn record_snapshot(
        &self,
        name: &str,
        id: &str,
        snap: &str,
        position: u64,
        existing: &[SnapshotRecord],
        rewind_base: Option<u64>,
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
            rewind_base,
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
    pub(super) async fn with_own_bytes(
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
    pub(super) async fn log_id(&self, name: &str) -> Result<String, RegistryError> {
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
        let retention = match Settings::load(&self.dir_of(name)) {
            Ok(s) => self.retention_of(&s),
            Err(_) => self.default_retention(),
        };
        let (_, released) = self.apply_retention(name, &id, retention).await?;
        info!(
            computer = name,
            snapshot = snap,
            released_objects = released.0,
            released_bytes = released.1,
            "deleted snapshot"
        );
        Ok(released)
    }

    /// The node agent's default retention ([`DEFAULT_RETENTION`] until its
    /// backup store says otherwise).
    pub(super) fn default_retention(&self) -> Duration {
        self.inner
            .backup
            .get()
            .map_or(DEFAULT_RETENTION, |b| b.target.retention())
    }

    /// How long the past states of a computer with `settings` stay
    /// restorable: its own retention, else the agent's.
    pub(super) fn retention_of(&self, settings: &Settings) -> Duration {
        settings
            .retention_secs
            .map_or_else(|| self.default_retention(), Duration::from_secs)
    }

    /// Applies `retention` to computer `name`'s log (backup id `id`):
    /// deletes the undo snapshots of restores older than the window, then
    /// releases the log objects below every position still needed: the
    /// latest state's, every snapshot's (and the state a restore went
    /// back to, while its undo snapshot lasts), and every state within the
    /// window. Returns the snapshots expired and the objects and bytes
    /// released.
    pub(super) async fn apply_retention(
        &self,
        name: &str,
        id: &str,
        retention: Duration,
    ) -> Result<(usize, (u64, u64)), RegistryError> {
        let b = self.snapshot_store(name)?;
        let err = backup_err(name);
        let cutoff_ns = computer::now_unix_nanos()
            .saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
        let mut expired = 0;
        let mut rest = Vec::new();
        for r in b.target.snapshots(id).await.map_err(&err)? {
            if r.name.starts_with(UNDO_PREFIX) && r.created_unix_nanos < cutoff_ns {
                b.target.remove_snapshot(id, &r.name).await.map_err(&err)?;
                info!(computer = name, snapshot = %r.name, "an undo snapshot outlived the retention window; deleted it");
                expired += 1;
            } else {
                rest.push(r);
            }
        }
        let objects = b.target.log_objects(id).await.map_err(&err)?;
        let Some(head) = objects.last().map(|o| o.position) else {
            return Ok((expired, (0, 0)));
        };
        let known: BTreeMap<u64, u64> = rest.iter().map(|r| (r.position, r.base)).collect();
        let head_base = b.target.base_of(id, head, &known).await.map_err(&err)?;
        let mut keep_from = rest
            .iter()
            .flat_map(|r| [Some(r.base), r.rewind_base])
            .flatten()
            .fold(head_base, u64::min);
        // Every state within the window stays restorable: the one at its
        // start, and (through the undo snapshots above) those after a
        // restore within it.
        let cutoff_ms = u64::try_from(cutoff_ns / 1_000_000).unwrap_or(0);
        keep_from = match b
            .target
            .position_at_time(id, cutoff_ms)
            .await
            .map_err(&err)?
        {
            Some(p) => keep_from.min(b.target.base_of(id, p, &known).await.map_err(&err)?),
            None => 0,
        };
        let released = if keep_from > 0 {
            b.target.prune_below(id, keep_from).await.map_err(&err)?
        } else {
            (0, 0)
        };
        Ok((expired, released))
    }
}
