//! [`derive()`] and [`aborted`] per condition, from hand-made observations.

use super::applied::endpoint_of;
use super::*;
use agentcomputer_crds::sandbox_reasons;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;

use crate::steps::Step;

use crate::steps::InStep;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:05:00Z";
const HASH: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn at(t: &str) -> Timestamp {
    t.parse().expect("timestamp")
}

/// `team/demo`, uid `u-1`, 5Gi, at `generation`; with a sandbox pod when
/// `container`.
fn computer(generation: i64, container: bool) -> AgentComputer {
    let mut spec = serde_json::json!({"storage": {"size": "5Gi"}});
    if container {
        spec["runtimes"] = serde_json::json!({"container": true});
        spec["sandbox"] = serde_json::json!({"image": "debian:bookworm-slim"});
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": "demo", "namespace": "team", "uid": "u-1",
            "generation": generation},
        "spec": spec,
    }))
    .expect("valid computer")
}

fn agent() -> Agent {
    Agent {
        pod: "agent-a".into(),
        ip: Some("10.0.0.5".into()),
    }
}

fn volume(claim_phase: &str) -> VolumeState {
    VolumeState {
        pv_deleting: false,
        claim_phase: claim_phase.into(),
    }
}

fn sandbox(ready: bool, running: bool, reason: &str, message: &str) -> SandboxState {
    SandboxState {
        ready,
        running,
        reason: reason.into(),
        message: message.into(),
    }
}

fn api_error(code: u16, reason: &str, message: &str) -> Error {
    Error::Kube(kube::Error::Api(
        kube::core::Status::failure(message, reason)
            .with_code(code)
            .boxed(),
    ))
}

/// What a reconcile observed, owned, for [`World::derive`] to borrow.
struct World {
    c: AgentComputer,
    node_exists: bool,
    agent: Option<Agent>,
    newly_placed: bool,
    placed: bool,
    credential: Option<Credential>,
    volume: Option<VolumeState>,
    sandbox: Option<SandboxState>,
    storage: Option<crate::namespace_storage::Grant>,
    failures: Vec<StepFailure>,
}

impl World {
    /// Every step applied on node `n1`, served by [`agent`], claim Bound,
    /// placed before this reconcile.
    fn healthy(c: AgentComputer) -> Self {
        Self {
            c,
            node_exists: true,
            agent: Some(agent()),
            newly_placed: false,
            placed: true,
            credential: Some(Credential::Usable(HASH.into())),
            volume: Some(volume("Bound")),
            sandbox: None,
            storage: None,
            failures: Vec::new(),
        }
    }

    fn fail(mut self, step: Step, error: Error) -> Self {
        self.failures.push(StepFailure { step, error });
        self
    }

    fn derive(
        &self,
        old: &AgentComputerStatus,
        now: Timestamp,
    ) -> (AgentComputerStatus, Vec<Transition>) {
        let observed = Observed {
            computer: &self.c,
            stage: Stage::Applied(Applied {
                node: "n1",
                newly_placed: self.newly_placed,
                placed: self.placed,
                agent: self.agent.as_ref(),
                node_exists: self.node_exists,
                credential: self.credential.as_ref(),
                volume: self.volume.as_ref(),
                sandbox: self.sandbox.as_ref(),
                storage: self.storage.as_ref(),
                failures: &self.failures,
            }),
        };
        derive(&observed, old, now)
    }
}

fn cond<'a>(status: &'a AgentComputerStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {:#?}", status.conditions))
}

/// (status, reason, message) of the condition of `type_`.
fn summary<'a>(status: &'a AgentComputerStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = cond(status, type_);
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn reasons(events: &[Transition]) -> Vec<(EventType, &str)> {
    events
        .iter()
        .map(|t| (t.type_, t.reason.as_str()))
        .collect()
}

