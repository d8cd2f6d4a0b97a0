//! The reconciler of AgentComputer.
//!
//! One reconcile, for a live computer:
//! 0. a claim of the computer's name left by an earlier computer (reclaim
//!    policy Retain) is reported and the computer waits, Pending: a claim
//!    stays bound to its volume, so it cannot serve the new computer;
//! 1. placement: keep `status.node` (or the PV's node), or choose a node with
//!    room ([`crate::placement`]); with none eligible the computer stays
//!    Pending and is retried; once placed the computer is labelled
//!    `agentcomputer.dev/node`;
//! 2. credential Secret (created once with a random token; a token the user
//!    writes is kept), whose SHA-256 becomes `status.credentialHash`;
//! 3. PersistentVolume (with the node agent's finalizer) and
//!    PersistentVolumeClaim, pre-bound to each other;
//! 4. NetworkPolicy from `spec.egress`;
//! 5. sandbox Pod when `runtimes.container` is on and not idle, else none;
//!    a live pod keeps the runner image it carries (a new product version
//!    takes effect with the next pod, see [`pod::keep_runner`]) unless the
//!    node agent refuses that runner;
//! 6. status (phase, node, endpoint, volume, conditions), written only when
//!    it changed, and Events on transitions.
//!
//! Deletion runs through the finalizer `agentcomputer.dev/volume`: the
//! sandbox, credential and policy go; the PV and PVC are deleted (reclaim
//! policy Delete, the PV first annotated `agentcomputer.dev/delete-data`)
//! or orphaned and kept (Retain). A deleted PV stays Terminating until the
//! node agent of its node has dealt with the data and removed its finalizer
//! `agentcomputer.dev/node-data`; the computer does not wait for that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{
    AgentComputer, AgentComputerStatus, ComputerPhase, NODE_AGENT_GRPC_PORT, ReclaimPolicy,
    VolumeStatus, condition_types as ct, labels, sandbox_reasons,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Error, Result, is_not_found};
use crate::resources::{self, netpol, pod, pv, secret};
use crate::steps::{self, InStep, Step, StepFailure};
use crate::{
    FIELD_MANAGER, FINALIZER, conditions, namespace_storage, placement, reconciled, spec_check,
    volume_step,
};

/// How often a computer waiting for a node is retried.
pub const PENDING_RETRY: Duration = Duration::from_secs(30);
/// How often a computer whose node agent is gone is rechecked.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);
/// How often a sandbox pod refused by the API server is tried again.
pub const SANDBOX_REJECTED_RETRY: Duration = Duration::from_secs(30);
/// How often a computer blocked by a kept claim checks whether it is gone.
pub const KEPT_CLAIM_RETRY: Duration = Duration::from_secs(10);
/// Reason of `VolumeReady=False` (and of the Warning event) when a claim of
/// the computer's name exists that this computer does not own.
pub const KEPT_CLAIM: &str = "ClaimFromEarlierComputer";
/// Reason of `Placed=False` (and of the Warning event) when no node is
/// eligible; the message counts nodes per cause.
pub const NO_ELIGIBLE_NODE: &str = "NoEligibleNode";
/// Reason of `Placed=False` when `spec.storage.size` has no byte count.
pub const INVALID_SIZE: &str = "InvalidSize";
/// Reason of `VolumeReady=False` while the computer's PV is being deleted
/// although the computer lives (someone deleted the PV).
pub const VOLUME_DELETING: &str = "VolumeDeleting";
/// Reason of `CredentialReady=False` when the Secret's token is malformed.
pub const INVALID_TOKEN: &str = "InvalidToken";
/// Reason of `Ready=False` (and of the Warning event) while the computer has
/// no usable credential.
pub const CREDENTIAL_INVALID: &str = "CredentialInvalid";
/// Reason of `SandboxReady=False` (and of the Warning event) when the API
/// server refuses the sandbox pod (HTTP 403 or 400, e.g. an exceeded
/// ResourceQuota or an admission webhook).
pub const SANDBOX_REJECTED: &str = sandbox_reasons::REJECTED;

