//! One writer per computer in a cluster: the agent serving a computer
//! holds a `coordination.k8s.io` Lease for it (`ac-<uid>` in the agent's
//! namespace) from before it opens (or restores) the database until after
//! it closed it. Past the Lease's renew deadline the engine commits
//! nothing more ([`Fs::commit_only_while`]), the computer's running work
//! is cancelled and it is closed here, so that another node, which may
//! take the Lease only once its lease duration has passed, never finds two
//! writers. The backup log's conditional puts refuse a second writer too
//! (docs/backup.md); the Lease keeps the database itself from diverging.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentcomputer_fs::Fs;
use agentcomputer_lease::{AcquireError, HeldLease, LeaseLock, Timing};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Api;
use tracing::{error, info, warn};

use super::*;

/// How this agent takes computers' Leases ([`Registry::set_writer_leases`]).
pub(super) struct WriterLeases {
    pub(super) api: Api<KubeLease>,
    pub(super) identity: String,
    timing: Timing,
}

/// The Lease of computer `name` (its uid in a cluster).
pub fn writer_lease_name(name: &str) -> String {
    format!("ac-{name}")
}

impl Registry {
    /// Makes every open of a computer take its writer Lease in `api`'s
    /// namespace as `identity` (the node's name), held with `timing`.
    /// Set once, before serving.
    pub fn set_writer_leases(&self, api: Api<KubeLease>, identity: String, timing: Timing) {
        let _ = self.inner.writer_leases.set(WriterLeases {
            api,
            identity,
            timing,
        });
    }

    /// Takes computer `name`'s Lease, if this agent fences writes.
    /// Errors: `WriterElsewhere` when another node holds it; `Backup`-like
    /// `WriterLease` when the API server cannot be asked.
    pub(super) async fn take_writer_lease(
        &self,
        name: &str,
    ) -> Result<Option<HeldLease>, RegistryError> {
        let Some(w) = self.inner.writer_leases.get() else {
            return Ok(None);
        };
        let labels = BTreeMap::from([
            (
                "app.kubernetes.io/managed-by".to_string(),
                "agentcomputer-node-agent".to_string(),
            ),
            (
                "agentcomputer.dev/computer-uid".to_string(),
                name.to_string(),
            ),
        ]);
        let lock = LeaseLock::new(
            w.api.clone(),
            &writer_lease_name(name),
            &w.identity,
            w.timing,
        )
        .map_err(|e| RegistryError::WriterLease {
            name: name.to_string(),
            reason: e.to_string(),
        })?
        .with_labels(labels);
        // A race (409) is retried: the winner may have been this agent's
        // own earlier attempt, or a holder that just released.
        let attempts = async {
            let mut tries = 0;
            loop {
                tries += 1;
                match lock.acquire().await {
                    Err(AcquireError::Race) if tries < 3 => continue,
                    outcome => return outcome,
                }
            }
        };
        // Bounded: an API server that accepts connections but never answers
        // (a partition) would hold the call for the client's read timeout
        // (minutes). A Lease taken later than its renew deadline would be
        // invalid on arrival anyway.
        let Ok(outcome) = tokio::time::timeout(w.timing.renew_deadline, attempts).await else {
            return Err(RegistryError::WriterLease {
                name: name.to_string(),
                reason: format!(
                    "the Kubernetes API server did not answer within {:?}",
                    w.timing.renew_deadline
                ),
            });
        };
        match outcome {
            Ok(held) => Ok(Some(held)),
            Err(AcquireError::Held { holder, until }) => Err(RegistryError::WriterElsewhere {
                name: name.to_string(),
                holder,
                until: until.to_string(),
            }),
            Err(e) => Err(RegistryError::WriterLease {
                name: name.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// Fences a just opened engine with its Lease: commits stop at the
    /// renew deadline or once `frozen` is set (a hand-over), and when the Lease is lost the computer's work is
    /// cancelled and it is closed here (the next call takes the Lease
    /// again, or is told who holds it).
    pub(super) fn fence_with(
        &self,
        name: &str,
        fs: &Fs,
        held: &HeldLease,
        frozen: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<(), RegistryError> {
        let fence = held.fence();
        fs.commit_only_while(move || {
            !frozen.load(std::sync::atomic::Ordering::SeqCst) && fence.valid().is_ok()
        })
        .map_err(|source| RegistryError::Engine {
            name: name.to_string(),
            source,
        })
    }

    /// Watches slot `slot`'s Lease and closes the computer when it is lost.
    pub(super) fn watch_writer_lease(&self, slot: &Arc<Slot>) {
        let Some(fence) = slot.writer_lease.lock().as_ref().map(HeldLease::fence) else {
            return;
        };
        let registry = self.clone();
        let slot = Arc::downgrade(slot);
        tokio::spawn(async move {
            let lost = fence.lost().await;
            let Some(slot) = slot.upgrade() else { return };
            if matches!(lost, agentcomputer_lease::Lost::Released) {
                return;
            }
            error!(computer = %slot.name, reason = %lost, "writer lease lost: the computer commits nothing more here and is closed");
            *slot.lease_lost.lock() = Some(lost.to_string());
            slot.cancel.cancel();
            let _guard = registry.inner.names.lock(&slot.name).await;
            let removed = {
                let mut open = registry.inner.open.lock();
                match open.get(&slot.name) {
                    Some(s) if Arc::ptr_eq(s, &slot) => open.remove(&slot.name),
                    _ => None,
                }
            };
            if removed.is_some() {
                // What was committed before the deadline still goes up.
                super::backed_up::stop_backup(&slot).await;
            }
        });
    }
}

/// How long releasing a Lease may take. Past it the Lease is left to
/// expire by itself (after its duration): an API server that never answers
/// must not hold up hibernation and shutdown, which release under the
/// computer's lock, for the client's read timeout (minutes).
const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Releases a closed computer's Lease (taken from its slot before the
/// engine closed), so another node may take it at once.
pub(super) async fn release_writer_lease(name: &str, held: Option<HeldLease>) {
    if let Some(held) = held {
        match tokio::time::timeout(RELEASE_TIMEOUT, held.release()).await {
            Ok(Ok(_)) => info!(computer = name, "writer lease released"),
            Ok(Err(e)) => {
                warn!(computer = name, error = %e, "cannot release the writer lease; another node may take it once it expires")
            }
            Err(_) => {
                warn!(computer = name, timeout = ?RELEASE_TIMEOUT, "the API server did not answer the release of the writer lease; another node may take it once it expires")
            }
        }
    }
}
