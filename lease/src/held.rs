//! A Lease this process holds: renewed in the background until released,
//! dropped or lost.

use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::task::JoinHandle;

use crate::{Fence, LeaseLock, Lost, renew};

/// A held Lease. While it lives, a task renews the Lease every retry
/// period; [`HeldLease::valid`] says whether the holder may still act.
/// Dropping it stops renewing and ends validity at once, without clearing
/// the Lease (it expires after the lease duration); call
/// [`HeldLease::release`] on a clean stop instead.
pub struct HeldLease {
    lock: LeaseLock,
    fence: Fence,
    /// The renew task; taken by `release` to wait for its end.
    renewer: Option<JoinHandle<()>>,
    /// Set by [`HeldLease::stop_renewing`]: dropping leaves validity to
    /// lapse at the renew deadline.
    lapse_on_drop: bool,
}

impl HeldLease {
    /// Starts renewing `written` (the Lease as the acquire wrote it),
    /// valid until `until`.
    pub(crate) fn start(lock: LeaseLock, written: Lease, until: Instant) -> HeldLease {
        let fence = Fence::new(until);
        let renewer = tokio::spawn(renew::run(lock.clone(), written, fence.clone()));
        HeldLease {
            lock,
            fence,
            renewer: Some(renewer),
            lapse_on_drop: false,
        }
    }

    /// Ok while the Lease is held (see [`Fence::valid`]): check it before
    /// every write the Lease guards. Err says why it was lost, for good.
    pub fn valid(&self) -> Result<(), Lost> {
        self.fence.valid()
    }

    /// A clonable [`Fence`] on this Lease for other tasks. It turns invalid
    /// when this holder loses, releases or drops the Lease.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Completes when the Lease is lost, with the reason.
    pub async fn lost(&self) -> Lost {
        self.fence.lost().await
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The holder's identity.
    pub fn identity(&self) -> &str {
        self.lock.identity()
    }

    /// Stops renewing, ends validity, then clears the Lease's holder if it
    /// is still this identity, so that another candidate may take it at
    /// once. Ok(false) when the Lease was no longer this identity's.
    /// Errors: API failures (the Lease then expires after its duration).
    pub async fn release(mut self) -> Result<bool, kube::Error> {
        self.fence.lose(Lost::Released);
        if let Some(renewer) = self.renewer.take() {
            // Wait for the task to end, so that no renew follows the release.
            renewer.abort();
            let _ = renewer.await;
        }
        self.lock.release().await
    }
}

impl HeldLease {
    /// Stops renewing without ending validity now: the returned fence stays
    /// valid until the renew deadline of the last renew, then turns invalid
    /// by itself ([`Lost::RenewDeadline`]); the Lease is not cleared. For a
    /// holder that goes away while work it started may still finish (a
    /// process shutting down while other threads still serve): no other
    /// candidate may take the Lease before its lease duration, which is
    /// longer than the renew deadline, so one writer still holds.
    pub fn stop_renewing(mut self) -> Fence {
        self.lapse_on_drop = true;
        self.fence.clone()
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if !self.lapse_on_drop {
            self.fence.lose(Lost::Released);
        }
        if let Some(renewer) = &self.renewer {
            renewer.abort();
        }
    }
}
