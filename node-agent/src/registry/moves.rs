//! A computer moving between nodes (docs/moves.md), as this node's
//! registry takes part in it.
//!
//! Leaving: [`Registry::hand_over`] holds new calls (they wait in
//! `acquire`), stops the engine's commits, ships the last of them, closes
//! the computer and releases its writer Lease. Once the computer is placed
//! on its target, [`Registry::departed`] tells the waiting calls where it
//! went; [`Registry::stay`] lets them in again if the move was given up.
//!
//! Arriving: [`Registry::prepare_arrival`] restores the computer from the
//! store in the background, without its Lease and without opening it; the
//! open that takes the Lease then only applies the log's last objects
//! ([`Registry::catch_up_arrival`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::computer::{DB_FILE, SETTINGS_FILE, Settings};

use super::backed_up::backup_err;
use super::*;

/// How long a call waits for a hand-over before it is refused.
pub const HAND_OVER_WAIT: Duration = Duration::from_secs(60);

/// File in a computer's directory while it is caught up in place: a
/// directory holding it was cut short and is discarded.
const CATCHING_UP: &str = "catching-up";

/// File in a computer's directory restored ahead of a move to this node:
/// the open that takes the writer Lease catches it up first.
const ARRIVING: &str = "arriving";

/// Where a computer being handed over stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Departure {
    /// The hand-over runs or waits for the target: calls wait.
    Leaving,
    /// Served by this node (name) now.
    Gone(String),
}

