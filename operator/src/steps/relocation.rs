//! The relocation step: acts on [`crate::relocation::decide`] between
//! placement and the credential step. It reads the computer's writer
//! Lease, chooses a target, and writes the labels and annotations the node
//! agents follow (`agentcomputer.dev/move-target` on the computer for the
//! target's background restore, `agentcomputer.dev/hand-over-to` for the
//! source to stop serving); once the source has handed over (or its Lease
//! expired after a node loss) it makes the target the computer's node, and
//! the steps after it move the volume's label and the sandbox pod there.

use std::collections::HashMap;
use std::time::Duration;

use agentcomputer_crds::moves::{
    FAILOVER, HAND_OVER_TO, MOVE_REQUEST, MOVE_TARGET_LABEL, MOVING, MovePhase, MoveReason,
    MoveRecord, MoveStatus, move_condition_reasons,
};
use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{AgentComputer, AgentComputerStatus, labels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::error::{Result, is_not_found};
use crate::placement::{self, Agent};
use crate::relocation::{Decision, LeaseView, Seen, decide, describe};
use crate::resources;
use crate::status::Transition;
use crate::writes::merge_params;

/// Name of computer `uid`'s writer Lease in the agents' namespace (the
/// node agent's `writer_lease_name`).
pub fn writer_lease_name(uid: &str) -> String {
    format!("ac-{uid}")
}

/// How soon a move is looked at again while the source hands over.
const HAND_OVER_POLL: Duration = Duration::from_millis(250);
/// How soon a move is looked at again while the target prepares.
const PREPARE_POLL: Duration = Duration::from_secs(1);

/// What the step leaves for the rest of the reconcile.
#[derive(Debug, Default)]
pub struct Relocated {
    /// The node the computer is served at after this step (its target once
    /// a move switched).
    pub node: Option<String>,
    /// Next `status.move`.
    pub moving: Option<MoveStatus>,
    /// Next `status.lastMove` (None: keep the old one).
    pub last_move: Option<MoveRecord>,
    /// The `Moving` condition to set: status, reason, message.
    pub condition: Option<(bool, String, String)>,
    /// Events of this step.
    pub events: Vec<Transition>,
    /// No sandbox pod while the move runs.
    pub hold_sandbox: bool,
    /// Look again this soon.
    pub requeue: Option<Duration>,
}

/// Runs the step for `c` (namespace `ns`, status before `old`) served at
/// `node`. Errors: the API server's refusal of a read or write.
pub async fn run(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    node: &str,
    agents: &HashMap<String, Agent>,
    now: Timestamp,
) -> Result<Relocated> {
    let uid = c.uid().unwrap_or_default();
    let node_obj = ctx.nodes.get(&ObjectRef::new(node));
    // The Lease and a target matter only to a move that runs or may
    // start: a healthy computer's reconcile reads neither.
    let cordoned = node_obj
        .as_deref()
        .and_then(|n| n.spec.as_ref())
        .and_then(|sp| sp.unschedulable)
        .unwrap_or(false);
    let may_move = old.moving.is_some()
        || cordoned
        || node_obj.is_none()
        || !agents.contains_key(node)
        || c.annotations().contains_key(MOVE_REQUEST)
        || c.annotations().contains_key(FAILOVER);
    let lease = if ctx.config.moves && may_move {
        let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.agent_namespace);
        match leases.get_opt(&writer_lease_name(&uid)).await {
            Ok(l) => LeaseView::of(l.as_ref(), now),
            // Unreadable: taken as held by someone, so that nothing
            // switches on it; the rest of the reconcile goes on.
            Err(e) => {
                tracing::warn!(computer = %c.name_any(), error = %e, "cannot read the computer's writer Lease");
                LeaseView {
                    holder: Some(String::new()),
                    ..Default::default()
                }
            }
        }
    } else {
        LeaseView::of(None, now)
    };
    let seen = Seen {
        computer: c,
        old,
        node,
        node_obj: node_obj.as_deref(),
        agent_ready: agents.contains_key(node),
        moves_enabled: ctx.config.moves,
        failover_after: ctx.config.failover_after,
        lease,
        target: if may_move {
            target(ctx, c, node, agents)
        } else {
            Err((move_condition_reasons::NO_TARGET, String::new()))
        },
        now,
    };
    let decision = decide(&seen);
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
    let name = c.name_any();
    let mut out = Relocated::default();
    match decision {
        Decision::Stay {
            blocked,
            clear_request,
        } => {
            if clear_request {
                let patch = serde_json::json!({"metadata": {"annotations": {MOVE_REQUEST: null, FAILOVER: null}}});
                api.patch(&name, &merge_params(), &Patch::Merge(&patch))
                    .await?;
            }
            // A computer that stays keeps any move-target label of a move
            // that was given up (none is left by a finished one).
            if c.labels().contains_key(MOVE_TARGET_LABEL) {
                let patch = serde_json::json!({"metadata": {"labels": {MOVE_TARGET_LABEL: null}, "annotations": {HAND_OVER_TO: null}}});
                api.patch(&name, &merge_params(), &Patch::Merge(&patch))
                    .await?;
            }
            if let Some((reason, message)) = blocked {
                let was = old.conditions.iter().find(|x| x.type_ == MOVING);
                if was.is_none_or(|w| w.reason != reason || w.message != message) {
                    out.events
                        .push(Transition::warning(reason, message.clone()));
                }
                out.condition = Some((false, reason.to_string(), message));
                out.requeue = Some(Duration::from_secs(30));
            }
        }
        Decision::Moving(m) => {
            if old.moving.is_none() {
                // A new move: what the agents wrote on the Lease for an
                // earlier one must not count for this one.
                clear_lease_annotations(ctx, &uid).await?;
            }
            let mut labels_patch = serde_json::Map::new();
            if c.labels().get(MOVE_TARGET_LABEL) != Some(&m.target) {
                labels_patch.insert(MOVE_TARGET_LABEL.into(), m.target.clone().into());
            }
            let mut annotations = serde_json::Map::new();
            if m.phase == MovePhase::HandingOver
                && m.reason != MoveReason::NodeLost
                && c.annotations().get(HAND_OVER_TO) != Some(&m.target)
            {
                annotations.insert(HAND_OVER_TO.into(), m.target.clone().into());
            }
            if !labels_patch.is_empty() || !annotations.is_empty() {
                let patch = serde_json::json!({"metadata": {"labels": labels_patch, "annotations": annotations}});
                api.patch(&name, &merge_params(), &Patch::Merge(&patch))
                    .await?;
            }
            let was = old.moving.as_ref();
            if was.is_none() {
                out.events.push(Transition::normal(
                    "MoveStarted",
                    format!(
                        "{}: moving from {} to {}",
                        describe(m.reason, &m.source),
                        m.source,
                        m.target
                    ),
                ));
            }
            if m.phase == MovePhase::HandingOver && was.is_none_or(|w| w.phase != m.phase) {
                out.events.push(Transition::normal(
                    "HandingOver",
                    format!(
                        "{} stops serving the computer and hands it to {}",
                        m.source, m.target
                    ),
                ));
            }
            // The sandbox pod goes when the source stops serving: its
            // writes would be fenced anyway, and it comes back on the
            // target.
            if m.phase == MovePhase::HandingOver {
                delete_sandbox(ctx, c, ns, m.reason == MoveReason::NodeLost).await?;
            }
            out.condition = Some((
                true,
                m.reason.as_str().to_string(),
                format!(
                    "from {} to {} ({})",
                    m.source,
                    m.target,
                    match m.phase {
                        MovePhase::Preparing => "the target restores in the background",
                        MovePhase::HandingOver if m.reason == MoveReason::NodeLost =>
                            "waiting for the lost node's writer Lease to expire",
                        MovePhase::HandingOver => "the source hands over",
                    }
                ),
            ));
            out.requeue = Some(match m.phase {
                MovePhase::Preparing => PREPARE_POLL,
                MovePhase::HandingOver => HAND_OVER_POLL,
            });
            // Handing over: no pod anywhere until the switch. Off a
            // cordoned node: a pod still running there is left alone, but
            // an evicted one is not made again where it cannot run.
            out.hold_sandbox =
                m.phase == MovePhase::HandingOver || m.reason == MoveReason::NodeCordoned;
            out.moving = Some(m);
        }
        Decision::Switch(r) => {
            let patch = serde_json::json!({"metadata": {
                "labels": {labels::NODE: r.target, MOVE_TARGET_LABEL: null},
                "annotations": {HAND_OVER_TO: null, MOVE_REQUEST: null, FAILOVER: null},
            }});
            api.patch(&name, &merge_params(), &Patch::Merge(&patch))
                .await?;
            let lost = r.reason == MoveReason::NodeLost;
            delete_sandbox_off(ctx, c, ns, &r.target, lost).await?;
            rebind_pinned_volume(ctx, c, ns, lost).await?;
            ctx.forget(&uid);
            let note = match (lost, r.hand_over_millis) {
                (true, _) => format!(
                    "failed over from {} to {}; it restores from the store's latest position{}",
                    r.source,
                    r.target,
                    match (&r.last_reported_position, &r.last_reported_shipped_time) {
                        (Some(p), Some(t)) => format!(
                            " (at least position {p}, shipped at {}; writes after that on {} may be lost)",
                            t.0, r.source
                        ),
                        _ => String::new(),
                    }
                ),
                (false, Some(ms)) => format!(
                    "moved from {} to {}; calls waited {ms} ms while it was handed over",
                    r.source, r.target
                ),
                (false, None) => format!("moved from {} to {}", r.source, r.target),
            };
            out.events.push(Transition::normal(
                if lost { "FailedOver" } else { "Moved" },
                note.clone(),
            ));
            out.condition = Some((false, move_condition_reasons::MOVED.to_string(), note));
            out.node = Some(r.target.clone());
            out.requeue = Some(Duration::from_secs(2));
            out.last_move = Some(r);
        }
    }
    Ok(out)
}

