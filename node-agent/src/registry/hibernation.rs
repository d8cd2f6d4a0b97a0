//! Closing idle computers (hibernation), giving their free pages back,
//! and closing everything at shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentcomputer_fs::Fs;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::computer::{DB_FILE, Settings, Usage};

use super::*;

impl Registry {
    /// Closes every open computer that has had no lease for the idle timeout.
    /// Returns how many were closed.
    pub async fn close_idle(&self) -> usize {
        let idle = self.inner.idle_timeout;
        let closable = |s: &Slot| {
            s.active.load(Ordering::SeqCst) == 0
                && s.last_used.lock().elapsed() >= idle
                && s.mounts.lock().is_empty()
                && s.connections.lock().is_empty()
                // A lazily detached mount still serving processes holds
                // the engine: closing would let the next use open a second
                // engine on the same database.
                && !s.fs.is_shared()
        };
        let candidates: Vec<String> = self
            .inner
            .open
            .lock()
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
                let mut map = self.inner.open.lock();
                match map.get(&name) {
                    Some(s) if closable(s) => map.remove(&name),
                    _ => None,
                }
            };
            if let Some(slot) = victim {
                let settings = close_slot(slot).await;
                self.upload_settings(&settings).await;
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
        let slots: Vec<Arc<Slot>> = self
            .inner
            .open
            .lock()
            .values()
            .filter(|s| {
                s.active.load(Ordering::SeqCst) == 0 && s.last_used.lock().elapsed() >= idle
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

    /// Unmounts every host mount, then closes every open computer that has
    /// no lease, recording its usage. Computers still leased are left open
    /// (and logged). For shutdown.
    pub async fn close_all(&self) {
        let mut all: Vec<Arc<Slot>> = self.inner.open.lock().values().cloned().collect();
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
            let mut map = self.inner.open.lock();
            let names: Vec<String> = map.keys().cloned().collect();
            names
                .iter()
                .filter_map(|n| {
                    if map[n].active.load(Ordering::SeqCst) != 0 {
                        warn!(computer = %n, "computer still in use at shutdown; leaving it open");
                        None
                    } else if !map[n].connections.lock().is_empty() {
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
            let settings = close_slot(slot).await;
            self.upload_settings(&settings).await;
        }
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

/// Free bytes inside an idle, still open computer's database that make
/// [`Registry::compact_idle`] give them back (16 MiB).
pub const COMPACT_MIN_FREE_BYTES: u64 = 16 << 20;

/// Gives the computer's free pages back to the host (it is going idle),
/// ships what its backup has not shipped yet, records its usage and drops
/// its engine.
pub(super) async fn close_slot(slot: Arc<Slot>) -> Settings {
    close_slot_with(slot, true).await.0
}

/// [`close_slot`], compacting only if `compact_first` (a hand-over skips
/// it: calls wait meanwhile). Returns the settings and where the backup
/// log stands after the last ship, if it shipped.
pub(super) async fn close_slot_with(
    slot: Arc<Slot>,
    compact_first: bool,
) -> (Settings, Option<agentcomputer_backup::Position>) {
    let name = slot.name.clone();
    {
        let slot = slot.clone();
        blocking(move || {
            if compact_first {
                compact(&slot.name, &slot.fs);
            }
            // Calls under a commit window are committed now, so the
            // shipper's last round has them and the close commits nothing.
            if let Err(e) = slot.fs.flush() {
                warn!(computer = %slot.name, error = %e, "committing the last calls at close failed");
            }
        })
        .await;
    }
    // After the compaction, whose writes are shipped too; before the
    // engine closes, whose last checkpoint needs no shipper.
    let shipped = super::backed_up::stop_backup(&slot).await;
    let writer_lease = slot.writer_lease.lock().take();
    let settings = blocking(move || {
        let mut settings = slot.settings.lock().clone();
        let st = slot.fs.statfs();
        let dir = slot.dir.clone();
        // Dropping the last connection checkpoints and removes the WAL.
        drop(slot);
        // The file is now exactly the log's latest position.
        settings.backup_resume =
            shipped.and_then(|at| super::backed_up::resume_record(&dir.join(DB_FILE), at));
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
        settings
    })
    .await;
    // After the engine closed: the next holder finds it complete.
    super::writer_lease::release_writer_lease(&name, writer_lease).await;
    info!(computer = %name, "closed computer");
    (settings, shipped)
}

/// Gives a computer's free pages back to the host (see [`Fs::compact`]),
/// logging what it did; failures are logged, never fatal.
pub(super) fn compact(name: &str, fs: &Fs) {
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
