//! Leases: the right to use one open computer's engine, opening it on
//! first use; and the hold on orphans while live connections are taken
//! over.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use agentcomputer_fs::{Fs, OpenOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::computer::Settings;

use super::*;

/// The right to use one computer's engine; keeps it open while held.
pub struct Lease {
    pub(super) slot: Arc<Slot>,
    /// Whether releasing counts as use (restarts the idle clock). Looking
    /// at a computer's usage does not.
    pub(super) touch: bool,
}

impl Lease {
    /// The computer's filesystem engine.
    pub fn fs(&self) -> &Fs {
        &self.slot.fs
    }

    /// The computer's settings now (they may change while the lease is
    /// held, by [`Registry::update`]).
    pub fn settings(&self) -> Settings {
        self.slot.settings.lock().clone()
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

    /// Why this node stopped being the computer's writer (its writer
    /// Lease was lost, and its work cancelled for that reason), if it did.
    pub fn writer_lost(&self) -> Option<String> {
        self.slot.lease_lost.lock().clone()
    }

    /// Why this lease's work was ended while the computer goes on (its
    /// files were replaced by a restore), if it was.
    pub fn ended(&self) -> Option<String> {
        self.slot.ended.lock().clone()
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
            *self.slot.last_used.lock() = Instant::now();
        }
        self.slot.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Registry {
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
        *self.inner.orphan_hold.lock() = Some(until);
    }

    /// Ends the hold of [`Registry::hold_orphans_until`] at `until` if it
    /// would end later (never extends it).
    pub fn shorten_orphan_hold(&self, until: Instant) {
        let mut hold = self.inner.orphan_hold.lock();
        if let Some(end) = hold.as_mut() {
            *end = (*end).min(until);
        }
    }

    /// Whether opens keep orphans now ([`Registry::hold_orphans_until`]).
    pub fn holds_orphans(&self) -> bool {
        self.inner
            .orphan_hold
            .lock()
            .is_some_and(|end| Instant::now() < end)
    }

    pub(super) async fn acquire_with(
        &self,
        name: &str,
        options: OpenOptions,
    ) -> Result<Lease, RegistryError> {
        check_name(name)?;
        if let Some(lease) = self.try_lease(name, true) {
            return Ok(lease);
        }
        self.wait_while_departing(name).await?;
        let _guard = self.inner.names.lock(name).await;
        // Handed over while this call waited for the lock.
        self.departed_error(name)?;
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
        // A slot whose writer Lease ran out and that its watcher has not
        // closed yet: out of the way now (its watcher then finds it gone).
        let lost = {
            let mut open = self.inner.open.lock();
            match open.get(name) {
                Some(s) if s.past_writer_deadline() => open.remove(name),
                _ => None,
            }
        };
        if let Some(slot) = lost {
            slot.cancel.cancel();
            super::backed_up::stop_backup(&slot).await;
        }
        // The writer Lease first: only its holder may restore, open and write.
        let held = self.take_writer_lease(name).await?;
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let opened = async {
            let mut replaced = false;
            loop {
                let dir = self.dir_of(name);
                if held.is_some() {
                    // Restored here in the background before a move: the
                    // log's last objects, now that this node holds it (a
                    // copy that cannot be caught up is discarded).
                    self.catch_up_arrival(name, false).await?;
                }
                if !dir.join(crate::computer::SETTINGS_FILE).exists() {
                    // Made on another node, or this node's disk was lost.
                    self.restore_from_backup(name).await?;
                }
                let owned = name.to_string();
                let (fs, mut settings) =
                    blocking(move || open_computer(&owned, &dir, options)).await?;
                if let Some(held) = &held {
                    self.fence_with(name, &fs, held, frozen.clone())?;
                }
                match self.start_backup(name, &fs, &mut settings).await {
                    super::backed_up::SlotBackup::Stale(why) if !replaced => {
                        // Another node served it since: its log is newer
                        // than this copy, which must not be served.
                        warn!(computer = name, reason = %why, "this node's copy is older than the backup log; bringing it up to date");
                        drop(fs);
                        // Only the log's later objects when the copy is an
                        // earlier position of it exactly (a node the
                        // computer moved away from and back to); else it
                        // is discarded and restored whole.
                        self.catch_up_copy(name, false).await?;
                        replaced = true;
                    }
                    backup => break Ok::<_, RegistryError>((fs, settings, backup)),
                }
            }
        }
        .await;
        let (fs, settings, backup) = match opened {
            Ok(o) => o,
            Err(e) => {
                super::writer_lease::release_writer_lease(name, held).await;
                return Err(e);
            }
        };
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
            backup: Mutex::new(backup),
            writer_lease: Mutex::new(held),
            lease_lost: Mutex::new(None),
            ended: Mutex::new(None),
            frozen,
        });
        self.watch_writer_lease(&slot);
        self.inner
            .open
            .lock()
            .insert(name.to_string(), slot.clone());
        info!(computer = name, "opened computer");
        Ok(Lease { slot, touch: true })
    }

    pub(super) fn try_lease(&self, name: &str, touch: bool) -> Option<Lease> {
        let map = self.inner.open.lock();
        let slot = map.get(name)?;
        // Past its writer Lease's renew deadline the engine commits nothing:
        // such a slot is on its way out and is never handed to a new call.
        if slot.past_writer_deadline() {
            return None;
        }
        slot.active.fetch_add(1, Ordering::SeqCst);
        Some(Lease {
            slot: slot.clone(),
            touch,
        })
    }
}