/// Entry point for the controller: wraps [`apply`] and [`cleanup`] in the
/// finalizer protocol and records metrics.
pub async fn reconcile(c: Arc<AgentComputer>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), &ns);
    let res = finalizer(&api, FINALIZER, c, |ev| async {
        match ev {
            Finalizer::Apply(c) => apply(c, ctx.clone()).await,
            Finalizer::Cleanup(c) => cleanup(c, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    let failed = res.as_ref().err().map(Error::labels).unwrap_or_default();
    ctx.metrics.observe(started.elapsed(), &failed);
    res
}

/// Retry policy after a failed reconcile: back off for a few seconds.
pub fn error_policy(c: Arc<AgentComputer>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(computer = %c.name_any(), namespace = ?c.namespace(), error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A merge patch recorded under the operator's field manager.
fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

pub(crate) async fn apply_obj<K>(api: &Api<K>, name: &str, obj: &K) -> Result<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let mut v = serde_json::to_value(obj)?;
    v["apiVersion"] = K::api_version(&Default::default()).into();
    v["kind"] = K::kind(&Default::default()).into();
    Ok(api.patch(name, &ssa(), &Patch::Apply(v)).await?)
}

async fn delete_ignoring_absent<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn publish(
    ctx: &Context,
    c: &AgentComputer,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = KubeEvent {
        type_,
        // events.k8s.io/v1 limits: reason 128 characters, note 1 KiB.
        reason: truncate(reason, 128),
        note: Some(truncate(&note, 1024)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &c.object_ref(&())).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "could not publish event");
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Reasons the kubelet alternates between for one cause (an image that
/// cannot be pulled), published as one Warning.
fn same_trouble(a: &str, b: &str) -> bool {
    const PULL: [&str; 2] = ["ErrImagePull", "ImagePullBackOff"];
    a == b || (PULL.contains(&a) && PULL.contains(&b))
}

/// Reconciles a live computer (see the module docs). A failure is shown in
/// status (`Reconciled=False`, see [`crate::reconciled`]) before it is
/// returned to the controller, which retries it.
pub async fn apply(c: Arc<AgentComputer>, ctx: Arc<Context>) -> Result<Action> {
    match apply_steps(&c, &ctx).await {
        Ok(reported) => reported,
        Err(e) => Err(reconciled::report_abort(&ctx, &c, e).await),
    }
}

/// The steps of [`apply`]. The outer error is a reconcile that ended
/// before writing status (placement, or the status write); the inner one
/// lists the steps that failed, already shown in the status written.
async fn apply_steps(c: &Arc<AgentComputer>, ctx: &Arc<Context>) -> Result<Result<Action>> {
    let c = c.clone();
    let ctx = ctx.clone();
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))
        .in_step(Step::Placement)?;
    if c.uid().is_none() {
        return Err(Error::MissingField("metadata.uid")).in_step(Step::Placement);
    }
    let client = &ctx.client;
    let old = c.status.clone().unwrap_or_default();
    let agents = ctx.ready_agents();
    let now = Timestamp::now();

    // A spec the node agent would refuse: a computer never placed is not
    // placed, so that no node agent sees it; a placed one gets the
    // narrowest sandbox policy at the egress step.
    let spec_error = spec_check::check(&c.spec).err();
    if let Some(why) = &spec_error
        && old.node.is_none()
        && !c.labels().contains_key(labels::NODE)
    {
        return Err(Error::InvalidSpec(why.clone())).in_step(Step::Spec);
    }

    // 0. A kept claim of this name. Only before the computer is placed: once
    // it is, the claim is its own.
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv_name = resources::pv_name(&c);
    if old.node.is_none()
        && let Some(why) = kept_claim(&c, &ns, client, &pv_name)
            .await
            .in_step(Step::Placement)?
    {
        let status = AgentComputerStatus {
            phase: Some(ComputerPhase::Pending),
            conditions: conditions::merge(
                &old.conditions,
                &[
                    (ct::VOLUME_READY, false, KEPT_CLAIM, why.clone()),
                    (
                        ct::READY,
                        false,
                        "VolumeNotReady",
                        "waiting for the claim of an earlier computer to be deleted".into(),
                    ),
                ],
                c.metadata.generation,
                now,
            ),
            observed_generation: c.metadata.generation,
            ..Default::default()
        };
        if !conditions::has_reason(&old.conditions, ct::VOLUME_READY, KEPT_CLAIM) {
            publish(&ctx, &c, EventType::Warning, KEPT_CLAIM, why).await;
        }
        write_status(&ctx, &c, &ns, &old, status)
            .await
            .in_step(Step::Status)?;
        return Ok(Ok(Action::requeue(KEPT_CLAIM_RETRY)));
    }

    // 1. Placement. The PV is authoritative once it exists: its node
    // affinity is immutable, and the cache may not show our last status yet.
    let existing_pv = pvs.get_opt(&pv_name).await.in_step(Step::Placement)?;
    let known = match old.node.clone() {
        Some(n) => Some(n),
        None => existing_pv.as_ref().and_then(pv::node_of),
    };
    let newly_placed = known.is_none();
    // The namespace's storage limit: for a placed computer, how much of a
    // grown quota its volume gets; a new one that does not fit waits here.
    let storage_grant = match ctx.config.namespace_storage_limit {
        None => namespace_storage::Grant::Whole,
        limit => namespace_storage::grant(
            limit,
            &c,
            existing_pv.as_ref(),
            ctx.computers.state().iter().map(|o| o.as_ref()),
        ),
    };
    let node = match known {
        Some(n) => n,
        None if matches!(storage_grant, namespace_storage::Grant::Refused { .. }) => {
            let namespace_storage::Grant::Refused { message, .. } = storage_grant else {
                unreachable!()
            };
            return namespace_storage_wait(&ctx, &c, &ns, &old, message, now)
                .await
                .in_step(Step::Status)
                .map(Ok);
        }
        None => {
            let nodes = ctx.nodes.state();
            let uid = c.uid().unwrap_or_default();
            let size = quantity_bytes(&c.spec.storage.size);
            let chosen = match &size {
                Ok(bytes) => ctx.place(&uid, *bytes, |load, room| {
                    let cands = placement::Candidates {
                        agents: &agents,
                        room,
                        size: *bytes,
                    };
                    placement::choose(&c.spec, nodes.iter().map(|n| n.as_ref()), &cands, load)
                }),
                Err(_) => None,
            };
            match chosen {
                Some(n) => n,
                None => {
                    let (reason, why) = match &size {
                        Ok(bytes) => {
                            let room = ctx.room();
                            let cands = placement::Candidates {
                                agents: &agents,
                                room: &room,
                                size: *bytes,
                            };
                            (
                                NO_ELIGIBLE_NODE,
                                placement::explain(
                                    &c.spec,
                                    nodes.iter().map(|n| n.as_ref()),
                                    &cands,
                                ),
                            )
                        }
                        Err(e) => (INVALID_SIZE, format!("spec.storage.size: {e}")),
                    };
                    let status = AgentComputerStatus {
                        phase: Some(ComputerPhase::Pending),
                        conditions: conditions::merge(
                            &old.conditions,
                            &[
                                (ct::PLACED, false, reason, why.clone()),
                                (
                                    ct::READY,
                                    false,
                                    "NotPlaced",
                                    format!(
                                        "waiting for a node with a ready node agent and room for {}",
                                        c.spec.storage.size.0
                                    ),
                                ),
                            ],
                            c.metadata.generation,
                            now,
                        ),
                        observed_generation: c.metadata.generation,
                        ..Default::default()
                    };
                    if !conditions::has_reason(&old.conditions, ct::PLACED, reason) {
                        publish(&ctx, &c, EventType::Warning, reason, why).await;
                    }
                    write_status(&ctx, &c, &ns, &old, status)
                        .await
                        .in_step(Step::Status)?;
                    return Ok(Ok(Action::requeue(PENDING_RETRY)));
                }
            }
        }
    };
    let node_obj: Option<Arc<Node>> = ctx.nodes.get(&ObjectRef::new(&node));
    let hostname = placement::hostname_label(node_obj.as_deref(), &node);
    let agent = agents.get(&node).cloned();
    // Steps that failed; the independent steps after them still run.
    let mut failures: Vec<StepFailure> = Vec::new();
    let mut failed = |step: Step, error: Error| failures.push(StepFailure { step, error });

    // 2. Credential.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret_name = resources::secret_name(&c);
    let credential =
        match reconcile_credential(&c, &secrets, &secret_name, ctx.config.agent_tls.as_ref()).await
        {
            Ok(cred) => Some(cred),
            Err(e) => {
                failed(Step::Credential, e);
                None
            }
        };
    // A Secret that could not be read keeps the hash the node agent checks.
    let credential_hash = match &credential {
        Some(cred) => cred.as_ref().ok().map(|t| secret::credential_hash(t)),
        None => old.credential_hash.clone(),
    };

    // 3. Volume: the claim, then the PV, at the size the namespace's limit
    // grants (a refused growth keeps the volume's capacity).
    let granted = match &storage_grant {
        namespace_storage::Grant::Refused { held, .. } => {
            Arc::new(namespace_storage::with_size(&c, held))
        }
        namespace_storage::Grant::Whole => c.clone(),
    };
    let pvc_name = resources::pvc_name(&c);
    let volume = match volume_step::reconcile_volume(
        client,
        &granted,
        &node,
        node_obj.as_deref(),
        &hostname,
        existing_pv.as_ref(),
        &ctx.config.storage_class,
    )
    .await
    {
        Ok(v) => Some(v),
        Err(e) => {
            failed(Step::Volume, e);
            None
        }
    };
    // A computer is placed once it has a volume: one whose first claim was
    // refused takes no room on the node it was going to (not labelled for
    // its node agent, its reservation released) and is placed again later.
    let placed = !newly_placed || existing_pv.is_some() || volume.is_some();
    if placed {
        // The node agent finds the computers of its node by this label.
        // Kept whatever the cache says of the status: the node never changes.
        if c.labels().get(labels::NODE) != Some(&node) {
            let label = serde_json::json!({"metadata": {"labels": {labels::NODE: node}}});
            if let Err(e) = Api::<AgentComputer>::namespaced(client.clone(), &ns)
                .patch(&c.name_any(), &merge_params(), &Patch::Merge(&label))
                .await
            {
                failed(Step::Placement, e.into());
            }
        }
    } else {
        ctx.forget(&c.uid().unwrap_or_default());
    }

    // 4. Egress policy: applied whatever happened to the steps before.
    let nps: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    let policy = match &spec_error {
        None => netpol::build(&c, &ctx.config),
        Some(_) => {
            let mut narrowest = (*c).clone();
            narrowest.spec.egress = Default::default();
            netpol::build(&narrowest, &ctx.config)
        }
    };
    let egress_ok = match apply_obj(&nps, &resources::netpol_name(&c), &policy).await {
        Err(e) => {
            failed(Step::Egress, e);
            false
        }
        Ok(_) => match &spec_error {
            Some(why) => {
                failed(Step::Egress, Error::InvalidSpec(why.clone()));
                false
            }
            None => true,
        },
    };

    // 5. Sandbox: its pod needs the credential, the claim, and the egress
    // policy that confines it; without them a live pod is left as it is.
    let sandbox_wanted = c.spec.runtimes.container && c.spec.sandbox.is_some();
    let mut sandbox = None;
    let mut requeue_idle = None;
    if credential.is_some() && volume.is_some() && egress_ok && placed {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod_name = resources::pod_name(&c);
        let done: Result<(Option<SandboxState>, Option<Duration>)> = async {
            // Where the sandbox's runner and proxy settings point: the
            // node-local Service when there is one (stable across agent
            // pods), else the pod.
            let agent_address = match ctx.agent_service_ip().await? {
                Some(ip) => Some(ip),
                None => agent.as_ref().and_then(|a| a.ip.clone()),
            };
            let (mut st, idle) = reconcile_sandbox(
                &c,
                &pods,
                &pod_name,
                agent_address.as_deref(),
                ctx.config.runner_image.as_deref(),
                ctx.config.agent_tls.as_ref(),
                credential_hash.as_deref(),
                now,
            )
            .await?;
            if let Some(st) = st.as_mut() {
                let computers: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), &ns);
                keep_lost_reason(&computers, &c, st).await?;
            }
            Ok((st, idle))
        }
        .await;
        match done {
            Ok((st, idle)) => {
                sandbox = st;
                requeue_idle = idle;
            }
            Err(e) => failed(Step::Sandbox, e),
        }
    }
    if sandbox.is_none() && sandbox_wanted && !failures.is_empty() {
        sandbox = Some(SandboxState {
            ready: false,
            running: old.sandbox_pod.is_some(),
            reason: reconciled::RECONCILE_FAILED.into(),
            message: format!(
                "the sandbox pod was not reconciled: {}",
                steps::describe_all(&failures)
            ),
        });
    }
    let failed_of = |step: Step| failures.iter().find(|f| f.step == step);
    // Failures the computer's service depends on (all but the sandbox's).
    let blocking: Vec<&StepFailure> = failures
        .iter()
        .filter(|f| f.step != Step::Sandbox)
        .collect();

    // 6. Status.
    let pv_deleting = volume.as_ref().is_some_and(|v| v.pv_deleting);
    let credential_ok = !matches!(credential, Some(Err(_)));
    let node_alive = node_obj.is_some();
    let serving = agent.is_some() && node_alive;
    let phase = if !placed {
        ComputerPhase::Pending
    } else if serving && credential_ok && !pv_deleting && blocking.is_empty() {
        ComputerPhase::Ready
    } else {
        ComputerPhase::Unavailable
    };
    let endpoint = agent
        .as_ref()
        .and_then(|a| a.ip.as_ref())
        .filter(|_| placed)
        .map(|ip| endpoint_of(ip));
    let blocking_why = blocking
        .iter()
        .map(|f| f.describe())
        .collect::<Vec<_>>()
        .join("; ");
    let (ready_reason, ready_msg) = match (&agent, node_alive) {
        _ if !blocking.is_empty() => (reconciled::RECONCILE_FAILED, blocking_why),
        (Some(_), true) if pv_deleting => (
            VOLUME_DELETING,
            format!("volume {pv_name} is being deleted"),
        ),
        (Some(_), true) if !credential_ok => (
            CREDENTIAL_INVALID,
            "no usable credential: every request is refused (see CredentialReady)".to_string(),
        ),
        (Some(a), true) => (
            "NodeAgentReady",
            format!("served by node agent {} on {node}", a.pod),
        ),
        (_, false) => (
            "NodeGone",
            format!("node {node} no longer exists; the volume stays pinned to it"),
        ),
        (None, true) => (
            "NodeAgentNotReady",
            format!("no ready node agent on {node}"),
        ),
    };
    let step_condition =
        |step: Step, type_: &'static str, ok: (&'static str, String)| match failed_of(step) {
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
                reconciled::RECONCILE_FAILED.to_string(),
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
                    volume
                        .as_ref()
                        .map_or("Pending", |v| v.claim_phase.as_str())
                ),
            ),
        },
        match (&credential, failed_of(Step::Credential)) {
            (_, Some(f)) => (ct::CREDENTIAL_READY, false, f.reason(), f.describe()),
            (Some(Err(why)), None) => (
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
                format!("network policy {}", resources::netpol_name(&c)),
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
        ready_msg.clone(),
    ));
    if ctx.config.namespace_storage_limit.is_some() {
        next.push(namespace_storage_condition(&ctx, &c, &old, &storage_grant).await);
    }
    let (rec_ok, rec_reason, rec_msg) = reconciled::condition(&failures, c.metadata.generation);
    next.push((ct::RECONCILED, rec_ok, rec_reason.clone(), rec_msg.clone()));
    let next: Vec<(&str, bool, &str, String)> = next
        .iter()
        .map(|(t, ok, r, m)| (*t, *ok, r.as_str(), m.clone()))
        .collect();
    let sandbox_pod = match &sandbox {
        Some(s) if s.reason == reconciled::RECONCILE_FAILED => old.sandbox_pod.clone(),
        Some(s) => s.running.then(|| resources::pod_name(&c)),
        None => None,
    };
    let status = AgentComputerStatus {
        phase: Some(phase),
        node: placed.then(|| node.clone()),
        volume: match &volume {
            Some(v) => Some(VolumeStatus {
                claim_name: Some(pvc_name),
                volume_name: Some(pv_name),
                capacity: Some(granted.spec.storage.size.clone()),
                claim_phase: Some(v.claim_phase.clone()),
                bytes_used: None,
                inodes_used: None,
                disk_bytes: None,
            }),
            None => old.volume.clone(),
        },
        endpoint,
        credential_secret: Some(secret_name.clone()),
        credential_hash: credential_hash.clone(),
        sandbox_pod,
        conditions: conditions::merge(&old.conditions, &next, c.metadata.generation, now),
        observed_generation: reconciled::observed_generation(
            &old,
            c.metadata.generation,
            !failures.is_empty(),
        ),
    };
    if newly_placed && placed {
        publish(
            &ctx,
            &c,
            EventType::Normal,
            "Placed",
            format!("placed on node {node}"),
        )
        .await;
    }
    // A sandbox that cannot run (refused by the API server, or held by the
    // kubelet: image pull, config, crash loop) is a Warning on the
    // computer, once per reason. One left alone by a failed step is told
    // by the Reconciled event.
    if let Some(s) = sandbox.as_ref().filter(|s| {
        !s.ready
            && !sandbox_reasons::is_progress(&s.reason)
            && s.reason != reconciled::RECONCILE_FAILED
    }) {
        let before = old
            .conditions
            .iter()
            .find(|c| c.type_ == ct::SANDBOX_READY)
            .map(|c| c.reason.as_str())
            .unwrap_or_default();
        if !same_trouble(before, &s.reason) {
            publish(&ctx, &c, EventType::Warning, &s.reason, s.message.clone()).await;
        }
    }
    match (was_serving(&old), serving && placed) {
        (Some(true), false) => {
            publish(&ctx, &c, EventType::Warning, "NodeAgentLost", ready_msg).await
        }
        (Some(false), true) => {
            publish(
                &ctx,
                &c,
                EventType::Normal,
                "NodeAgentRecovered",
                format!("served by node agent on {node}"),
            )
            .await
        }
        _ => {}
    }
    match (&credential, &old.credential_hash, &credential_hash) {
        (Some(Err(why)), _, _)
            if !conditions::has_reason(&old.conditions, ct::CREDENTIAL_READY, INVALID_TOKEN) =>
        {
            publish(
                &ctx,
                &c,
                EventType::Warning,
                CREDENTIAL_INVALID,
                why.clone(),
            )
            .await
        }
        (Some(Ok(_)), Some(before), Some(after)) if before != after => {
            publish(
                &ctx,
                &c,
                EventType::Normal,
                "CredentialRotated",
                format!("the token of secret {secret_name} changed; the previous one is refused"),
            )
            .await
        }
        _ => {}
    }
    reconciled::announce(&ctx, &c, &old.conditions, (rec_ok, &rec_reason, &rec_msg)).await;
    if let Err(e) = write_status(&ctx, &c, &ns, &old, status).await {
        failures.push(StepFailure {
            step: Step::Status,
            error: e,
        });
    }
    if !failures.is_empty() {
        return Ok(Err(Error::Steps(failures)));
    }

    let base = if phase == ComputerPhase::Ready && !pv_deleting {
        Duration::from_secs(ctx.config.resync_seconds)
    } else {
        UNAVAILABLE_RETRY
    };
    Ok(Ok(Action::requeue(
        requeue_idle.map_or(base, |d| d.min(base)),
    )))
}

