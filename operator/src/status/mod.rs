//! A computer's status as a pure function of what one reconcile observed.
//!
//! [`derive()`] takes what the steps found ([`Observed`]), the status the
//! computer had and the time, and returns the next status (phase, node,
//! endpoint, volume, credential hash, sandbox pod, conditions,
//! `observedGeneration`) and the [`Transition`]s to publish as Events.
//! [`aborted`] does the same for a reconcile that ended before its steps
//! ran. Neither reads the API server nor the clock; the controller does
//! the I/O ([`crate::steps::events`], [`crate::steps::status`]).
//!
//! Conditions follow the API conventions ([`crate::conditions`]): one per
//! type, `lastTransitionTime` kept while `status` does not change.

use agentcomputer_crds::{
    AgentComputer, AgentComputerStatus, ComputerPhase, condition_types as ct,
};
use k8s_openapi::jiff::Timestamp;

use crate::conditions;
use crate::error::Error;
use crate::placement::Agent;
use crate::reconciled::{self, RECONCILE_FAILED};
use crate::steps::credential::Credential;
use crate::steps::sandbox::SandboxState;
use crate::steps::volume::VolumeState;
use crate::steps::{StepFailure, condition_reason, describe_all};

mod applied;
mod transitions;

pub use transitions::Transition;

#[cfg(test)]
mod tests;

/// Reason of `VolumeReady=False` (and of the Warning event) when a claim of
/// the computer's name exists that this computer does not own.
pub const KEPT_CLAIM: &str = "ClaimFromEarlierComputer";
/// Reason of `Placed=False` (and of the Warning event) when no node is
/// eligible; the message counts nodes per cause.
pub const NO_ELIGIBLE_NODE: &str = agentcomputer_crds::placed_reasons::NO_ELIGIBLE_NODE;
/// Reason of `Placed=False` (and of the Warning event) when every node that
/// could serve the computer lacks room for its size; the message counts
/// nodes per cause, as for [`NO_ELIGIBLE_NODE`].
pub const NO_NODE_HAS_ROOM: &str = agentcomputer_crds::placed_reasons::NO_NODE_HAS_ROOM;
/// Reason of `Placed=False` when `spec.storage.size` has no byte count;
/// final ([`agentcomputer_crds::placed_reasons::FINAL`]).
pub const INVALID_SIZE: &str = agentcomputer_crds::placed_reasons::INVALID_SIZE;
/// Reason of `VolumeReady=False` while the computer's PV is being deleted
/// although the computer lives (someone deleted the PV).
pub const VOLUME_DELETING: &str = "VolumeDeleting";
/// Reason of `CredentialReady=False` when the Secret's token is malformed.
pub const INVALID_TOKEN: &str = "InvalidToken";
/// Reason of `Ready=False` (and of the Warning event) while the computer has
/// no usable credential.
pub const CREDENTIAL_INVALID: &str = "CredentialInvalid";
/// Reason of `Ready=True`: the node agent of the computer's node serves it.
pub const NODE_AGENT_READY: &str = "NodeAgentReady";
/// Reason of `Ready=False` while the computer's node has no ready node agent.
pub const NODE_AGENT_NOT_READY: &str = "NodeAgentNotReady";
/// Reason of `Ready=False` once the computer's Node object is gone.
pub const NODE_GONE: &str = "NodeGone";

/// What one reconcile of a live computer observed and did.
pub struct Observed<'a> {
    /// The computer as the reconcile read it: names, generation, spec.
    pub computer: &'a AgentComputer,
    /// How far the reconcile got.
    pub stage: Stage<'a>,
}

/// How far a reconcile got.
pub enum Stage<'a> {
    /// A claim of the computer's name that it does not own blocks it
    /// (kept by an earlier computer under reclaim policy Retain): why.
    KeptClaim(String),
    /// No node could be chosen: [`NO_ELIGIBLE_NODE`], [`NO_NODE_HAS_ROOM`]
    /// or [`INVALID_SIZE`],
    /// and the message (nodes counted per cause, or the size's error).
    Unplaced {
        /// Reason of `Placed=False`.
        reason: &'static str,
        /// Message of `Placed=False` and of the Warning event.
        why: String,
    },
    /// A node is known or was chosen, and the steps after placement ran.
    Applied(Applied<'a>),
}

