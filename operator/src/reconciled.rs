//! The `Reconciled` condition: whether the last reconcile applied every
//! step of the computer's current generation, and if not, which step
//! failed and the API server's reason. With it go a Warning event (one per
//! distinct failure, not one per retry), `status.observedGeneration` that
//! moves only when a generation was fully applied, and the step named in
//! `agentcomputer_operator_reconcile_errors_total{step, reason}` (recorded
//! by the caller from the returned error).

use agentcomputer_crds::{AgentComputerStatus, condition_types as ct};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use crate::status::Transition;
use crate::steps::{StepFailure, describe_all};

/// Reason of `Ready=False` and `SandboxReady=False` when a step they need
/// failed; the `Reconciled` condition carries the API server's reason.
pub const RECONCILE_FAILED: &str = "ReconcileFailed";
/// Reason of `Reconciled=True`, and of the Normal event when a computer
/// whose reconcile failed is reconciled again.
pub const APPLIED: &str = "Applied";

/// The `Reconciled` condition for a reconcile of `generation` that ended
/// with `failures` (empty: every step applied): (status, reason, message).
pub fn condition(failures: &[StepFailure], generation: Option<i64>) -> (bool, String, String) {
    match failures.first() {
        None => (
            true,
            APPLIED.into(),
            match generation {
                Some(g) => format!("generation {g} applied"),
                None => "applied".into(),
            },
        ),
        Some(first) => (false, first.reason(), describe_all(failures)),
    }
}

/// `status.observedGeneration` after a reconcile: the computer's
/// generation when every step applied, else the one observed before.
pub fn observed_generation(
    old: &AgentComputerStatus,
    generation: Option<i64>,
    failed: bool,
) -> Option<i64> {
    if failed {
        old.observed_generation
    } else {
        generation
    }
}

/// The Event of a `Reconciled` transition, from the conditions before
/// (`before`) and the new `Reconciled` condition `now` (status, reason,
/// message): a Warning when the reconcile failed for a reason or message
/// other than the one already shown (so a failure retried every few seconds
/// is one event), a Normal [`APPLIED`] when a failing computer is
/// reconciled again, else none.
pub fn transition(before: &[Condition], now: (bool, &str, &str)) -> Option<Transition> {
    let (ok, reason, message) = now;
    let prev = before.iter().find(|k| k.type_ == ct::RECONCILED);
    if ok {
        return prev
            .is_some_and(|k| k.status == "False")
            .then(|| Transition {
                type_: EventType::Normal,
                reason: APPLIED.into(),
                note: message.to_string(),
            });
    }
    let same =
        prev.is_some_and(|k| k.status == "False" && k.reason == reason && k.message == message);
    (!same).then(|| Transition {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: message.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::steps::Step;

    #[test]
    fn generation_moves_only_when_everything_applied() {
        let old = AgentComputerStatus {
            observed_generation: Some(3),
            ..Default::default()
        };
        assert_eq!(observed_generation(&old, Some(4), false), Some(4));
        assert_eq!(observed_generation(&old, Some(4), true), Some(3));
        let (ok, reason, message) = condition(&[], Some(4));
        assert!(ok);
        assert_eq!(
            (reason.as_str(), message.as_str()),
            (APPLIED, "generation 4 applied")
        );
        let failed = [StepFailure {
            step: Step::Volume,
            error: Error::Kube(kube::Error::Api(
                kube::core::Status::failure("exceeded quota: q", "Forbidden")
                    .with_code(403)
                    .boxed(),
            )),
        }];
        let (ok, reason, message) = condition(&failed, Some(4));
        assert!(!ok);
        assert_eq!(reason, "Forbidden");
        assert_eq!(message, "step volume: exceeded quota: q");
    }

    #[test]
    fn a_failure_is_announced_once_and_its_recovery_once() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let t = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let shown = |status: &str, reason: &str, message: &str| Condition {
            type_: ct::RECONCILED.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: t.clone(),
        };
        let first = transition(&[], (false, "Forbidden", "step volume: quota"));
        assert_eq!(
            first.map(|e| (e.type_, e.reason)),
            Some((EventType::Warning, "Forbidden".to_string()))
        );
        let failing = [shown("False", "Forbidden", "step volume: quota")];
        assert_eq!(
            transition(&failing, (false, "Forbidden", "step volume: quota")),
            None
        );
        let other = transition(&failing, (false, "Invalid", "step egress: bad"));
        assert_eq!(other.map(|e| e.reason), Some("Invalid".to_string()));
        let back = transition(&failing, (true, APPLIED, "generation 2 applied")).unwrap();
        assert_eq!(
            (back.type_, back.reason.as_str(), back.note.as_str()),
            (EventType::Normal, APPLIED, "generation 2 applied")
        );
        let applied = [shown("True", APPLIED, "generation 1 applied")];
        assert_eq!(
            transition(&applied, (true, APPLIED, "generation 2 applied")),
            None
        );
    }
}
