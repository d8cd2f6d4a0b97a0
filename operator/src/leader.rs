//! Leader election with a coordination.k8s.io/v1 Lease, so that two operator
//! replicas can run and only one reconciles.
//!
//! The protocol is client-go's leaderelection: a replica becomes leader by
//! writing its identity into `spec.holderIdentity` of a Lease that is free
//! (absent, released, or not renewed for `leaseDurationSeconds`), then keeps
//! it by rewriting `spec.renewTime`. Every write is a replace guarded by
//! resourceVersion, so two candidates cannot both win: the loser gets 409.
//! Expiry is judged on the holder's renewTime, so clocks are assumed to be
//! within a few seconds (the default lease is 15 s, renewed every 5 s).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::error::is_not_found;

/// One candidate's view of a Lease.
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaseLock {
    /// A candidate `identity` (usually the pod name) for Lease `name` in the
    /// Api's namespace, holding it for `duration` without renewal.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One attempt: Ok(true) when this candidate holds the lease afterwards
    /// (acquired or renewed), Ok(false) when another live holder has it or
    /// won a race. Errors: API failures other than conflicts.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let lease = match self.api.get(&self.name).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => {
                let fresh = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now, now, 0)),
                };
                return match self.api.create(&PostParams::default(), &fresh).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let transitions = spec.lease_transitions.unwrap_or(0);
        let next = if holder.as_deref() == Some(&self.identity) {
            let acquired = spec.acquire_time.map(|t| t.0).unwrap_or(now);
            self.spec(acquired, now, transitions)
        } else if holder.is_none() || expired(&spec, now) {
            self.spec(now, now, transitions + 1)
        } else {
            return Ok(false);
        };
        let mut updated = lease;
        updated.spec = Some(next);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up if this candidate holds it, so a standby takes over
    /// at once instead of after expiry.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let mut lease = self.api.get(&self.name).await?;
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    /// Blocks until this candidate holds the lease, retrying every `retry`.
    pub async fn acquire(&self, retry: Duration) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => tracing::debug!(lease = %self.name, "lease held by another replica"),
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "lease acquisition failed")
                }
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews every `renew` while leading; returns once leadership is lost
    /// (another holder took over, or renewals failed for the lease duration).
    pub async fn hold(&self, renew: Duration) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(renew).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "lease renewal failed");
                    if last_ok.elapsed() >= self.duration {
                        return;
                    }
                }
            }
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renewed
        .saturating_add(SignedDuration::from_secs(secs))
        .map(|end| end < now)
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_uses_renew_time_plus_duration() {
        let now: Timestamp = "2026-01-01T00:00:20Z".parse().unwrap();
        let spec = |renew: &str, secs| LeaseSpec {
            renew_time: Some(MicroTime(renew.parse().unwrap())),
            lease_duration_seconds: Some(secs),
            ..Default::default()
        };
        assert!(expired(&spec("2026-01-01T00:00:00Z", 15), now));
        assert!(!expired(&spec("2026-01-01T00:00:10Z", 15), now));
        assert!(expired(&LeaseSpec::default(), now));
    }
}
