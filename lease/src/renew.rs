//! The renew task of a held Lease: rewrites `renewTime` every retry period
//! and ends the holder's validity at the renew deadline or when another
//! identity shows up.

use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use crate::lock::{is_conflict, is_not_found};
use crate::record;
use crate::{Fence, LeaseLock, Lost};

/// What one renew attempt found.
enum Renewed {
    /// Written; the Lease as the server now has it.
    Yes(Box<Lease>),
    /// The Lease is no longer this identity's.
    Lost(Lost),
    /// Still this identity's, but rewritten by others at every try.
    Contended,
}

/// Renews until the Lease is lost. `written` is the Lease as last written
/// by this holder: renews replace it directly (one request), and read the
/// Lease again only after a conflict.
pub(crate) async fn run(lock: LeaseLock, mut written: Lease, fence: Fence) {
    let retry = lock.timing.retry_period;
    let mut next = Instant::now() + retry;
    loop {
        let Some(deadline) = fence.valid_until() else {
            return;
        };
        tokio::time::sleep_until(next.min(deadline).into()).await;
        if fence.valid().is_err() {
            tracing::warn!(lease = %lock.name, "lease not renewed within the renew deadline");
            return;
        }
        let started = Instant::now();
        next = started + retry;
        // A renew still pending at the deadline is too late to count.
        let attempt = renew_once(&lock, &written);
        let outcome = match tokio::time::timeout_at(deadline.into(), attempt).await {
            Ok(outcome) => outcome,
            Err(_) => {
                // valid() now fails on the deadline; latch it for the fence.
                let _ = fence.valid();
                tracing::warn!(lease = %lock.name, "lease renew pending at the renew deadline");
                return;
            }
        };
        match outcome {
            Ok(Renewed::Yes(lease)) => {
                written = *lease;
                if !fence.extend(started + lock.timing.renew_deadline) {
                    return;
                }
            }
            Ok(Renewed::Lost(why)) => {
                tracing::warn!(lease = %lock.name, reason = %why, "lease lost");
                fence.lose(why);
                return;
            }
            Ok(Renewed::Contended) => {
                tracing::warn!(lease = %lock.name, "lease rewritten by others while renewing; retrying");
            }
            Err(e) => {
                tracing::warn!(lease = %lock.name, error = %e, "lease renew failed; retrying");
            }
        }
    }
}

/// One renew: replace the last written Lease with a new renewTime; after a
/// conflict, read it and renew again if it is still this identity's.
async fn renew_once(lock: &LeaseLock, written: &Lease) -> Result<Renewed, kube::Error> {
    let mut lease = written.clone();
    for _ in 0..2 {
        let now = Timestamp::now();
        let spec = lease.spec.get_or_insert_with(Default::default);
        record::take(
            spec,
            &lock.identity,
            now,
            lock.timing.lease_duration_seconds(),
        );
        match lock.replace(&lease).await {
            Ok(l) => return Ok(Renewed::Yes(Box::new(l))),
            Err(e) if is_conflict(&e) => {}
            Err(e) if is_not_found(&e) => return Ok(Renewed::Lost(Lost::Gone)),
            Err(e) => return Err(e),
        }
        // Someone else wrote the Lease: who holds it now?
        let Some(fresh) = lock.api.get_opt(&lock.name).await? else {
            return Ok(Renewed::Lost(Lost::Gone));
        };
        let spec = fresh.spec.clone().unwrap_or_default();
        match record::holder_identity(&spec) {
            Some(h) if h == lock.identity => lease = fresh,
            Some(h) => return Ok(Renewed::Lost(Lost::TakenBy(h.to_string()))),
            None => return Ok(Renewed::Lost(Lost::Gone)),
        }
    }
    Ok(Renewed::Contended)
}