/// Whether the node agent served the computer at the last status: None
/// before placement, else false when Ready was False for the node or agent.
fn was_serving(old: &AgentComputerStatus) -> Option<bool> {
    match old.phase? {
        ComputerPhase::Ready => Some(true),
        ComputerPhase::Unavailable => Some(
            !conditions::has_reason(&old.conditions, ct::READY, "NodeAgentNotReady")
                && !conditions::has_reason(&old.conditions, ct::READY, "NodeGone"),
        ),
        _ => None,
    }
}

/// Makes sure the credential Secret exists and returns its token, or why the
/// token in it is unusable.
///
/// - No Secret (first reconcile, or deleted: a rotation): created with a new
///   random token. A create, not an apply, so that a Secret someone else
///   creates meanwhile is never overwritten (the 409 is retried).
/// - A Secret with a well-formed token, ours or written by the user (a
///   rotation): the token is kept; labels and owner are applied with the
///   resourceVersion read as precondition, so an edit made between the read
///   and the apply fails it (409, retried) instead of being undone.
/// - A token that is not 64 hex characters: nothing is written (the user's
///   value is not lost) and the message says what to do.
async fn reconcile_credential(
    c: &AgentComputer,
    secrets: &Api<Secret>,
    name: &str,
    tls: Option<&crate::context::AgentTls>,
) -> Result<std::result::Result<String, String>> {
    match secrets.get_opt(name).await? {
        None => {
            let token = secret::new_token();
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            secrets.create(&pp, &secret::build(c, &token, tls)).await?;
            Ok(Ok(token))
        }
        Some(existing) => match secret::read_token(&existing) {
            Ok(token) => {
                let mut desired = secret::build(c, &token, tls);
                desired.metadata.resource_version = existing.metadata.resource_version.clone();
                apply_obj(secrets, name, &desired).await?;
                Ok(Ok(token))
            }
            Err(why) => Ok(Err(why)),
        },
    }
}