#[test]
fn ready_when_every_step_applied() {
    let mut world = World::healthy(computer(3, false));
    world.newly_placed = true;
    let (status, events) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Ready));
    assert_eq!(status.node.as_deref(), Some("n1"));
    assert_eq!(status.endpoint.as_deref(), Some("10.0.0.5:7433"));
    assert_eq!(status.credential_secret.as_deref(), Some("demo-credential"));
    assert_eq!(status.credential_hash.as_deref(), Some(HASH));
    assert_eq!(status.sandbox_pod, None);
    assert_eq!(status.observed_generation, Some(3));
    let v = status.volume.as_ref().expect("volume");
    assert_eq!(v.claim_name.as_deref(), Some("demo-workspace"));
    assert_eq!(v.volume_name.as_deref(), Some("agentcomputer-u-1"));
    assert_eq!(v.claim_phase.as_deref(), Some("Bound"));
    assert_eq!(v.capacity.as_ref().map(|q| q.0.as_str()), Some("5Gi"));
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        [
            ct::PLACED,
            ct::VOLUME_READY,
            ct::CREDENTIAL_READY,
            ct::EGRESS_READY,
            ct::READY,
            ct::RECONCILED
        ],
        "no SandboxReady without the container runtime"
    );
    assert_eq!(
        summary(&status, ct::READY),
        (
            "True",
            NODE_AGENT_READY,
            "served by node agent agent-a on n1"
        )
    );
    assert_eq!(
        summary(&status, ct::PLACED),
        ("True", "Placed", "placed on node n1")
    );
    assert_eq!(
        summary(&status, ct::CREDENTIAL_READY),
        ("True", "Applied", "secret demo-credential")
    );
    assert_eq!(
        summary(&status, ct::EGRESS_READY),
        ("True", "Applied", "network policy demo-egress")
    );
    assert_eq!(
        summary(&status, ct::RECONCILED),
        ("True", "Applied", "generation 3 applied")
    );
    for c in &status.conditions {
        assert_eq!(c.observed_generation, Some(3), "{}", c.type_);
        assert_eq!(c.last_transition_time, Time(at(T0)), "{}", c.type_);
    }
    assert_eq!(
        events,
        [Transition::normal("Placed", "placed on node n1".into())]
    );
    // The same observation again changes nothing and announces nothing.
    world.newly_placed = false;
    let (again, events) = world.derive(&status, at(T1));
    assert_eq!(again, status);
    assert_eq!(events, []);
}

#[test]
fn the_claim_pending_then_bound() {
    let mut world = World::healthy(computer(1, false));
    world.volume = Some(volume("Pending"));
    let (pending, _) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(
        summary(&pending, ct::VOLUME_READY),
        (
            "True",
            "Applied",
            "claim demo-workspace is Pending, volume agentcomputer-u-1"
        )
    );
    assert_eq!(
        pending
            .volume
            .as_ref()
            .and_then(|v| v.claim_phase.as_deref()),
        Some("Pending")
    );
    world.volume = Some(volume("Bound"));
    let (bound, events) = world.derive(&pending, at(T1));
    assert_eq!(
        summary(&bound, ct::VOLUME_READY).2,
        "claim demo-workspace is Bound, volume agentcomputer-u-1"
    );
    assert_eq!(
        cond(&bound, ct::VOLUME_READY).last_transition_time,
        Time(at(T0)),
        "still True: the transition time stays"
    );
    assert_eq!(events, []);
}

#[test]
fn a_refused_first_claim_leaves_the_computer_unplaced() {
    let mut world = World::healthy(computer(2, false)).fail(
        Step::Volume,
        api_error(403, "Forbidden", "exceeded quota: storage"),
    );
    world.newly_placed = true;
    world.placed = false;
    world.volume = None;
    let (status, events) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Pending));
    assert_eq!(status.node, None, "the choice is not kept");
    assert_eq!(status.endpoint, None);
    assert_eq!(status.volume, None);
    assert_eq!(
        summary(&status, ct::PLACED),
        (
            "False",
            RECONCILE_FAILED,
            "a computer is placed on a node only once its claim is accepted (see VolumeReady)"
        )
    );
    assert_eq!(
        summary(&status, ct::VOLUME_READY),
        ("False", "Forbidden", "step volume: exceeded quota: storage")
    );
    assert_eq!(
        summary(&status, ct::READY),
        (
            "False",
            RECONCILE_FAILED,
            "step volume: exceeded quota: storage"
        )
    );
    assert_eq!(status.observed_generation, None, "not applied");
    assert_eq!(reasons(&events), [(EventType::Warning, "Forbidden")]);
}

#[test]
fn a_claim_of_an_earlier_computer_blocks_it() {
    let c = computer(1, false);
    let why = "claim demo-workspace already exists and is bound to volume agentcomputer-old";
    let observed = Observed {
        computer: &c,
        stage: Stage::KeptClaim(why.into()),
    };
    let (status, events) = derive(&observed, &AgentComputerStatus::default(), at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Pending));
    assert_eq!(status.node, None);
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        summary(&status, ct::VOLUME_READY),
        ("False", KEPT_CLAIM, why)
    );
    assert_eq!(
        summary(&status, ct::READY),
        (
            "False",
            "VolumeNotReady",
            "waiting for the claim of an earlier computer to be deleted"
        )
    );
    assert_eq!(events, [Transition::warning(KEPT_CLAIM, why.into())]);
    let (again, events) = derive(&observed, &status, at(T1));
    assert_eq!(again, status, "nothing moves while it waits");
    assert_eq!(events, [], "the Warning is published once");
}