/// The node to move `c` to: the one its [`MOVE_REQUEST`] names, if it is
/// eligible; else the eligible node with room serving the fewest
/// computers, never `source`.
fn target(
    ctx: &Context,
    c: &AgentComputer,
    source: &str,
    agents: &HashMap<String, Agent>,
) -> std::result::Result<String, (&'static str, String)> {
    let bytes = quantity_bytes(&c.spec.storage.size).map_err(|e| {
        (
            move_condition_reasons::NO_TARGET,
            format!("spec.storage.size: {e}"),
        )
    })?;
    let nodes = ctx.nodes.state();
    let asked = c
        .annotations()
        .get(MOVE_REQUEST)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let others: Vec<&Node> = nodes
        .iter()
        .map(|n| n.as_ref())
        .filter(|n| n.metadata.name.as_deref() != Some(source))
        .filter(|n| asked.is_none() || n.metadata.name == asked)
        .collect();
    let room = ctx.room();
    let cands = placement::Candidates {
        agents,
        room: &room,
        size: bytes,
    };
    // Computers per node, counting those on their way to a node.
    let mut load = ctx.load();
    for other in ctx.computers.state() {
        if let Some(m) = other.status.as_ref().and_then(|st| st.moving.as_ref()) {
            *load.entry(m.target.clone()).or_default() += 1;
        }
    }
    if let Some(t) = placement::choose(&c.spec, others.iter().copied(), &cands, &load) {
        return Ok(t);
    }
    Err(match asked {
        Some(n) if n == source => (
            move_condition_reasons::BAD_TARGET,
            format!("{n} already serves the computer"),
        ),
        Some(n) if others.is_empty() => (
            move_condition_reasons::BAD_TARGET,
            format!("there is no node {n}"),
        ),
        Some(n) => (
            move_condition_reasons::BAD_TARGET,
            format!(
                "{n}: {}",
                placement::explain(&c.spec, others.iter().copied(), &cands)
            ),
        ),
        None => (
            move_condition_reasons::NO_TARGET,
            placement::explain(&c.spec, others.iter().copied(), &cands),
        ),
    })
}