fn endpoint_of(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{NODE_AGENT_GRPC_PORT}")
    } else {
        format!("{ip}:{NODE_AGENT_GRPC_PORT}")
    }
}

/// Why this computer cannot use the claim of its name, if one exists that
/// it does not own: kept by an earlier computer of the same name under
/// reclaim policy Retain (or made by someone else). Such a claim is bound
/// to another volume, and `spec.volumeName` of a claim cannot change.
async fn kept_claim(
    c: &AgentComputer,
    ns: &str,
    client: &kube::Client,
    pv_name: &str,
) -> Result<Option<String>> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let name = resources::pvc_name(c);
    let Some(claim) = pvcs.get_opt(&name).await? else {
        return Ok(None);
    };
    let uid = c.uid().unwrap_or_default();
    if claim.owner_references().iter().any(|o| o.uid == uid) {
        return Ok(None);
    }
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if volume == pv_name {
        return Ok(None);
    }
    let deleting = if claim.metadata.deletion_timestamp.is_some() {
        " It is being deleted; this computer starts once it is gone."
    } else {
        ""
    };
    Ok(Some(format!(
        "claim {name} already exists and is bound to volume {volume}, not this computer's: \
         it was kept (reclaimPolicy Retain) by an earlier computer named {}, and a \
         claim cannot move to another volume. Delete the claim to start with an empty \
         volume; the kept volume {volume} stays until deleted.{deleting}",
        c.name_any()
    )))
}

