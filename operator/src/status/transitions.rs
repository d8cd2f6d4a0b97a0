//! The Events a new status makes: each is a change between the status the
//! computer had and the one [`super::derive`] made, published once (a
//! failure retried every few seconds is one Warning).

use agentcomputer_crds::{AgentComputer, AgentComputerStatus, ComputerPhase};
use agentcomputer_crds::{condition_types as ct, sandbox_reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use super::{Applied, CREDENTIAL_INVALID, INVALID_TOKEN, NODE_AGENT_NOT_READY, NODE_GONE};
use crate::conditions;
use crate::reconciled::{self, RECONCILE_FAILED};
use crate::resources;
use crate::steps::credential::Credential;

/// An Event to publish on the computer: a change the status records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (the condition reason it reports, mostly).
    pub reason: String,
    /// The human-readable note.
    pub note: String,
}

impl Transition {
    /// A Normal event.
    pub fn normal(reason: &str, note: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.into(),
            note,
        }
    }

    /// A Warning event.
    pub fn warning(reason: &str, note: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.into(),
            note,
        }
    }
}

/// The Events of a reconcile whose steps ran (`a`), from the status before
/// (`old`) and after (`new`), in this order:
/// - `Placed` (Normal) when a node was chosen and kept now;
/// - the sandbox's reason (Warning) when `SandboxReady` turns to a reason
///   that is trouble rather than progress (the API server refused the pod,
///   or the kubelet holds it); a sandbox left alone by a failed step is
///   told by the `Reconciled` event instead;
/// - `NodeAgentLost` (Warning) and `NodeAgentRecovered` (Normal) when the
///   node agent stops or starts serving the computer;
/// - `CredentialInvalid` (Warning) when the token turns malformed, and
///   `CredentialRotated` (Normal) when its hash changes;
/// - the `Reconciled` transition ([`reconciled::transition`]).
pub(super) fn of_applied(
    c: &AgentComputer,
    a: &Applied,
    old: &AgentComputerStatus,
    new: &AgentComputerStatus,
) -> Vec<Transition> {
    let mut events = Vec::new();
    let node = a.node;
    if a.newly_placed && a.placed {
        events.push(Transition::normal(
            "Placed",
            format!("placed on node {node}"),
        ));
    }
    if let Some(s) = find(&new.conditions, ct::SANDBOX_READY).filter(|s| {
        s.status == "False"
            && !sandbox_reasons::is_progress(&s.reason)
            && s.reason != RECONCILE_FAILED
    }) {
        let before = find(&old.conditions, ct::SANDBOX_READY).map_or("", |b| b.reason.as_str());
        if !same_trouble(before, &s.reason) {
            events.push(Transition::warning(&s.reason, s.message.clone()));
        }
    }
    let serving = a.agent.is_some() && a.node_exists && a.placed;
    match (was_serving(old), serving) {
        (Some(true), false) => {
            let why = find(&new.conditions, ct::READY).map_or("", |r| r.message.as_str());
            events.push(Transition::warning("NodeAgentLost", why.to_string()))
        }
        (Some(false), true) => events.push(Transition::normal(
            "NodeAgentRecovered",
            format!("served by node agent on {node}"),
        )),
        _ => {}
    }
    match (a.credential, &old.credential_hash, &new.credential_hash) {
        (Some(Credential::Invalid(why)), _, _)
            if !conditions::has_reason(&old.conditions, ct::CREDENTIAL_READY, INVALID_TOKEN) =>
        {
            events.push(Transition::warning(CREDENTIAL_INVALID, why.clone()))
        }
        (Some(Credential::Usable(_)), Some(before), Some(after)) if before != after => {
            events.push(Transition::normal(
                "CredentialRotated",
                format!(
                    "the token of secret {} changed; the previous one is refused",
                    resources::secret_name(c)
                ),
            ))
        }
        _ => {}
    }
    if let Some(r) = find(&new.conditions, ct::RECONCILED) {
        let now = (r.status == "True", r.reason.as_str(), r.message.as_str());
        events.extend(reconciled::transition(&old.conditions, now));
    }
    events
}

/// The condition of `type_`, if present.
fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Reasons the kubelet alternates between for one cause (an image that
/// cannot be pulled), published as one Warning.
fn same_trouble(a: &str, b: &str) -> bool {
    const PULL: [&str; 2] = ["ErrImagePull", "ImagePullBackOff"];
    a == b || (PULL.contains(&a) && PULL.contains(&b))
}

/// Whether the node agent served the computer at the last status: None
/// before placement, else false when Ready was False for the node or agent.
fn was_serving(old: &AgentComputerStatus) -> Option<bool> {
    match old.phase? {
        ComputerPhase::Ready => Some(true),
        ComputerPhase::Unavailable => Some(
            !conditions::has_reason(&old.conditions, ct::READY, NODE_AGENT_NOT_READY)
                && !conditions::has_reason(&old.conditions, ct::READY, NODE_GONE),
        ),
        _ => None,
    }
}