impl Registry {
    /// Hands computer `name` over: new calls wait, running work is
    /// cancelled, the engine commits nothing more, everything it committed
    /// is shipped, it is closed and its writer Lease released. Returns the
    /// log position the store holds it at. A closed copy whose last close
    /// did not ship everything (a failed ship, a stop without a clean
    /// close) is opened first, which ships it. Errors: `HandOver` when the
    /// last ship failed (calls then wait until [`Registry::stay`] lets them
    /// in again; nothing may be switched to another node); the errors of
    /// opening the computer.
    pub async fn hand_over(&self, name: &str) -> Result<u64, RegistryError> {
        check_name(name)?;
        let open = self.inner.open.lock().contains_key(name);
        if !open && !self.closed_copy_shipped(name).await? {
            drop(self.acquire(name).await?);
        }
        {
            let mut departing = self.inner.departing.lock();
            departing
                .entry(name.to_string())
                .or_insert_with(|| watch::channel(Departure::Leaving).0);
        }
        let _guard = self.inner.names.lock(name).await;
        let slot = self.inner.open.lock().remove(name);
        let Some(slot) = slot else {
            return self.closed_position(name).await;
        };
        let started = std::time::Instant::now();
        // Running work first, so that nothing is admitted or keeps a
        // transaction open past the freeze (bounded: a call that ignores
        // its cancellation has its commits refused below).
        slot.cancel.cancel();
        let drained = started + std::time::Duration::from_secs(2);
        while slot.active.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < drained {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        {
            let slot = slot.clone();
            blocking(move || {
                // What calls under a commit window wrote is committed, then
                // nothing more is; the second flush waits out a commit
                // that passed the hook just before.
                if let Err(e) = slot.fs.flush() {
                    warn!(computer = %slot.name, error = %e, "committing the last calls before the hand-over failed");
                }
                slot.frozen.store(true, Ordering::SeqCst);
                let _ = slot.fs.flush();
            })
            .await;
        }
        let (settings, shipped) = super::hibernation::close_slot_with(slot, false).await;
        self.upload_settings(&settings).await;
        let Some(shipped) = shipped else {
            return Err(RegistryError::HandOver {
                name: name.to_string(),
                reason: "its last changes could not be shipped to the backup store".into(),
            });
        };
        info!(
            computer = name,
            position = shipped.position,
            ms = started.elapsed().as_millis() as u64,
            "handed the computer over"
        );
        Ok(shipped.position)
    }

    /// Whether this node's closed copy of `name` holds nothing the store
    /// lacks: its last close shipped everything and the file is as that
    /// close left it (or there is no copy here).
    async fn closed_copy_shipped(&self, name: &str) -> Result<bool, RegistryError> {
        let dir = self.dir_of(name);
        if !dir.join(SETTINGS_FILE).exists() {
            return Ok(true);
        }
        let settings = read_settings(name, &dir).await?;
        Ok(settings
            .backup_resume
            .as_ref()
            .is_some_and(|r| super::backed_up::closed_resume_of(&dir.join(DB_FILE), r).is_some()))
    }

    /// The log position of this node's closed, fully shipped copy of
    /// `name` (0 without a copy here).
    async fn closed_position(&self, name: &str) -> Result<u64, RegistryError> {
        let dir = self.dir_of(name);
        if !dir.join(SETTINGS_FILE).exists() {
            return Ok(0);
        }
        let settings = read_settings(name, &dir).await?;
        Ok(settings.backup_resume.map_or(0, |r| r.position))
    }

    /// Computer `name` is served here: a hand-over was given up, or it
    /// moved away earlier and came back. Calls go in again.
    pub fn stay(&self, name: &str) {
        if let Some(tx) = self.inner.departing.lock().remove(name) {
            // Receivers see the channel close and go on.
            drop(tx);
        }
    }

    /// Computer `name` is now served by `node`: calls waiting for it, and
    /// those that come later, are refused naming that node.
    pub fn departed(&self, name: &str, node: &str) {
        let mut departing = self.inner.departing.lock();
        let tx = departing
            .entry(name.to_string())
            .or_insert_with(|| watch::channel(Departure::Leaving).0);
        tx.send_replace(Departure::Gone(node.to_string()));
    }

    /// Forgets a computer that left: it may come back one day, when it
    /// arrives here as any other.
    pub fn forget_departure(&self, name: &str) {
        self.inner.departing.lock().remove(name);
    }

    /// Waits while `name` is being handed over (at most
    /// [`HAND_OVER_WAIT`]). Errors: `Moved` once it went; `Moving` when the
    /// wait ran out.
    pub(super) async fn wait_while_departing(&self, name: &str) -> Result<(), RegistryError> {
        let rx = self
            .inner
            .departing
            .lock()
            .get(name)
            .map(watch::Sender::subscribe);
        let Some(mut rx) = rx else {
            return Ok(());
        };
        let waited = tokio::time::timeout(HAND_OVER_WAIT, async {
            loop {
                if let Departure::Gone(node) = &*rx.borrow_and_update() {
                    return Err(RegistryError::Moved {
                        name: name.to_string(),
                        node: node.clone(),
                    });
                }
                if rx.changed().await.is_err() {
                    // Given up: served here again.
                    return Ok(());
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            Err(RegistryError::Moving {
                name: name.to_string(),
                waited: HAND_OVER_WAIT,
            })
        })
    }

    /// `Moved` or `Moving` if `name` is being handed over (no wait).
    pub(super) fn departed_error(&self, name: &str) -> Result<(), RegistryError> {
        match self
            .inner
            .departing
            .lock()
            .get(name)
            .map(|tx| tx.borrow().clone())
        {
            None => Ok(()),
            Some(Departure::Gone(node)) => Err(RegistryError::Moved {
                name: name.to_string(),
                node,
            }),
            Some(Departure::Leaving) => Err(RegistryError::Moving {
                name: name.to_string(),
                waited: Duration::ZERO,
            }),
        }
    }

    /// Restores computer `name` from the store ahead of a move to this
    /// node, or brings an earlier restore forward, without its writer
    /// Lease and without opening it. Returns the log position the copy
    /// holds. Errors: `NotFound` when the store has no such computer;
    /// `Backup` naming a damaged object; `Io`.
    pub async fn prepare_arrival(&self, name: &str) -> Result<u64, RegistryError> {
        check_name(name)?;
        let _guard = self.inner.names.lock(name).await;
        if self.inner.open.lock().contains_key(name) {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        let dir = self.dir_of(name);
        if !dir.join(SETTINGS_FILE).exists() {
            self.restore_from_backup(name).await?;
        }
        {
            let marker = dir.join(ARRIVING);
            blocking(move || std::fs::write(&marker, b""))
                .await
                .map_err(|source| RegistryError::Io {
                    name: name.to_string(),
                    source,
                })?;
        }
        self.catch_up_arrival(name, true).await?;
        let settings = read_settings(name, &dir).await?;
        Ok(settings.backup_resume.map_or(0, |r| r.position))
    }

    /// Brings this node's closed copy of `name` to the store's latest
    /// position when the copy is exactly an earlier position of the log
    /// (restored here, or closed here cleanly): only the objects after it
    /// are read. A copy that is not, or whose catch-up fails, is left for
    /// the open to deal with (its shipper finds it older than the log and
    /// restores it whole). Called under the computer's lock with it
    /// closed; only for a copy restored ahead of a move
    /// ([`Registry::prepare_arrival`]), which stops being one unless
    /// `prepare_only`. Errors: `Io` only.
    pub(super) async fn catch_up_arrival(
        &self,
        name: &str,
        prepare_only: bool,
    ) -> Result<(), RegistryError> {
        let dir = self.dir_of(name);
        if !dir.join(ARRIVING).exists() && !dir.join(CATCHING_UP).exists() {
            return Ok(());
        }
        self.catch_up_copy(name, prepare_only).await.map(|_| ())
    }

    /// Brings this node's closed copy of `name` to the store's latest
    /// position in place, when the copy is exactly an earlier position of
    /// the log (its clean close or restore recorded which, and the file is
    /// as it was then); else, or when the catch-up fails, discards it so
    /// that the next open restores it whole. Returns whether it was caught
    /// up. Errors: `Io` only.
    pub(super) async fn catch_up_copy(
        &self,
        name: &str,
        prepare_only: bool,
    ) -> Result<bool, RegistryError> {
        let Some(b) = self.inner.backup.get() else {
            return Ok(false);
        };
        let dir = self.dir_of(name);
        let io_err = |source| RegistryError::Io {
            name: name.to_string(),
            source,
        };
        if dir.join(CATCHING_UP).exists() {
            // A catch-up cut short: the file is neither state.
            warn!(
                computer = name,
                "a catch-up of this copy was cut short; discarding it"
            );
            return self.discard_local_copy(name).await.map(|()| false);
        }
        let mut settings = read_settings(name, &dir).await?;
        let db = dir.join(DB_FILE);
        let from = match (&settings.backup_id, &settings.backup_resume) {
            (Some(_), Some(resume)) => super::backed_up::closed_resume_of(&db, resume),
            _ => None,
        };
        let (Some(id), Some(from)) = (settings.backup_id.clone(), from) else {
            return self.discard_local_copy(name).await.map(|()| false);
        };
        if !prepare_only {
            // Taken over: the copy is this node's from now on.
            let arriving = dir.join(ARRIVING);
            let _ = blocking(move || std::fs::remove_file(arriving)).await;
        }
        let started = std::time::Instant::now();
        let marker = dir.join(CATCHING_UP);
        {
            let marker = marker.clone();
            blocking(move || std::fs::write(&marker, b""))
                .await
                .map_err(io_err)?;
        }
        match b.target.catch_up(&id, &db, from).await {
            Ok(r) => {
                let at = agentcomputer_backup::Position {
                    position: r.position,
                    digest: r.digest,
                    ..Default::default()
                };
                let caught_up = r.position - from.position;
                blocking(move || {
                    settings.backup_resume = super::backed_up::resume_record(&db, at);
                    settings.save(&dir)?;
                    std::fs::remove_file(&marker)
                })
                .await
                .map_err(io_err)?;
                info!(
                    computer = name,
                    from = from.position,
                    position = r.position,
                    objects = caught_up,
                    ms = started.elapsed().as_millis() as u64,
                    "caught this node's copy up with the backup log"
                );
                Ok(true)
            }
            Err(e) => {
                let e = backup_err(name)(e);
                warn!(computer = name, error = %e, "cannot catch this copy up; restoring it whole");
                self.discard_local_copy(name).await.map(|()| false)
            }
        }
    }
}

impl Registry {
    /// Whether computer `name`'s writer Lease says another node serves it:
    /// held by another node, or handed over to one at `position` or later.
    /// False when this agent holds no Leases or the Lease cannot be read.
    async fn served_elsewhere(&self, name: &str, position: u64) -> bool {
        let Some(w) = self.inner.writer_leases.get() else {
            return false;
        };
        let Ok(Some(lease)) = w
            .api
            .get_opt(&super::writer_lease::writer_lease_name(name))
            .await
        else {
            return false;
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty());
        if holder.is_some_and(|h| h != w.identity) {
            return true;
        }
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(agentcomputer_crds::moves::HANDED_OVER_TO))
            .and_then(|v| v.split_once(' '))
            .is_some_and(|(to, at)| {
                to != w.identity && at.parse::<u64>().is_ok_and(|at| at >= position)
            })
    }
}

/// Computer `name`'s settings from its directory `dir`. Errors: `Io`.
async fn read_settings(name: &str, dir: &std::path::Path) -> Result<Settings, RegistryError> {
    let dir = dir.to_path_buf();
    blocking(move || Settings::load(&dir))
        .await
        .map_err(|source| RegistryError::Io {
            name: name.to_string(),
            source,
        })
}

impl Registry {
    /// Removes this node's closed copy of `name` when the store's log has
    /// gone past it: another node served the computer since (it moved or
    /// failed over), so this copy will never be served again. A copy the
    /// store has no log of, one at or ahead of the log, an open one, and
    /// one restored ahead of a move here are kept. Returns whether it was
    /// removed. Errors: `Backup` when the store cannot be read; `Io`.
    pub async fn discard_if_superseded(&self, name: &str) -> Result<bool, RegistryError> {
        check_name(name)?;
        let Some(b) = self.inner.backup.get() else {
            return Ok(false);
        };
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if self.inner.open.lock().contains_key(name)
            || dir.join(ARRIVING).exists()
            || !dir.join(SETTINGS_FILE).exists()
        {
            return Ok(false);
        }
        let settings = read_settings(name, &dir).await?;
        let Some(id) = settings.backup_id.clone() else {
            return Ok(false);
        };
        // What this copy holds: its clean close's position, else the last
        // position its shipper recorded (commits after it were never
        // shipped, and the store's log has moved on without them).
        let local = match &settings.backup_resume {
            Some(r) => Some(r.position),
            None => super::backed_up::recorded_position(&dir),
        };
        let Some(local) = local else {
            return Ok(false);
        };
        let head = b.target.head(&id).await.map_err(backup_err(name))?;
        let Some(head) = head else {
            return Ok(false);
        };
        // At the same position the copy is the store's state; it is only
        // superseded once another node took the computer over (it holds
        // its Lease, or was handed it at this position or later).
        if head < local || (head == local && !self.served_elsewhere(name, local).await) {
            return Ok(false);
        }
        info!(
            computer = name,
            local,
            store = head,
            "another node has shipped past this copy; removing it"
        );
        self.discard_local_copy(name).await?;
        Ok(true)
    }
}