/// A starting sandbox pod that replaces one whose workspace mount was lost
/// keeps reason [`sandbox_reasons::WORKSPACE_LOST`] until it is ready. The
/// memory is the computer's own `SandboxReady` condition, read from the API
/// server when the cached object lacks it: the reconcile right after the
/// deletion may run on a cached object that does not have that status yet.
async fn keep_lost_reason(
    api: &Api<AgentComputer>,
    c: &AgentComputer,
    st: &mut SandboxState,
) -> Result<()> {
    if st.ready || st.reason != sandbox_reasons::STARTING {
        return Ok(());
    }
    let was_lost = |c: &AgentComputer| {
        c.status.as_ref().is_some_and(|s| {
            conditions::has_reason(
                &s.conditions,
                ct::SANDBOX_READY,
                sandbox_reasons::WORKSPACE_LOST,
            )
        })
    };
    if !was_lost(c) && !was_lost(&api.get(&c.name_any()).await?) {
        return Ok(());
    }
    st.reason = sandbox_reasons::WORKSPACE_LOST.into();
    st.message = format!(
        "{}; it replaces a pod whose workspace mount was lost",
        st.message
    );
    Ok(())
}

struct SandboxState {
    ready: bool,
    running: bool,
    /// One of [`sandbox_reasons`], or the kubelet's reason for a pod that
    /// cannot run.
    reason: String,
    message: String,
}

