//! The `Reconciled` condition: whether the last reconcile applied every
//! step of the computer's current generation, and if not, which step
//! failed and the API server's reason. With it go a Warning event (one per
//! distinct failure, not one per retry), `status.observedGeneration` that
//! moves only when a generation was fully applied, and the step named in
//! `agentcomputer_operator_reconcile_errors_total{step, reason}` (recorded
//! by the caller from the returned error).

use agentcomputer_crds::{
    AgentComputer, AgentComputerStatus, ComputerPhase, condition_types as ct,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::conditions;
use crate::context::Context;
use crate::controller::{publish, write_status};
use crate::error::Error;
use crate::steps::{StepFailure, condition_reason, describe_all};

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

/// Publishes the event of a `Reconciled` transition: a Warning when the
/// reconcile failed for a reason or message other than the one already
/// shown (so a failure retried every few seconds is one event), a Normal
/// [`APPLIED`] when a failing computer is reconciled again.
pub async fn announce(
    ctx: &Context,
    c: &AgentComputer,
    before: &[Condition],
    now: (bool, &str, &str),
) {
    let (ok, reason, message) = now;
    let prev = before.iter().find(|k| k.type_ == ct::RECONCILED);
    if ok {
        if prev.is_some_and(|k| k.status == "False") {
            publish(ctx, c, EventType::Normal, APPLIED, message.to_string()).await;
        }
        return;
    }
    let same =
        prev.is_some_and(|k| k.status == "False" && k.reason == reason && k.message == message);
    if !same {
        tracing::warn!(computer = %c.name_any(), namespace = ?c.namespace(), reason, message, "reconcile failed");
        publish(ctx, c, EventType::Warning, reason, message.to_string()).await;
    }
}

/// Reports a reconcile that ended before its status was written (a
/// placement failure, or the status write itself): the status it had,
/// with `Reconciled=False` naming the step and reason, `Ready=False` when
/// the computer never had a Ready condition (phase Pending then), and
/// `observedGeneration` unchanged; the Warning event as [`announce`].
/// Best effort: a failure to write is logged. Returns `err` for the caller
/// to hand to the controller.
pub async fn report_abort(ctx: &Context, c: &AgentComputer, err: Error) -> Error {
    let Some(ns) = c.namespace() else {
        return err;
    };
    let failures = match &err {
        Error::Steps(f) => f.as_slice(),
        _ => &[],
    };
    let (reason, message) = match failures.first() {
        Some(_) => (condition_reason(&err), describe_all(failures)),
        None => (condition_reason(&err), err.to_string()),
    };
    let old = c.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let mut status = old.clone();
    status.conditions = conditions::set(
        &old.conditions,
        (ct::RECONCILED, false, &reason, message.clone()),
        c.metadata.generation,
        now,
    );
    if conditions::status_of(&old.conditions, ct::READY).is_none() {
        status.conditions = conditions::set(
            &status.conditions,
            (ct::READY, false, RECONCILE_FAILED, message.clone()),
            c.metadata.generation,
            now,
        );
        status.phase = Some(old.phase.unwrap_or(ComputerPhase::Pending));
    }
    announce(ctx, c, &old.conditions, (false, &reason, &message)).await;
    if let Err(e) = write_status(ctx, c, &ns, &old, status).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "could not report the failed reconcile in status");
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
