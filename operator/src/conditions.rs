//! metav1.Condition bookkeeping per the API conventions: one condition per
//! type, `lastTransitionTime` changes only when `status` changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Builds the next condition list: `next` gives (type, status, reason,
/// message) for each type; a condition whose status did not change keeps its
/// previous lastTransitionTime. `generation` becomes observedGeneration.
pub fn merge(
    previous: &[Condition],
    next: &[(&str, bool, &str, String)],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    next.iter()
        .map(|(type_, ok, reason, message)| {
            let status = if *ok { "True" } else { "False" }.to_string();
            let last = previous
                .iter()
                .find(|c| c.type_ == *type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: (*type_).to_string(),
                status,
                reason: (*reason).to_string(),
                message: message.clone(),
                observed_generation: generation,
                last_transition_time: last,
            }
        })
        .collect()
}

/// `previous` with the condition of `type_` set (added, or replaced in
/// place), the others kept as they are; `lastTransitionTime` as [`merge`].
pub fn set(
    previous: &[Condition],
    entry: (&str, bool, &str, String),
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let type_ = entry.0;
    let new = merge(previous, &[entry], generation, now).remove(0);
    let mut out = previous.to_vec();
    match out.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = new,
        None => out.push(new),
    }
    out
}

/// Status ("True"/"False") of the condition of that type, if present.
pub fn status_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Whether the condition of that type is present with that reason.
pub fn has_reason(conditions: &[Condition], type_: &str, reason: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.reason == reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let first = merge(
            &[],
            &[("Ready", false, "Pending", "waiting".into())],
            Some(1),
            t0,
        );
        let same = merge(
            &first,
            &[("Ready", false, "Pending", "still waiting".into())],
            Some(2),
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0));
        assert_eq!(same[0].message, "still waiting");
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge(&same, &[("Ready", true, "Ready", "ok".into())], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        assert_eq!(status_of(&flipped, "Ready"), Some("True"));
        assert_eq!(status_of(&flipped, "Placed"), None);
        let both = set(
            &flipped,
            ("Reconciled", false, "Forbidden", "step volume".into()),
            Some(3),
            t1,
        );
        assert_eq!(both.len(), 2);
        assert_eq!(both[0], flipped[0], "the others are kept");
        let again = set(
            &both,
            ("Reconciled", false, "Invalid", "step egress".into()),
            Some(4),
            t1,
        );
        assert_eq!(again.len(), 2);
        assert_eq!(again[1].reason, "Invalid");
        assert_eq!(again[1].last_transition_time, Time(t1));
    }
}