/// Creates, keeps, replaces or removes the sandbox pod. Returns its state
/// (None when the container runtime is off) and, when an idle timeout is
/// running, the time until it fires.
async fn reconcile_sandbox(
    c: &AgentComputer,
    pods: &Api<Pod>,
    name: &str,
    agent_address: Option<&str>,
    runner_image: Option<&str>,
    agent_tls: Option<&crate::context::AgentTls>,
    credential_hash: Option<&str>,
    now: Timestamp,
) -> Result<(Option<SandboxState>, Option<Duration>)> {
    let Some(sandbox) = c
        .spec
        .sandbox
        .as_ref()
        .filter(|_| c.spec.runtimes.container)
    else {
        delete_ignoring_absent(pods, name).await?;
        return Ok((None, None));
    };
    let idle_left = idle_remaining(c, sandbox.idle_timeout_seconds, now);
    if idle_left == Some(Duration::ZERO) {
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::IDLE.into(),
            message: format!(
                "stopped after {}s without activity",
                sandbox.idle_timeout_seconds
            ),
        };
        return Ok((Some(st), None));
    }
    let mut desired = pod::build(
        c,
        sandbox,
        agent_address,
        credential_hash,
        runner_image.map(|image| pod::Runner {
            image,
            credential_hash,
            tls: agent_tls,
        }),
    );
    // A new product version (runner image) alone never replaces or
    // restarts a live sandbox: the pod keeps the runner it runs, and the
    // newer one comes with the next pod (pod::keep_runner).
    let mut pending_runner = None;
    let existing = pods.get_opt(name).await?;
    // A pod whose workspace mount ended for good (its node agent did not
    // come back in time) cannot get it back in place: its containers bind
    // the dead mount. Replace it.
    if let Some(why) = existing.as_ref().and_then(pod::workspace_lost) {
        tracing::warn!(
            pod = name,
            why,
            "the sandbox's workspace mount is lost; replacing the pod"
        );
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::WORKSPACE_LOST.into(),
            message: format!("pod {name}: {why}; the pod is being replaced"),
        };
        return Ok((Some(st), Some(Duration::from_secs(2))));
    }
    if let Some(existing) = existing {
        if let Some(newer) = pod::keep_runner(&mut desired, &existing) {
            // Unless the node agent refuses the runner the pod carries: no
            // exec can reach that pod (its runner is not attached, and the
            // runs of its last stream were killed when the stream ended),
            // so it is idle, and only a pod with the newer runner serves.
            if let Some(why) = pod::runner_refused(&existing) {
                let kept = pod::runner_image(&existing).unwrap_or_default();
                tracing::info!(
                    pod = name,
                    kept,
                    newer,
                    why,
                    "the node agent refuses the sandbox's runner; replacing the pod"
                );
                delete_ignoring_absent(pods, name).await?;
                let st = SandboxState {
                    ready: false,
                    running: false,
                    reason: sandbox_reasons::REPLACING.into(),
                    message: format!(
                        "the node agent refuses the runner of pod {name} ({kept}: {why}); \
                         the pod is being replaced with runner {newer}"
                    ),
                };
                return Ok((Some(st), Some(Duration::from_secs(2))));
            }
            pending_runner = Some(newer);
        }
    }
    let applied = match apply_obj(pods, name, &desired).await {
        Ok(p) => p,
        // Most of a pod's spec is immutable: replace the pod when it changed.
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 422 => {
            tracing::info!(pod = name, "sandbox spec changed; replacing the pod");
            delete_ignoring_absent(pods, name).await?;
            let st = SandboxState {
                ready: false,
                running: false,
                reason: sandbox_reasons::REPLACING.into(),
                message: "sandbox spec changed; the pod is being replaced".into(),
            };
            return Ok((Some(st), Some(Duration::from_secs(2))));
        }
        // Admission refused the pod (quota, Pod Security, a webhook, a
        // missing service account): report it on the computer rather than
        // fail the whole reconcile, so the volume, endpoint and in-process
        // runtimes stay usable and the user sees why there is no sandbox.
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 403 || s.code == 400 => {
            let st = SandboxState {
                ready: false,
                running: false,
                reason: SANDBOX_REJECTED.into(),
                message: format!("the API server refused pod {name}: {}", s.message),
            };
            return Ok((Some(st), Some(SANDBOX_REJECTED_RETRY)));
        }
        Err(e) => return Err(e),
    };
    let ready = placement::pod_ready(&applied);
    let phase = applied
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    // A pod that ended (evicted, or its runner gone for good) never runs
    // again under restartPolicy Always: replace it.
    if matches!(phase.as_str(), "Failed" | "Succeeded") {
        let why = applied
            .status
            .as_ref()
            .and_then(|s| s.message.clone().or_else(|| s.reason.clone()))
            .unwrap_or_default();
        tracing::info!(pod = name, phase, why, "sandbox pod ended; replacing it");
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::ENDED.into(),
            message: format!("pod {name} ended ({phase}: {why}); it is being replaced"),
        };
        return Ok((Some(st), Some(Duration::from_secs(2))));
    }
    let (reason, mut message) = if ready {
        (
            sandbox_reasons::RUNNING.to_string(),
            format!("pod {name} is {phase}"),
        )
    } else if let Some(why) = pod::runner_refused(&applied) {
        (
            sandbox_reasons::RUNNER_INCOMPATIBLE.to_string(),
            format!(
                "the node agent refuses the runner of pod {name} ({}): {why}; the kubelet \
                 restarts it until a node agent that serves it runs on the node",
                pod::runner_image(&applied).unwrap_or_default()
            ),
        )
    } else if let Some(trouble) = placement::pod_trouble(&applied) {
        (trouble.reason, format!("pod {name}: {}", trouble.message))
    } else {
        (
            sandbox_reasons::STARTING.to_string(),
            format!("pod {name} is {phase}"),
        )
    };
    if let (Some(newer), Some(kept)) = (&pending_runner, pod::runner_image(&applied)) {
        message.push_str(&format!(
            "; runner {kept} kept, {newer} pending until the pod is next created"
        ));
    }
    let st = SandboxState {
        ready,
        running: true,
        reason,
        message,
    };
    Ok((Some(st), idle_left))
}