/// What the steps after placement found.
pub struct Applied<'a> {
    /// The computer's node (known, or chosen in this reconcile).
    pub node: &'a str,
    /// No node was known before this reconcile (neither in status nor on
    /// the PV): it was chosen now.
    pub newly_placed: bool,
    /// The computer holds its node: it was placed before, its PV exists, or
    /// its volume step succeeded now. False when the first claim was
    /// refused: the choice is not kept.
    pub placed: bool,
    /// The ready node agent of `node`, if any.
    pub agent: Option<&'a Agent>,
    /// The Node object of `node` exists.
    pub node_exists: bool,
    /// The credential step's result; None when the step failed.
    pub credential: Option<&'a Credential>,
    /// The volume step's result; None when the step failed.
    pub volume: Option<&'a VolumeState>,
    /// The sandbox step's result; None when the container runtime is off,
    /// or the step did not run or failed.
    pub sandbox: Option<&'a SandboxState>,
    /// What the namespace's storage limit grants ([`crate::namespace_storage`]);
    /// None when there is no limit.
    pub storage: Option<&'a crate::namespace_storage::Grant>,
    /// The steps that failed, in the order they ran.
    pub failures: &'a [StepFailure],
}

/// The next status of `observed.computer` and the Events its changes make,
/// given the status it had (`old`) and the time `now` (the
/// `lastTransitionTime` of a condition whose status changes).
pub fn derive(
    observed: &Observed,
    old: &AgentComputerStatus,
    now: Timestamp,
) -> (AgentComputerStatus, Vec<Transition>) {
    let c = observed.computer;
    match &observed.stage {
        Stage::KeptClaim(why) => waiting(
            c,
            old,
            now,
            (ct::VOLUME_READY, KEPT_CLAIM, why),
            (
                "VolumeNotReady",
                "waiting for the claim of an earlier computer to be deleted".into(),
            ),
        ),
        Stage::Unplaced { reason, why } => waiting(
            c,
            old,
            now,
            (ct::PLACED, reason, why),
            (
                "NotPlaced",
                if *reason == crate::namespace_storage::NAMESPACE_STORAGE_LIMIT {
                    format!(
                        "waiting for room in the namespace's storage limit for {}",
                        c.spec.storage.size.0
                    )
                } else {
                    format!(
                        "waiting for a node with a ready node agent and room for {}",
                        c.spec.storage.size.0
                    )
                },
            ),
        ),
        Stage::Applied(applied) => applied::derive_applied(c, applied, old, now),
    }
}

/// A computer held Pending before placement: `blocked` is the condition
/// that says why (type, reason, message), `ready` the reason and message of
/// `Ready=False`. The status has nothing else; a Warning is published when
/// the blocking reason is new.
fn waiting(
    c: &AgentComputer,
    old: &AgentComputerStatus,
    now: Timestamp,
    blocked: (&str, &str, &String),
    ready: (&str, String),
) -> (AgentComputerStatus, Vec<Transition>) {
    let (type_, reason, why) = blocked;
    let generation = c.metadata.generation;
    let status = AgentComputerStatus {
        phase: Some(ComputerPhase::Pending),
        conditions: conditions::merge(
            &old.conditions,
            &[
                (type_, false, reason, why.clone()),
                (ct::READY, false, ready.0, ready.1),
            ],
            generation,
            now,
        ),
        observed_generation: generation,
        ..Default::default()
    };
    let mut events = Vec::new();
    if !conditions::has_reason(&old.conditions, type_, reason) {
        events.push(Transition::warning(reason, why.clone()));
    }
    (status, events)
}

/// The status after a reconcile that ended before its steps ran (an invalid
/// spec of a computer never placed, a placement or kept-claim check that
/// failed, a status write of an early return): the status it had, with
/// `Reconciled=False` naming the step and reason, `Ready=False` (reason
/// [`RECONCILE_FAILED`]) and phase Pending when the computer never had a
/// Ready condition, and `observedGeneration` unchanged; the Warning event
/// as [`reconciled::transition`] decides.
pub fn aborted(
    c: &AgentComputer,
    err: &Error,
    old: &AgentComputerStatus,
    now: Timestamp,
) -> (AgentComputerStatus, Vec<Transition>) {
    let generation = c.metadata.generation;
    let reason = condition_reason(err);
    let message = match err {
        Error::Steps(f) if !f.is_empty() => describe_all(f),
        _ => err.to_string(),
    };
    let mut status = old.clone();
    status.conditions = conditions::set(
        &old.conditions,
        (ct::RECONCILED, false, &reason, message.clone()),
        generation,
        now,
    );
    if conditions::status_of(&old.conditions, ct::READY).is_none() {
        status.conditions = conditions::set(
            &status.conditions,
            (ct::READY, false, RECONCILE_FAILED, message.clone()),
            generation,
            now,
        );
        status.phase = Some(old.phase.unwrap_or(ComputerPhase::Pending));
    }
    let events = reconciled::transition(&old.conditions, (false, &reason, &message))
        .into_iter()
        .collect();
    (status, events)
}
