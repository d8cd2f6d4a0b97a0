//! Leader election with a coordination.k8s.io/v1 Lease, so that two operator
//! replicas can run and only one reconciles.
//!
//! The Lease is held with `agentcomputer-lease` (client-go's protocol): a
//! replica becomes leader by taking the Lease when it is free (absent,
//! released, or not renewed for the lease duration), renews it every retry
//! period, and stops leading at the renew deadline after its last successful
//! renew, before a standby may take over. The durations are client-go's
//! 15 s / 10 s / 2 s, scaled to `--lease-duration-seconds`.

use std::time::Duration;

use agentcomputer_lease::{AcquireError, HeldLease, LeaseLock, Timing, TimingError};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

/// The candidate `identity` (usually the pod name) for the Lease `name` in
/// the Api's namespace, with a lease of `lease_duration` (whole seconds, at
/// least 1). Errors: a lease under 1 s.
pub fn candidate(
    api: Api<Lease>,
    name: &str,
    identity: &str,
    lease_duration: Duration,
) -> Result<LeaseLock, TimingError> {
    LeaseLock::new(api, name, identity, Timing::scaled_to(lease_duration))
}

/// Blocks until this candidate holds the Lease, trying every retry period.
pub async fn lead(lock: &LeaseLock) -> HeldLease {
    loop {
        match lock.acquire().await {
            Ok(held) => return held,
            Err(e @ (AcquireError::Held { .. } | AcquireError::Race)) => {
                tracing::debug!(lease = %lock.name(), reason = %e, "lease held by another replica")
            }
            Err(AcquireError::Api(e)) => {
                tracing::warn!(lease = %lock.name(), error = %e, "lease acquisition failed")
            }
        }
        tokio::time::sleep(lock.timing().retry_period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lease_gets_client_gos_durations() {
        let t = Timing::scaled_to(Duration::from_secs(15));
        assert_eq!(t, Timing::default());
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.retry_period, Duration::from_secs(2));
        assert!(Timing::scaled_to(Duration::from_secs(1)).validate().is_ok());
    }
}
