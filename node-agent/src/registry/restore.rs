//! Restores: a computer brought back to one of its snapshots, or to the
//! latest position of its log at or before a time (docs/snapshots.md).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::info;

use crate::backup::SnapshotRecord;
use crate::blocking::blocking;
use crate::computer::{self, DB_FILE, Settings};

use super::backed_up::backup_err;
use super::snapshots::{RESTORE_DRAIN, RestoreTo, Restored, UNDO_PREFIX};
use super::*;

impl Registry {
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
        let retention = self.retention_of(&settings);
        if let RestoreTo::Time(t) = to {
            let oldest = std::time::SystemTime::now()
                .checked_sub(retention)
                .unwrap_or(std::time::UNIX_EPOCH);
            if *t < oldest {
                return Err(RegistryError::OutsideRetention {
                    name: name.to_string(),
                    at: humantime::format_rfc3339_millis(*t).to_string(),
                    retention: humantime::format_duration(retention).to_string(),
                    oldest: humantime::format_rfc3339_seconds(oldest).to_string(),
                });
            }
        }
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
        let closed_ms = started.elapsed().as_millis() as u64;
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
                let known = existing.iter().map(|r| (r.position, r.base)).collect();
                SnapshotRecord {
                    name: String::new(),
                    computer: name.to_string(),
                    id: id.clone(),
                    position,
                    base: b
                        .target
                        .base_of(&id, position, &known)
                        .await
                        .map_err(&err)?,
                    created_unix_nanos: at_ms as i64 * 1_000_000,
                    database_bytes: b
                        .target
                        .database_bytes_at(&id, position)
                        .await
                        .map_err(&err)?,
                    rewind_base: None,
                }
            }
        };
        let before_name = format!("{UNDO_PREFIX}{}", computer::now_unix_nanos() / 1_000_000);
        let before = self
            .record_snapshot(name, &id, &before_name, head, &existing, Some(target.base))
            .await?;
        let tmp = dir.join(format!(".restoring-{:016x}.db", rand::random::<u64>()));
        let building = Instant::now();
        let restored = match b.target.restore_at(&id, &tmp, target.position).await {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(err(e));
            }
        };
        let built_ms = building.elapsed().as_millis() as u64;
        // The file is exactly the state of the target position: the log
        // says so with a rewind of a few dozen bytes, and the computer's
        // next shipper continues the log from it. (A file the checks
        // changed is shipped whole at the next open instead.)
        let rewound = if restored.exact {
            match b.target.rewind(&id, head, &restored).await {
                Ok((position, digest)) => Some(agentcomputer_backup::Position {
                    position,
                    digest,
                    ..Default::default()
                }),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(err(e));
                }
            }
        } else {
            None
        };
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
                // The log's latest position when it was rewound; otherwise
                // the next open ships the file as a new snapshot object.
                settings.backup_resume =
                    rewound.and_then(|at| super::backed_up::resume_record(&db, at));
                settings.usage_at_close = None;
                settings.save(&dir)
            })
            .await
            .map_err(io_err)?;
        }
        drop(guard);
        let opening = Instant::now();
        if rewound.is_none() {
            // Open again at once: the shipper's new snapshot object makes
            // the restored state the log's latest.
            drop(self.acquire(name).await?);
        }
        let opened_ms = opening.elapsed().as_millis() as u64;
        let elapsed = started.elapsed();
        // Undo snapshots past the window go, with what only they needed.
        if let Err(e) = self.apply_retention(name, &id, retention).await {
            tracing::warn!(computer = name, error = %e, "cannot apply the retention window after a restore");
        }
        info!(
            computer = name,
            to = snap,
            position = target.position,
            undo = %before_name,
            ended_runs,
            ms = elapsed.as_millis() as u64,
            closed_ms,
            built_ms,
            opened_ms,
            rewound = rewound.is_some(),
            "restored computer to snapshot"
        );
        Ok(Restored {
            before,
            restored: target,
            ended_runs,
            elapsed,
        })
    }
}
