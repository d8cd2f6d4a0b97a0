//! The reconciler of AgentComputer: the finalizer protocol, and [`apply`],
//! which runs the steps of a live computer in order ([`crate::steps`], one
//! module each):
//!
//! 0. [`claim`]: a claim of the computer's name left by an earlier
//!    computer (reclaim policy Retain) is reported and the computer waits,
//!    Pending: a claim stays bound to its volume, so it cannot serve the
//!    new computer;
//! 1. [`place`]: keep `status.node` (or the PV's node), or choose a node
//!    with room ([`crate::placement`]); with none eligible the computer
//!    stays Pending and is retried; once placed the computer is labelled
//!    `agentcomputer.dev/node`; then [`relocation`]: a computer whose node
//!    is cordoned or lost, or that was asked to move, moves to another
//!    node through the backup store (docs/moves.md); once the source has
//!    handed it over, the target becomes its node for the steps after;
//! 2. [`credential`]: the Secret (created once with a random token; a token
//!    the user writes is kept), whose SHA-256 becomes
//!    `status.credentialHash`;
//! 3. [`volume`]: PersistentVolumeClaim and PersistentVolume (with the node
//!    agent's finalizer), pre-bound to each other;
//! 4. [`egress`]: the NetworkPolicy from `spec.egress`;
//! 5. [`sandbox`]: the Pod when `runtimes.container` is on and not idle,
//!    else none;
//! 6. the status, derived from what the steps found by the pure
//!    [`crate::status::derive`]; its transitions published as Events
//!    ([`events`]), then written only when it changed ([`status`]).
//!
//! Deletion runs [`cleanup`] through the finalizer `agentcomputer.dev/volume`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_crds::{AgentComputer, AgentComputerStatus, ComputerPhase, labels};
use k8s_openapi::api::core::v1::{PersistentVolume, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::status::{Applied, Observed, Stage};
use crate::steps::place::Placement;
use crate::steps::{
    InStep, Step, StepFailure, claim, cleanup, credential, egress, events, place, relocation,
    sandbox, source, status, volume,
};
use crate::{FINALIZER, namespace_storage, placement, resources, spec_check};

/// How often a computer waiting for a node is retried.
pub const PENDING_RETRY: Duration = Duration::from_secs(30);
/// How often a computer whose node agent is gone is rechecked.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);
/// How often a computer blocked by a kept claim checks whether it is gone.
pub const KEPT_CLAIM_RETRY: Duration = Duration::from_secs(10);

/// Entry point for the controller: wraps [`apply`] and
/// [`cleanup::cleanup`] in the finalizer protocol and records metrics.
pub async fn reconcile(c: Arc<AgentComputer>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), &ns);
    let res = finalizer(&api, FINALIZER, c, |ev| async {
        match ev {
            Finalizer::Apply(c) => apply(c, ctx.clone()).await,
            Finalizer::Cleanup(c) => cleanup::cleanup(&c, &ctx).await,
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

/// Reconciles a live computer (see the module docs). A failure is shown in
/// status (`Reconciled=False`, see [`crate::reconciled`]) before it is
/// returned to the controller, which retries it.
pub async fn apply(c: Arc<AgentComputer>, ctx: Arc<Context>) -> Result<Action> {
    match apply_steps(&c, &ctx).await {
        Ok(reported) => reported,
        Err(e) => Err(report_abort(&ctx, &c, e).await),
    }
}

/// The steps of [`apply`]. The outer error is a reconcile that ended
/// before writing status (placement, or the status write of an early
/// return); the inner one lists the steps that failed, already shown in
/// the status written.
async fn apply_steps(c: &AgentComputer, ctx: &Context) -> Result<Result<Action>> {
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
    let pv_name = resources::pv_name(c);
    if old.node.is_none()
        && let Some(why) = claim::kept_claim(c, &ns, client, &pv_name)
            .await
            .in_step(Step::Placement)?
    {
        let stage = Stage::KeptClaim(why);
        return finish_early(ctx, c, &ns, &old, stage, now, KEPT_CLAIM_RETRY).await;
    }

    // 1. Placement. The PV is authoritative once it exists: its node
    // affinity is immutable, and the cache may not show our last status yet.
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let existing_pv = pvs.get_opt(&pv_name).await.in_step(Step::Placement)?;
    // The namespace's storage limit: for a placed computer, how much of a
    // grown quota its volume gets; a new one that does not fit waits here.
    let storage_grant = ctx.config.namespace_storage_limit.map(|limit| {
        namespace_storage::grant(
            Some(limit),
            c,
            existing_pv.as_ref(),
            ctx.computers.state().iter().map(|o| o.as_ref()),
        )
    });
    let known = old.node.is_some()
        || existing_pv
            .as_ref()
            .and_then(resources::pv::node_of)
            .is_some();
    if !known && let Some(namespace_storage::Grant::Refused { message, .. }) = &storage_grant {
        let stage = Stage::Unplaced {
            reason: namespace_storage::NAMESPACE_STORAGE_LIMIT,
            why: message.clone(),
        };
        return finish_early(ctx, c, &ns, &old, stage, now, PENDING_RETRY).await;
    }
    // 1a. A computer made from a source waits for it, and without a
    // backup store goes only to the source's node.
    let prepared = match known {
        true => source::Prepared::Ready { only: None },
        false => source::prepare(ctx, c, &ns)
            .await
            .in_step(Step::Placement)?,
    };
    let only = match prepared {
        source::Prepared::Ready { only } => only,
        source::Prepared::Wait { reason, why } => {
            let stage = Stage::Unplaced { reason, why };
            return finish_early(ctx, c, &ns, &old, stage, now, PENDING_RETRY).await;
        }
    };
    let candidates = match &only {
        Some(node) => agents
            .iter()
            .filter(|(n, _)| *n == node)
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect(),
        None => agents.clone(),
    };
    let (node, newly_placed) = match place::place(ctx, c, &old, existing_pv.as_ref(), &candidates) {
        Placement::Known(node) => (node, false),
        Placement::Chosen(node) => (node, true),
        Placement::Unplaced { reason, why } => {
            let stage = match &only {
                Some(node) if reason != crate::status::INVALID_SIZE => Stage::Unplaced {
                    reason: agentcomputer_crds::placed_reasons::SOURCE_ON_ANOTHER_NODE,
                    why: source::pinned_elsewhere(node, &why),
                },
                _ => Stage::Unplaced { reason, why },
            };
            return finish_early(ctx, c, &ns, &old, stage, now, PENDING_RETRY).await;
        }
    };
    // 1b. Relocation: only for a computer that holds its node.
    let relocated = if newly_placed {
        relocation::Relocated::default()
    } else {
        relocation::run(ctx, c, &ns, &old, &node, &agents, now)
            .await
            .in_step(Step::Placement)?
    };
    let (node, existing_pv) = match &relocated.node {
        Some(target) => (
            target.clone(),
            // The switch may have deleted a pinned volume.
            pvs.get_opt(&pv_name).await.in_step(Step::Placement)?,
        ),
        None => (node, existing_pv),
    };
    let node_obj = ctx.nodes.get(&ObjectRef::new(&node));
    let hostname = placement::hostname_label(node_obj.as_deref(), &node);
    let agent = agents.get(&node);
    // Steps that failed; the independent steps after them still run.
    let mut failures: Vec<StepFailure> = Vec::new();

    // 2. Credential.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let tls = ctx.config.agent_tls.as_ref();
    let credential = credential::reconcile(c, &secrets, &resources::secret_name(c), tls).await;
    let credential = record(&mut failures, Step::Credential, credential);
    let credential_hash = credential::hash_after(credential.as_ref(), &old);

    // 3. Volume: the claim, then the PV, at the size the namespace's limit
    // grants (a refused growth keeps the volume's capacity).
    let granted = match &storage_grant {
        Some(namespace_storage::Grant::Refused { held, .. }) => {
            Some(namespace_storage::with_size(c, held))
        }
        _ => None,
    };
    let volume = volume::reconcile_volume(
        client,
        granted.as_ref().unwrap_or(c),
        &node,
        existing_pv.as_ref(),
        &ctx.config.storage_class,
    )
    .await;
    let volume = record(&mut failures, Step::Volume, volume);
    // A computer is placed once it has a volume: one whose first claim was
    // refused takes no room on the node it was going to (not labelled for
    // its node agent, its reservation released) and is placed again later.
    let placed = !newly_placed || existing_pv.is_some() || volume.is_some();
    if placed {
        let labelled = place::label(client, c, &ns, &node).await;
        record(&mut failures, Step::Placement, labelled);
    } else {
        ctx.forget(&c.uid().unwrap_or_default());
    }

    // 3b. A fork made: the snapshot it was made from goes (tried again
    // at the next reconcile; the fork itself is fine either way).
    if !newly_placed && let Err(e) = source::release_fork(ctx, c, &ns).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "cannot delete the snapshot the fork was made from yet");
    }

    // 4. Egress policy: applied whatever happened to the steps before.
    let egress = egress::apply(client, &ctx.config, c, &ns, spec_error.as_deref()).await;
    let egress_ok = record(&mut failures, Step::Egress, egress).is_some();

    // 5. Sandbox: its pod needs the credential, the claim, and the egress
    // policy that confines it; without them a live pod is left as it is.
    let (mut sandbox, mut requeue_idle) = (None, None);
    // A volume pinned by node affinity places the pod; any other is
    // placed by the pod's own affinity to the node's hostname.
    let pin_to = match &existing_pv {
        Some(pv) if resources::pv::pinned(pv) && pv.metadata.deletion_timestamp.is_none() => None,
        _ => Some(hostname.as_str()),
    };
    // No pod on a volume being made again (a pinned one after a move).
    let pv_deleting = volume.as_ref().is_some_and(|v| v.pv_deleting);
    if credential.is_some()
        && volume.is_some()
        && egress_ok
        && placed
        && !relocated.hold_sandbox
        && !pv_deleting
    {
        let ran = sandbox::run(ctx, c, &ns, agent, credential_hash.as_deref(), pin_to, now).await;
        if let Some((state, idle)) = record(&mut failures, Step::Sandbox, ran) {
            (sandbox, requeue_idle) = (state, idle);
        }
    }

    // 6. Status and events.
    let observed = Observed {
        computer: c,
        stage: Stage::Applied(Applied {
            node: &node,
            newly_placed,
            placed,
            agent,
            node_exists: node_obj.is_some(),
            credential: credential.as_ref(),
            volume: volume.as_ref(),
            sandbox: sandbox.as_ref(),
            storage: storage_grant.as_ref(),
            failures: &failures,
        }),
    };
    let (mut next, mut transitions) = crate::status::derive(&observed, &old, now);
    relocation::into_status(&relocated, &mut next, &old, c.metadata.generation, now);
    transitions.extend(relocated.events.iter().cloned());
    let ready = next.phase == Some(ComputerPhase::Ready);
    events::publish_all(ctx, c, &transitions).await;
    if let Err(error) = status::write(ctx, c, &ns, &old, next).await {
        failures.push(StepFailure {
            step: Step::Status,
            error,
        });
    }
    if !failures.is_empty() {
        return Ok(Err(Error::Steps(failures)));
    }
    let base = if ready && !pv_deleting {
        Duration::from_secs(ctx.config.resync_seconds)
    } else {
        UNAVAILABLE_RETRY
    };
    let next_look = [requeue_idle, relocated.requeue]
        .into_iter()
        .flatten()
        .fold(base, Duration::min);
    Ok(Ok(Action::requeue(next_look)))
}

/// The result of a step, with its failure recorded in `failures`.
fn record<T>(failures: &mut Vec<StepFailure>, step: Step, result: Result<T>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(error) => {
            failures.push(StepFailure { step, error });
            None
        }
    }
}

/// Ends a reconcile that stops before placement (`stage` is a kept claim
/// or no node): its status and events, then a requeue after `retry`.
async fn finish_early(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    stage: Stage<'_>,
    now: Timestamp,
    retry: Duration,
) -> Result<Result<Action>> {
    let observed = Observed { computer: c, stage };
    let (next, transitions) = crate::status::derive(&observed, old, now);
    events::publish_all(ctx, c, &transitions).await;
    status::write(ctx, c, ns, old, next)
        .await
        .in_step(Step::Status)?;
    Ok(Ok(Action::requeue(retry)))
}

/// Reports a reconcile that ended before its status was written
/// ([`crate::status::aborted`]): its events, then its status. Best effort:
/// a failure to write is logged. Returns `err` for the caller to hand to
/// the controller.
async fn report_abort(ctx: &Context, c: &AgentComputer, err: Error) -> Error {
    let Some(ns) = c.namespace() else {
        return err;
    };
    let old = c.status.clone().unwrap_or_default();
    let (next, transitions) = crate::status::aborted(c, &err, &old, Timestamp::now());
    events::publish_all(ctx, c, &transitions).await;
    if let Err(e) = status::write(ctx, c, &ns, &old, next).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "could not report the failed reconcile in status");
    }
    err
}