#[test]
fn no_eligible_node_and_an_invalid_size_keep_it_pending() {
    let c = computer(1, false);
    let why = "0/3 nodes are eligible: 1 no room for 5Gi (2Gi free), 2 no published capacity";
    let observed = Observed {
        computer: &c,
        stage: Stage::Unplaced {
            reason: NO_ELIGIBLE_NODE,
            why: why.into(),
        },
    };
    let (status, events) = derive(&observed, &AgentComputerStatus::default(), at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Pending));
    assert_eq!(
        summary(&status, ct::PLACED),
        ("False", NO_ELIGIBLE_NODE, why)
    );
    assert_eq!(
        summary(&status, ct::READY),
        (
            "False",
            "NotPlaced",
            "waiting for a node with a ready node agent and room for 5Gi"
        )
    );
    assert_eq!(events, [Transition::warning(NO_ELIGIBLE_NODE, why.into())]);
    let (_, events) = derive(&observed, &status, at(T1));
    assert_eq!(events, [], "the same reason is not announced again");

    let invalid = Observed {
        computer: &c,
        stage: Stage::Unplaced {
            reason: INVALID_SIZE,
            why: "spec.storage.size: not a quantity".into(),
        },
    };
    let (status, events) = derive(&invalid, &status, at(T1));
    assert_eq!(summary(&status, ct::PLACED).1, INVALID_SIZE);
    assert_eq!(
        cond(&status, ct::PLACED).last_transition_time,
        Time(at(T0)),
        "still False"
    );
    assert_eq!(reasons(&events), [(EventType::Warning, INVALID_SIZE)]);
}

#[test]
fn the_sandbox_starting_ready_and_failing() {
    let mut world = World::healthy(computer(1, true));
    world.sandbox = Some(sandbox(
        false,
        true,
        sandbox_reasons::STARTING,
        "pod demo-sandbox is Pending",
    ));
    let (starting, events) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(
        summary(&starting, ct::SANDBOX_READY),
        (
            "False",
            sandbox_reasons::STARTING,
            "pod demo-sandbox is Pending"
        )
    );
    assert_eq!(starting.sandbox_pod.as_deref(), Some("demo-sandbox"));
    assert_eq!(
        starting.phase,
        Some(ComputerPhase::Ready),
        "the in-process runtimes serve without a sandbox"
    );
    assert_eq!(events, [], "starting is progress, not trouble");

    world.sandbox = Some(sandbox(
        true,
        true,
        sandbox_reasons::RUNNING,
        "pod demo-sandbox is Running",
    ));
    let (running, events) = world.derive(&starting, at(T1));
    assert_eq!(
        summary(&running, ct::SANDBOX_READY),
        (
            "True",
            sandbox_reasons::RUNNING,
            "pod demo-sandbox is Running"
        )
    );
    assert_eq!(
        cond(&running, ct::SANDBOX_READY).last_transition_time,
        Time(at(T1))
    );
    assert_eq!(events, []);

    world.sandbox = Some(sandbox(
        false,
        true,
        "ImagePullBackOff",
        "pod demo-sandbox: container sandbox: Back-off pulling image",
    ));
    let (pulling, events) = world.derive(&running, at(T1));
    assert_eq!(summary(&pulling, ct::SANDBOX_READY).1, "ImagePullBackOff");
    assert_eq!(reasons(&events), [(EventType::Warning, "ImagePullBackOff")]);
    // The kubelet alternates between the two pull reasons: one Warning.
    world.sandbox = Some(sandbox(false, true, "ErrImagePull", "pod demo-sandbox: x"));
    let (_, events) = world.derive(&pulling, at(T1));
    assert_eq!(events, []);

    world.sandbox = Some(sandbox(
        false,
        false,
        sandbox_reasons::REJECTED,
        "the API server refused pod demo-sandbox: exceeded quota",
    ));
    let (rejected, events) = world.derive(&pulling, at(T1));
    assert_eq!(rejected.sandbox_pod, None, "no pod was made");
    assert_eq!(
        reasons(&events),
        [(EventType::Warning, sandbox_reasons::REJECTED)]
    );
}