/// Time left before the sandbox counts as idle: None without a timeout or
/// without recorded activity, zero once expired.
fn idle_remaining(c: &AgentComputer, timeout_secs: i64, now: Timestamp) -> Option<Duration> {
    if timeout_secs <= 0 {
        return None;
    }
    let last: Timestamp = c.annotations().get(labels::LAST_ACTIVITY)?.parse().ok()?;
    let idle = now.duration_since(last).as_secs().max(0) as u64;
    Some(Duration::from_secs(
        (timeout_secs as u64).saturating_sub(idle),
    ))
}

/// A new computer the namespace's storage limit has no room for: Pending,
/// `Placed=False` with the limit's reason and message (a Warning event the
/// first time), retried like a computer waiting for a node.
async fn namespace_storage_wait(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    why: String,
    now: Timestamp,
) -> Result<Action> {
    let reason = namespace_storage::NAMESPACE_STORAGE_LIMIT;
    let status = AgentComputerStatus {
        phase: Some(ComputerPhase::Pending),
        conditions: conditions::merge(
            &old.conditions,
            &[
                (ct::PLACED, false, reason, why.clone()),
                (
                    ct::READY,
                    false,
                    "NotPlaced",
                    format!(
                        "waiting for room in the namespace's storage limit for {}",
                        c.spec.storage.size.0
                    ),
                ),
            ],
            c.metadata.generation,
            now,
        ),
        observed_generation: c.metadata.generation,
        ..Default::default()
    };
    if !conditions::has_reason(&old.conditions, ct::PLACED, reason) {
        publish(ctx, c, EventType::Warning, reason, why).await;
    }
    write_status(ctx, c, ns, old, status).await?;
    Ok(Action::requeue(PENDING_RETRY))
}

