//! The status after the steps of a reconcile ran: phase, node, endpoint,
//! volume, credential hash, sandbox pod and one condition per step, each
//! from what its step found or the failure it ended with.

use agentcomputer_crds::{
    AgentComputer, AgentComputerStatus, ComputerPhase, NODE_AGENT_GRPC_PORT, VolumeStatus,
    condition_types as ct,
};
use k8s_openapi::jiff::Timestamp;

use super::transitions::{self, Transition};
use super::{
    Applied, CREDENTIAL_INVALID, INVALID_TOKEN, NODE_AGENT_NOT_READY, NODE_AGENT_READY, NODE_GONE,
    VOLUME_DELETING,
};
use crate::conditions;
use crate::namespace_storage;
use crate::reconciled::{self, RECONCILE_FAILED};
use crate::resources;
use crate::steps::credential::{self, Credential};
use crate::steps::sandbox::SandboxState;
use crate::steps::{Step, StepFailure, describe_all};

/// The status after the steps ran (see [`Applied`]), and its Events
/// ([`transitions::of_applied`]).
pub(super) fn derive_applied(
    c: &AgentComputer,
    a: &Applied,
    old: &AgentComputerStatus,
    now: Timestamp,
) -> (AgentComputerStatus, Vec<Transition>) {
    let (node, placed, failures) = (a.node, a.placed, a.failures);
    let generation = c.metadata.generation;
    let pv_name = resources::pv_name(c);
    let pvc_name = resources::pvc_name(c);
    let secret_name = resources::secret_name(c);
    let credential_hash = credential::hash_after(a.credential, old);
    let sandbox = sandbox_state(c, a, old);
    let failed_of = |step: Step| failures.iter().find(|f| f.step == step);
    // Failures the computer's service depends on (all but the sandbox's).
    let blocking: Vec<&StepFailure> = failures
        .iter()
        .filter(|f| f.step != Step::Sandbox)
        .collect();

    let pv_deleting = a.volume.is_some_and(|v| v.pv_deleting);
    let credential_ok = !matches!(a.credential, Some(Credential::Invalid(_)));
    let serving = a.agent.is_some() && a.node_exists;
    let phase = if !placed {
        ComputerPhase::Pending
    } else if serving && credential_ok && !pv_deleting && blocking.is_empty() {
        ComputerPhase::Ready
    } else {
        ComputerPhase::Unavailable
    };
    let endpoint = a
        .agent
        .and_then(|a| a.ip.as_deref())
        .filter(|_| placed)
        .map(endpoint_of);
    let (ready_reason, ready_msg) = match (a.agent, a.node_exists) {
        _ if !blocking.is_empty() => (
            RECONCILE_FAILED,
            blocking
                .iter()
                .map(|f| f.describe())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        (Some(_), true) if pv_deleting => (
            VOLUME_DELETING,
            format!("volume {pv_name} is being deleted"),
        ),
        (Some(_), true) if !credential_ok => (
            CREDENTIAL_INVALID,
            "no usable credential: every request is refused (see CredentialReady)".to_string(),
        ),
        (Some(agent), true) => (
            NODE_AGENT_READY,
            format!("served by node agent {} on {node}", agent.pod),
        ),
        (_, false) => (
            NODE_GONE,
            format!("node {node} no longer exists; the volume stays pinned to it"),
        ),
        (None, true) => (
            NODE_AGENT_NOT_READY,
            format!("no ready node agent on {node}"),
        ),
    };
    let step_condition = |step: Step, type_: &'static str, ok: (&str, String)| match failed_of(step)
    {
        Some(f) => (type_, false, f.reason(), f.describe()),
        None => (type_, true, ok.0.to_string(), ok.1),
    };
    let mut next: Vec<(&str, bool, String, String)> = vec![
        if placed {
            step_condition(
                Step::Placement,
                ct::PLACED,
                ("Placed", format!("placed on node {node}")),
            )
        } else {
            (
                ct::PLACED,
                false,
                RECONCILE_FAILED.to_string(),
                // No node named: the choice may differ at each retry, and
                // a status that changes at each retry is rewritten each time.
                "a computer is placed on a node only once its claim is accepted (see \
                 VolumeReady)"
                    .to_string(),
            )
        },
        match failed_of(Step::Volume) {
            Some(f) => (ct::VOLUME_READY, false, f.reason(), f.describe()),
            None if pv_deleting => (
                ct::VOLUME_READY,
                false,
                VOLUME_DELETING.to_string(),
                format!(
                    "volume {pv_name} was deleted while the computer exists; it is made again, \
                     empty, once the node agent has released it"
                ),
            ),
            None => (
                ct::VOLUME_READY,
                true,
                "Applied".to_string(),
                format!(
                    "claim {pvc_name} is {}, volume {pv_name}",
                    a.volume.map_or("Pending", |v| v.claim_phase.as_str())
                ),
            ),
        },
        match (a.credential, failed_of(Step::Credential)) {
            (_, Some(f)) => (ct::CREDENTIAL_READY, false, f.reason(), f.describe()),
            (Some(Credential::Invalid(why)), None) => (
                ct::CREDENTIAL_READY,
                false,
                INVALID_TOKEN.to_string(),
                why.clone(),
            ),
            _ => (
                ct::CREDENTIAL_READY,
                true,
                "Applied".to_string(),
                format!("secret {secret_name}"),
            ),
        },
        step_condition(
            Step::Egress,
            ct::EGRESS_READY,
            (
                "Applied",
                format!("network policy {}", resources::netpol_name(c)),
            ),
        ),
    ];
    if let Some(s) = &sandbox {
        next.push((
            ct::SANDBOX_READY,
            s.ready,
            s.reason.clone(),
            s.message.clone(),
        ));
    }
    next.push((
        ct::READY,
        phase == ComputerPhase::Ready,
        ready_reason.to_string(),
        ready_msg,
    ));
    if let Some(grant) = a.storage {
        next.push(storage_granted(c, grant));
    }
    let (rec_ok, rec_reason, rec_msg) = reconciled::condition(failures, generation);
    next.push((ct::RECONCILED, rec_ok, rec_reason, rec_msg));
    let next: Vec<(&str, bool, &str, String)> = next
        .iter()
        .map(|(t, ok, r, m)| (*t, *ok, r.as_str(), m.clone()))
        .collect();
    let sandbox_pod = match &sandbox {
        Some(s) if s.reason == RECONCILE_FAILED => old.sandbox_pod.clone(),
        Some(s) => s.running.then(|| resources::pod_name(c)),
        None => None,
    };
    let status = AgentComputerStatus {
        phase: Some(phase),
        node: placed.then(|| node.to_string()),
        volume: match a.volume {
            Some(v) => Some(VolumeStatus {
                claim_name: Some(pvc_name),
                volume_name: Some(pv_name),
                capacity: Some(match a.storage {
                    Some(namespace_storage::Grant::Refused { held, .. }) => held.clone(),
                    _ => c.spec.storage.size.clone(),
                }),
                claim_phase: Some(v.claim_phase.clone()),
                bytes_used: None,
                inodes_used: None,
                disk_bytes: None,
                disk: None,
            }),
            None => old.volume.clone(),
        },
        // The node agent's to write.
        backup: None,
        // The relocation step's (steps::relocation::into_status).
        moving: old.moving.clone(),
        last_move: old.last_move.clone(),
        endpoint,
        credential_secret: Some(secret_name.clone()),
        credential_hash: credential_hash.clone(),
        sandbox_pod,
        conditions: conditions::merge(&old.conditions, &next, generation, now),
        observed_generation: reconciled::observed_generation(old, generation, !failures.is_empty()),
    };

    let mut events = transitions::of_applied(c, a, old, &status);
    if let Some(namespace_storage::Grant::Refused { message, .. }) = a.storage
        && !conditions::has_reason(
            &old.conditions,
            namespace_storage::STORAGE_GRANTED,
            namespace_storage::NAMESPACE_STORAGE_LIMIT,
        )
    {
        events.push(Transition::warning(
            namespace_storage::NAMESPACE_STORAGE_LIMIT,
            message.clone(),
        ));
    }
    (status, events)
}

/// The sandbox's state for `SandboxReady`: the sandbox step's, or, when the
/// step did not run or failed although a sandbox is wanted and some step
/// failed, [`RECONCILE_FAILED`] naming the failed steps (the live pod, if
/// any, is left as it is and stays in `status.sandboxPod`).
fn sandbox_state(
    c: &AgentComputer,
    a: &Applied,
    old: &AgentComputerStatus,
) -> Option<SandboxState> {
    let wanted = c.spec.runtimes.container && c.spec.sandbox.is_some();
    match a.sandbox {
        Some(s) => Some(s.clone()),
        None if wanted && !a.failures.is_empty() => Some(SandboxState {
            ready: false,
            running: old.sandbox_pod.is_some(),
            reason: RECONCILE_FAILED.into(),
            message: format!(
                "the sandbox pod was not reconciled: {}",
                describe_all(a.failures)
            ),
        }),
        None => None,
    }
}

/// The node agent's gRPC endpoint at `ip`: `ip:7433`, IPv6 in brackets.
pub(super) fn endpoint_of(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{NODE_AGENT_GRPC_PORT}")
    } else {
        format!("{ip}:{NODE_AGENT_GRPC_PORT}")
    }
}

/// `StorageGranted` of a placed computer under a namespace storage limit.
fn storage_granted(
    c: &AgentComputer,
    grant: &namespace_storage::Grant,
) -> (&'static str, bool, String, String) {
    match grant {
        namespace_storage::Grant::Whole => (
            namespace_storage::STORAGE_GRANTED,
            true,
            namespace_storage::WITHIN_LIMIT.to_string(),
            format!("the volume has the whole quota, {}", c.spec.storage.size.0),
        ),
        namespace_storage::Grant::Refused { message, .. } => (
            namespace_storage::STORAGE_GRANTED,
            false,
            namespace_storage::NAMESPACE_STORAGE_LIMIT.to_string(),
            format!("the volume keeps its capacity: {message}"),
        ),
    }
}