#[test]
fn a_sandbox_left_alone_by_a_failed_step_keeps_its_pod() {
    let old = AgentComputerStatus {
        sandbox_pod: Some("demo-sandbox".into()),
        observed_generation: Some(4),
        ..Default::default()
    };
    let mut world = World::healthy(computer(5, true))
        .fail(Step::Egress, api_error(422, "Invalid", "spec.egress: bad"));
    world.sandbox = None;
    let (status, events) = world.derive(&old, at(T0));
    assert_eq!(
        summary(&status, ct::SANDBOX_READY),
        (
            "False",
            RECONCILE_FAILED,
            "the sandbox pod was not reconciled: step egress: spec.egress: bad"
        )
    );
    assert_eq!(status.sandbox_pod.as_deref(), Some("demo-sandbox"));
    assert_eq!(status.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(
        summary(&status, ct::EGRESS_READY),
        ("False", "Invalid", "step egress: spec.egress: bad")
    );
    assert_eq!(status.observed_generation, Some(4), "stays behind");
    assert_eq!(
        reasons(&events),
        [(EventType::Warning, "Invalid")],
        "told by the Reconciled event, not a sandbox Warning"
    );

    // The sandbox step's own failure does not make the computer unavailable.
    let only_sandbox = World::healthy(computer(5, true)).fail(
        Step::Sandbox,
        api_error(500, "InternalError", "etcd timeout"),
    );
    let (status, _) = only_sandbox.derive(&old, at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Ready));
    assert_eq!(summary(&status, ct::SANDBOX_READY).1, RECONCILE_FAILED);
    assert_eq!(
        summary(&status, ct::RECONCILED),
        ("False", "InternalError", "step sandbox: etcd timeout")
    );
}

#[test]
fn a_refused_spec_of_a_placed_computer_fails_its_egress() {
    let why = "spec.egress: hosts: \"10.0.0.1\" is an address";
    let world =
        World::healthy(computer(7, false)).fail(Step::Egress, Error::InvalidSpec(why.into()));
    let old = AgentComputerStatus {
        observed_generation: Some(6),
        ..Default::default()
    };
    let (status, events) = world.derive(&old, at(T0));
    let described = format!("step egress: invalid spec: {why}");
    assert_eq!(
        summary(&status, ct::EGRESS_READY),
        ("False", "InvalidSpec", described.as_str())
    );
    assert_eq!(
        summary(&status, ct::RECONCILED),
        ("False", "InvalidSpec", described.as_str())
    );
    assert_eq!(
        summary(&status, ct::READY),
        ("False", RECONCILE_FAILED, described.as_str())
    );
    assert_eq!(status.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(status.observed_generation, Some(6));
    assert_eq!(events, [Transition::warning("InvalidSpec", described)]);
}

#[test]
fn a_refused_spec_of_a_computer_never_placed_aborts() {
    let c = computer(2, false);
    let err = Err::<(), _>(Error::InvalidSpec("spec.egress: bad host".into()))
        .in_step(Step::Spec)
        .unwrap_err();
    let (status, events) = aborted(&c, &err, &AgentComputerStatus::default(), at(T0));
    let message = "step spec: invalid spec: spec.egress: bad host";
    assert_eq!(status.phase, Some(ComputerPhase::Pending));
    assert_eq!(
        summary(&status, ct::RECONCILED),
        ("False", "InvalidSpec", message)
    );
    assert_eq!(
        summary(&status, ct::READY),
        ("False", RECONCILE_FAILED, message)
    );
    assert_eq!(status.observed_generation, None);
    assert_eq!(events, [Transition::warning("InvalidSpec", message.into())]);
    // Retried: the same failure is neither rewritten nor announced again.
    let (again, events) = aborted(&c, &err, &status, at(T1));
    assert_eq!(again, status);
    assert_eq!(events, []);

    // A computer that had a Ready condition keeps it and its phase.
    let ready = World::healthy(computer(2, false))
        .derive(&AgentComputerStatus::default(), at(T0))
        .0;
    let (kept, _) = aborted(&c, &err, &ready, at(T1));
    assert_eq!(kept.phase, Some(ComputerPhase::Ready));
    assert_eq!(cond(&kept, ct::READY), cond(&ready, ct::READY));
    assert_eq!(summary(&kept, ct::RECONCILED).0, "False");
    assert_eq!(
        cond(&kept, ct::RECONCILED).last_transition_time,
        Time(at(T1))
    );
}

#[test]
fn observed_generation_moves_only_when_every_step_applied() {
    let old = AgentComputerStatus {
        observed_generation: Some(3),
        ..Default::default()
    };
    let (ok, _) = World::healthy(computer(4, false)).derive(&old, at(T0));
    assert_eq!(ok.observed_generation, Some(4));
    assert!(
        ok.conditions
            .iter()
            .all(|c| c.observed_generation == Some(4))
    );
    let mut failing = World::healthy(computer(4, false)).fail(
        Step::Credential,
        api_error(409, "Conflict", "the object has been modified"),
    );
    failing.credential = None;
    let (behind, _) = failing.derive(&old, at(T0));
    assert_eq!(behind.observed_generation, Some(3));
    assert_eq!(
        summary(&behind, ct::CREDENTIAL_READY),
        (
            "False",
            "Conflict",
            "step credential: the object has been modified"
        )
    );
    // Each condition still says which generation it describes.
    assert!(
        behind
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(4))
    );
}

