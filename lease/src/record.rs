//! Reading and writing a Lease's spec: who holds it, until when, and the
//! spec an acquire, a renew or a release writes. No I/O here.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `leaseDurationSeconds` assumed when a Lease has none (client-go's default).
const DEFAULT_LEASE_SECONDS: i32 = 15;

/// Who holds a Lease, as its spec says at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// No holder, or the holder's lease expired: anyone may take it.
    Free,
    /// The identity asking holds it (expired or not).
    Us,
    /// Someone else holds it until the given time.
    Other { holder: String, until: Timestamp },
}

/// The non-empty `holderIdentity`.
pub(crate) fn holder_identity(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// When the holder's lease ends: `renewTime + leaseDurationSeconds`
/// (None without a renewTime, i.e. already ended).
pub(crate) fn expiry(spec: &LeaseSpec) -> Option<Timestamp> {
    let renewed = spec.renew_time.as_ref()?.0;
    let secs = spec.lease_duration_seconds.unwrap_or(DEFAULT_LEASE_SECONDS);
    renewed
        .checked_add(SignedDuration::from_secs(i64::from(secs)))
        .ok()
}

/// Who holds the Lease for `identity` at `now`. Expired means the expiry
/// is strictly in the past.
pub(crate) fn holder(spec: &LeaseSpec, identity: &str, now: Timestamp) -> Holder {
    match holder_identity(spec) {
        None => Holder::Free,
        Some(h) if h == identity => Holder::Us,
        Some(h) => match expiry(spec) {
            Some(until) if until >= now => Holder::Other {
                holder: h.to_string(),
                until,
            },
            _ => Holder::Free,
        },
    }
}

/// Makes `spec` say that `identity` holds the Lease, renewed at `now`.
/// Taking it from another holder (or from none) counts a transition and
/// sets acquireTime; renewing keeps both.
pub(crate) fn take(spec: &mut LeaseSpec, identity: &str, now: Timestamp, lease_seconds: i32) {
    if holder_identity(spec) != Some(identity) {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.acquire_time = Some(MicroTime(now));
    } else if spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.lease_transitions.get_or_insert(0);
    spec.holder_identity = Some(identity.to_string());
    spec.lease_duration_seconds = Some(lease_seconds);
    spec.renew_time = Some(MicroTime(now));
}

/// The spec of a Lease created for `identity` at `now`: no transitions yet.
pub(crate) fn fresh(identity: &str, now: Timestamp, lease_seconds: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(lease_seconds),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(0),
        ..Default::default()
    }
}

/// Makes `spec` say that nobody holds the Lease: no holder, no renewTime,
/// and a 1 s duration, so that any candidate takes it at once.
pub(crate) fn clear(spec: &mut LeaseSpec) {
    spec.holder_identity = None;
    spec.renew_time = None;
    spec.lease_duration_seconds = Some(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn held(by: &str, renew: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(by.into()),
            renew_time: Some(MicroTime(ts(renew))),
            lease_duration_seconds: Some(secs),
            ..Default::default()
        }
    }

    #[test]
    fn expiry_uses_renew_time_plus_duration() {
        let now = ts("2026-01-01T00:00:20Z");
        assert_eq!(
            holder(&held("a", "2026-01-01T00:00:00Z", 15), "b", now),
            Holder::Free
        );
        assert_eq!(
            holder(&held("a", "2026-01-01T00:00:10Z", 15), "b", now),
            Holder::Other {
                holder: "a".into(),
                until: ts("2026-01-01T00:00:25Z")
            }
        );
        // Exactly at the expiry it is still held.
        assert!(matches!(
            holder(&held("a", "2026-01-01T00:00:05Z", 15), "b", now),
            Holder::Other { .. }
        ));
        // Without a renewTime it is expired.
        let mut spec = held("a", "2026-01-01T00:00:10Z", 15);
        spec.renew_time = None;
        assert_eq!(holder(&spec, "b", now), Holder::Free);
        assert_eq!(holder(&LeaseSpec::default(), "b", now), Holder::Free);
    }

    #[test]
    fn own_and_released_leases() {
        let now = ts("2026-01-01T00:00:20Z");
        let spec = held("a", "2026-01-01T00:00:10Z", 15);
        assert_eq!(holder(&spec, "a", now), Holder::Us);
        let mut released = spec.clone();
        clear(&mut released);
        assert_eq!(holder(&released, "b", now), Holder::Free);
        released.holder_identity = Some(String::new());
        assert_eq!(holder(&released, "b", now), Holder::Free);
    }

    #[test]
    fn take_counts_transitions_only_between_holders() {
        let t0 = ts("2026-01-01T00:00:00Z");
        let t1 = ts("2026-01-01T00:00:05Z");
        let mut spec = fresh("a", t0, 3);
        take(&mut spec, "a", t1, 3);
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(t0)));
        assert_eq!(spec.renew_time, Some(MicroTime(t1)));
        take(&mut spec, "b", t1, 4);
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(t1)));
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_duration_seconds, Some(4));
    }
}