/// `StorageGranted` of a placed computer under a namespace storage limit
/// (a Warning event when a growth is first refused).
async fn namespace_storage_condition(
    ctx: &Context,
    c: &AgentComputer,
    old: &AgentComputerStatus,
    grant: &namespace_storage::Grant,
) -> (&'static str, bool, String, String) {
    let reason = namespace_storage::NAMESPACE_STORAGE_LIMIT;
    match grant {
        namespace_storage::Grant::Whole => (
            namespace_storage::STORAGE_GRANTED,
            true,
            namespace_storage::WITHIN_LIMIT.to_string(),
            format!("the volume has the whole quota, {}", c.spec.storage.size.0),
        ),
        namespace_storage::Grant::Refused { message, .. } => {
            if !conditions::has_reason(&old.conditions, namespace_storage::STORAGE_GRANTED, reason)
            {
                publish(ctx, c, EventType::Warning, reason, message.clone()).await;
            }
            (
                namespace_storage::STORAGE_GRANTED,
                false,
                reason.to_string(),
                format!("the volume keeps its capacity: {message}"),
            )
        }
    }
}

/// Writes status by server-side apply to the status subresource, unless it
/// equals the current one.
pub(crate) async fn write_status(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    mut status: AgentComputerStatus,
) -> Result<()> {
    // Fields the node agent owns are carried over for the comparison only.
    if let (Some(v), Some(o)) = (status.volume.as_mut(), old.volume.as_ref()) {
        v.bytes_used = o.bytes_used;
        v.inodes_used = o.inodes_used;
        v.disk_bytes = o.disk_bytes;
    }
    if &status == old {
        return Ok(());
    }
    if let Some(v) = status.volume.as_mut() {
        v.bytes_used = None;
        v.inodes_used = None;
        v.disk_bytes = None;
    }
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
    let body = serde_json::json!({
        "apiVersion": AgentComputer::api_version(&()),
        "kind": AgentComputer::kind(&()),
        "status": status,
    });
    api.patch_status(&c.name_any(), &ssa(), &Patch::Apply(body))
        .await?;
    Ok(())
}

/// Releases a deleted computer's objects per its reclaim policy.
pub async fn cleanup(c: Arc<AgentComputer>, ctx: Arc<Context>) -> Result<Action> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let client = &ctx.client;
    ctx.forget(&c.uid().unwrap_or_default());
    let old = c.status.clone().unwrap_or_default();
    if old.phase != Some(ComputerPhase::Terminating) {
        let mut status = old.clone();
        status.phase = Some(ComputerPhase::Terminating);
        // Best effort: the object may already be on its way out.
        if let Err(e) = write_status(&ctx, &c, &ns, &old, status).await {
            tracing::debug!(error = %e, "could not mark computer Terminating");
        }
    }
    delete_ignoring_absent(
        &Api::<Pod>::namespaced(client.clone(), &ns),
        &resources::pod_name(&c),
    )
    .await?;
    delete_ignoring_absent(
        &Api::<NetworkPolicy>::namespaced(client.clone(), &ns),
        &resources::netpol_name(&c),
    )
    .await?;
    delete_ignoring_absent(
        &Api::<Secret>::namespaced(client.clone(), &ns),
        &resources::secret_name(&c),
    )
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let (pvc_name, pv_name) = (resources::pvc_name(&c), resources::pv_name(&c));
    match c.spec.storage.reclaim_policy {
        ReclaimPolicy::Delete => {
            delete_ignoring_absent(&pvcs, &pvc_name).await?;
            // The node agent deletes the database of a deleted PV only with
            // this annotation; it must be there before the deletion is.
            let mark =
                serde_json::json!({"metadata": {"annotations": {labels::DELETE_DATA: "true"}}});
            let marked = match pvs
                .patch(&pv_name, &merge_params(), &Patch::Merge(&mark))
                .await
            {
                Ok(_) => true,
                Err(e) if is_not_found(&e) => false,
                Err(e) => return Err(e.into()),
            };
            if marked {
                delete_ignoring_absent(&pvs, &pv_name).await?;
            }
            let node = old.node.as_deref().unwrap_or("its node");
            publish(
                &ctx,
                &c,
                EventType::Normal,
                "VolumeDeleted",
                format!(
                    "deleted claim {pvc_name} and volume {pv_name}; the volume is gone once \
                     the node agent on {node} has deleted its data"
                ),
            )
            .await;
        }
        ReclaimPolicy::Retain => {
            // Orphan the claim so garbage collection keeps it, and note where
            // the retained volume came from.
            let orphan = serde_json::json!({"metadata": {"ownerReferences": null}});
            match pvcs
                .patch(&pvc_name, &PatchParams::default(), &Patch::Merge(&orphan))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            let note = serde_json::json!({"metadata": {"annotations": {
                "agentcomputer.dev/retained-from": format!("{ns}/{}", c.name_any())
            }}});
            match pvs
                .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&note))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            publish(
                &ctx,
                &c,
                EventType::Normal,
                "VolumeRetained",
                format!("kept claim {pvc_name} and volume {pv_name}"),
            )
            .await;
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_bracket_ipv6() {
        assert_eq!(endpoint_of("10.1.2.3"), "10.1.2.3:7433");
        assert_eq!(endpoint_of("fd00::7"), "[fd00::7]:7433");
    }
}