#[test]
fn transition_times_move_only_with_status() {
    let world = World::healthy(computer(1, false));
    let (ready, _) = world.derive(&AgentComputerStatus::default(), at(T0));
    // The node agent goes: Ready flips, the others keep their time.
    let mut lost = World::healthy(computer(1, false));
    lost.agent = None;
    let (unavailable, events) = lost.derive(&ready, at(T1));
    assert_eq!(unavailable.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(unavailable.endpoint, None);
    assert_eq!(
        summary(&unavailable, ct::READY),
        ("False", NODE_AGENT_NOT_READY, "no ready node agent on n1")
    );
    for c in &unavailable.conditions {
        let expect = if c.type_ == ct::READY { T1 } else { T0 };
        assert_eq!(c.last_transition_time, Time(at(expect)), "{}", c.type_);
    }
    assert_eq!(
        events,
        [Transition::warning(
            "NodeAgentLost",
            "no ready node agent on n1".into()
        )]
    );
    // The Node object goes too: another reason, same status, same time.
    lost.node_exists = false;
    let (gone, events) = lost.derive(&unavailable, at(at_later()));
    assert_eq!(
        summary(&gone, ct::READY),
        (
            "False",
            NODE_GONE,
            "node n1 no longer exists; the volume stays pinned to it"
        )
    );
    assert_eq!(cond(&gone, ct::READY).last_transition_time, Time(at(T1)));
    assert_eq!(events, [], "still lost: no second Warning");
    // Back: Ready again, with a new time, and the recovery announced.
    let (back, events) = world.derive(&gone, at(at_later()));
    assert_eq!(back.phase, Some(ComputerPhase::Ready));
    assert_eq!(
        cond(&back, ct::READY).last_transition_time,
        Time(at(at_later()))
    );
    assert_eq!(
        reasons(&events),
        [(EventType::Normal, "NodeAgentRecovered")]
    );
}

fn at_later() -> &'static str {
    "2026-01-01T00:10:00Z"
}