/// Removes the move annotations node agents put on computer `uid`'s
/// writer Lease (`prepared-on`, `handed-over-to`). No Lease: nothing to do.
async fn clear_lease_annotations(ctx: &Context, uid: &str) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.agent_namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {
        agentcomputer_crds::moves::PREPARED_ON: null,
        agentcomputer_crds::moves::HANDED_OVER_TO: null,
    }}});
    match leases
        .patch(
            &writer_lease_name(uid),
            &merge_params(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the sandbox pod unless it already runs on `target` (a switch
/// finished again from a cache that showed the label before the status).
async fn delete_sandbox_off(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    target: &str,
    now: bool,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let on_target = pods
        .get_opt(&resources::pod_name(c))
        .await?
        .and_then(|p| p.spec?.node_name)
        .is_some_and(|n| n == target);
    if on_target {
        return Ok(());
    }
    delete_sandbox(ctx, c, ns, now).await
}

/// Deletes the sandbox pod, at once (grace period 0) when its node is
/// lost: its kubelet will never confirm a graceful end.
async fn delete_sandbox(ctx: &Context, c: &AgentComputer, ns: &str, now: bool) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let mut dp = DeleteParams::background();
    if now {
        dp = dp.grace_period(0);
    }
    match pods.delete(&resources::pod_name(c), &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A volume made before computers could move is pinned to its node by the
/// PersistentVolume's node affinity, which cannot change: its claim and
/// volume are deleted here and made again, unpinned, by the volume step
/// once they are gone (the data is in object storage and on the target;
/// the PV goes without the delete-data annotation, so the source's node
/// agent keeps its copy until the target has shipped past it). After a
/// node loss nobody will release the node agent's finalizer: it is
/// removed here.
async fn rebind_pinned_volume(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    lost: bool,
) -> Result<()> {
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let pv_name = resources::pv_name(c);
    let Some(pv) = pvs.get_opt(&pv_name).await? else {
        return Ok(());
    };
    if !resources::pv::pinned(&pv) {
        return Ok(());
    }
    // The volume first: a claim deleted while the volume's delete failed
    // would leave a Released volume no new claim binds to.
    match pvs.delete(&pv_name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    match pvcs
        .delete(&resources::pvc_name(c), &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    if lost {
        resources::pv::drop_node_data_finalizer(&pvs, &pv_name).await?;
    }
    Ok(())
}

/// Puts what the step decided into the next status: `move`, `lastMove`
/// (kept from `old` unless a move ended now) and the `Moving` condition
/// (kept as it was when the step had nothing to say).
pub fn into_status(
    r: &Relocated,
    next: &mut AgentComputerStatus,
    old: &AgentComputerStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    next.moving = r.moving.clone();
    next.last_move = r.last_move.clone().or_else(|| old.last_move.clone());
    let moving_was = old.conditions.iter().find(|c| c.type_ == MOVING).cloned();
    match &r.condition {
        Some((ok, reason, message)) => {
            next.conditions = crate::conditions::set(
                &next.conditions,
                (MOVING, *ok, reason.as_str(), message.clone()),
                generation,
                now,
            );
        }
        None => {
            // Kept: a finished move's record and a refused request's
            // reason. Dropped: a block whose cause went (a node that was
            // cordoned or lost is fine again), whose message names it.
            if let Some(was) = moving_was
                && was.status == "False"
                && !was.message.starts_with("node ")
                && !next.conditions.iter().any(|c| c.type_ == MOVING)
            {
                next.conditions.push(was);
            }
        }
    }
}