#[test]
fn a_malformed_token_and_a_rotation() {
    let old = World::healthy(computer(1, false))
        .derive(&AgentComputerStatus::default(), at(T0))
        .0;
    let mut bad = World::healthy(computer(1, false));
    bad.credential = Some(Credential::Invalid(
        "token must be 64 hex characters; write one or delete the Secret".into(),
    ));
    let (status, events) = bad.derive(&old, at(T1));
    assert_eq!(status.credential_hash, None, "every token is refused");
    assert_eq!(status.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(summary(&status, ct::CREDENTIAL_READY).1, INVALID_TOKEN);
    assert_eq!(summary(&status, ct::READY).1, CREDENTIAL_INVALID);
    assert_eq!(
        reasons(&events),
        [(EventType::Warning, CREDENTIAL_INVALID)],
        "the credential's Warning; the agent still serves, so no NodeAgentLost"
    );
    let (_, events) = bad.derive(&status, at(T1));
    assert_eq!(events, [], "once");

    let mut rotated = World::healthy(computer(1, false));
    let new_hash = format!("sha256:{}", "f".repeat(64));
    rotated.credential = Some(Credential::Usable(new_hash.clone()));
    let (status, events) = rotated.derive(&old, at(T1));
    assert_eq!(status.credential_hash, Some(new_hash));
    assert_eq!(
        events,
        [Transition::normal(
            "CredentialRotated",
            "the token of secret demo-credential changed; the previous one is refused".into()
        )]
    );

    // A Secret that could not be read keeps the hash the node agent checks.
    let mut unread = World::healthy(computer(1, false)).fail(
        Step::Credential,
        api_error(503, "ServiceUnavailable", "try again"),
    );
    unread.credential = None;
    let (status, _) = unread.derive(&old, at(T1));
    assert_eq!(status.credential_hash.as_deref(), Some(HASH));
}

#[test]
fn a_deleted_volume_makes_it_unavailable() {
    let mut world = World::healthy(computer(1, false));
    world.volume = Some(VolumeState {
        pv_deleting: true,
        claim_phase: "Bound".into(),
    });
    let (status, _) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(status.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(
        summary(&status, ct::VOLUME_READY).1,
        VOLUME_DELETING,
        "{:?}",
        summary(&status, ct::VOLUME_READY)
    );
    assert_eq!(
        summary(&status, ct::READY),
        (
            "False",
            VOLUME_DELETING,
            "volume agentcomputer-u-1 is being deleted"
        )
    );
}

#[test]
fn a_failure_then_a_recovery_is_announced() {
    let failing = World::healthy(computer(2, false)).fail(
        Step::Egress,
        api_error(403, "Forbidden", "denied by a webhook"),
    );
    let (failed, events) = failing.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(reasons(&events), [(EventType::Warning, "Forbidden")]);
    let (_, events) = failing.derive(&failed, at(T1));
    assert_eq!(events, [], "a retried failure is one event");
    let (ok, events) = World::healthy(computer(2, false)).derive(&failed, at(T1));
    assert_eq!(summary(&ok, ct::RECONCILED).0, "True");
    assert_eq!(
        events,
        [Transition::normal(
            reconciled::APPLIED,
            "generation 2 applied".into()
        )]
    );
}

#[test]
fn endpoints_bracket_ipv6() {
    assert_eq!(endpoint_of("10.1.2.3"), "10.1.2.3:7433");
    assert_eq!(endpoint_of("fd00::7"), "[fd00::7]:7433");
}

#[test]
fn the_namespace_storage_limit_holds_a_new_computer_and_a_growth() {
    use crate::namespace_storage::{Grant, NAMESPACE_STORAGE_LIMIT, STORAGE_GRANTED, WITHIN_LIMIT};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let c = computer(1, false);
    let why = "team's computers would hold 11Gi, over its limit of 10Gi";
    let waiting = Observed {
        computer: &c,
        stage: Stage::Unplaced {
            reason: NAMESPACE_STORAGE_LIMIT,
            why: why.into(),
        },
    };
    let (status, events) = derive(&waiting, &AgentComputerStatus::default(), at(T0));
    assert_eq!(
        summary(&status, ct::PLACED),
        ("False", NAMESPACE_STORAGE_LIMIT, why)
    );
    assert_eq!(
        summary(&status, ct::READY).2,
        "waiting for room in the namespace's storage limit for 5Gi"
    );
    assert_eq!(
        events,
        [Transition::warning(NAMESPACE_STORAGE_LIMIT, why.into())]
    );

    // Placed, within the limit.
    let mut world = World::healthy(computer(2, false));
    world.storage = Some(Grant::Whole);
    let (ok, events) = world.derive(&AgentComputerStatus::default(), at(T0));
    assert_eq!(summary(&ok, STORAGE_GRANTED).0, "True");
    assert_eq!(summary(&ok, STORAGE_GRANTED).1, WITHIN_LIMIT);
    assert!(events.iter().all(|e| e.reason != NAMESPACE_STORAGE_LIMIT));
    // A growth past it: the volume keeps its capacity, announced once.
    world.storage = Some(Grant::Refused {
        held: Quantity("4Gi".into()),
        message: why.into(),
    });
    let (held, events) = world.derive(&ok, at(T1));
    assert_eq!(summary(&held, STORAGE_GRANTED).0, "False");
    assert_eq!(summary(&held, STORAGE_GRANTED).1, NAMESPACE_STORAGE_LIMIT);
    assert_eq!(
        held.volume.as_ref().and_then(|v| v.capacity.clone()),
        Some(Quantity("4Gi".into()))
    );
    assert_eq!(
        held.phase,
        Some(ComputerPhase::Ready),
        "the computer keeps running"
    );
    assert_eq!(
        reasons(&events),
        [(EventType::Warning, NAMESPACE_STORAGE_LIMIT)]
    );
    let (_, events) = world.derive(&held, at(T1));
    assert!(events.iter().all(|e| e.reason != NAMESPACE_STORAGE_LIMIT));
}
