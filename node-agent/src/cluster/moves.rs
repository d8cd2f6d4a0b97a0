//! This node's part in moving computers between nodes (docs/moves.md;
//! the operator drives the move, [`crate::registry`]'s moves do the work).
//!
//! - As a target: the AgentComputers labelled
//!   `agentcomputer.dev/move-target=<node>` are restored here in the
//!   background, then the computer's writer Lease says so
//!   (`agentcomputer.dev/prepared-on: <node> <position>`).
//! - As a source: a computer placed here with annotation
//!   `agentcomputer.dev/hand-over-to: <target>` is handed over (calls
//!   wait, the last commits are shipped, the Lease is released), then the
//!   Lease says so (`agentcomputer.dev/handed-over-to: <target> <position>`).
//!   Once the computer's label names another node, calls are told where it
//!   went.
//! - Afterwards: a copy here that the store's log has gone past (another
//!   node served it since) is removed ([`sweep`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_crds::moves::{
    HAND_OVER_TO, HANDED_OVER_TO, MOVE_TARGET_LABEL, MovePhase, MoveStatus, PREPARED_ON,
};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Node;
use crate::registry::writer_lease_name;

/// Field manager of the annotations node agents write on writer Leases,
/// one per annotation: a server-side apply removes the fields its manager
/// applied before and omits now, so the target's `prepared-on` and the
/// source's `handed-over-to` must not share one.
fn field_manager(key: &str) -> String {
    format!(
        "agentcomputer-node-agent-{}",
        key.rsplit('/').next().unwrap_or(key)
    )
}

/// How often copies the store has gone past are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Moves this node takes part in now.
#[derive(Default)]
pub struct Moves {
    /// uids being handed over from here (one hand-over each), with the
    /// node they are handed to.
    leaving: Mutex<HashMap<String, String>>,
    /// uids being (or already) restored here ahead of a move.
    arriving: Mutex<HashSet<String>>,
}

impl Moves {
    /// Whether `uid` is restored here ahead of a move (its copy is not
    /// swept).
    fn is_arriving(&self, uid: &str) -> bool {
        self.arriving.lock().contains(uid)
    }
}

/// Acts on the hand-over annotation of computer `c` (`uid`), placed here:
/// starts the hand-over once, or lets calls in again when the annotation
/// went without the computer leaving.
pub fn on_placed(node: &Arc<Node>, c: &AgentComputer, uid: &str) {
    // Only the move the operator's status names: the annotation alone is
    // on the object its users may edit.
    let target = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HAND_OVER_TO))
        .filter(|t| **t != node.config.node_name)
        .filter(|t| {
            moving_to(c).is_some_and(|m| {
                m.target == **t
                    && m.source == node.config.node_name
                    && m.phase == MovePhase::HandingOver
            })
        })
        .cloned();
    let Some(target) = target else {
        if node.moves.leaving.lock().remove(uid).is_some() {
            info!(%uid, "the move was given up; serving the computer again");
        }
        // Given up, or moved away earlier and back here now: served here.
        node.registry.stay(uid);
        return;
    };
    {
        let mut leaving = node.moves.leaving.lock();
        if leaving.contains_key(uid) {
            return;
        }
        leaving.insert(uid.to_string(), target.clone());
    }
    let node = node.clone();
    let uid = uid.to_string();
    let (ns, name) = (
        c.metadata.namespace.clone().unwrap_or_default(),
        c.metadata.name.clone().unwrap_or_default(),
    );
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let asked = || still_asked(&node, &ns, &name, &uid, &target);
        let position = loop {
            match node.registry.hand_over(&uid).await {
                Ok(p) => break p,
                Err(e) => {
                    // Served here again until the next try.
                    warn!(%uid, error = %e, "cannot hand the computer over; it stays here and is tried again");
                    node.registry.stay(&uid);
                }
            }
            tokio::time::sleep(RETRY).await;
            if !asked().await {
                node.moves.leaving.lock().remove(&uid);
                node.registry.stay(&uid);
                return;
            }
        };
        let value = format!("{target} {position}");
        loop {
            match annotate_lease(&node, &uid, HANDED_OVER_TO, &value).await {
                Ok(()) => {
                    info!(
                        %uid,
                        %target,
                        position,
                        ms = started.elapsed().as_millis() as u64,
                        "handed the computer over"
                    );
                    return;
                }
                Err(e) => {
                    warn!(%uid, error = %e, "cannot record the hand-over on the writer Lease; trying again")
                }
            }
            tokio::time::sleep(RETRY).await;
            if !asked().await {
                return;
            }
        }
    });
}

/// How long a failed hand-over or Lease annotation waits before its next
/// try.
const RETRY: Duration = Duration::from_secs(5);

/// Whether AgentComputer `ns/name` (uid `uid`) still asks to be handed to
/// `target`. An unreadable answer counts as yes (the next try finds out).
async fn still_asked(node: &Node, ns: &str, name: &str, uid: &str, target: &str) -> bool {
    let api: Api<AgentComputer> = Api::namespaced(node.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(c)) => {
            c.metadata.uid.as_deref() == Some(uid)
                && c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(HAND_OVER_TO))
                    .is_some_and(|t| t == target)
        }
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Computer `c` (`uid`) is no longer placed here: if it was handed over,
/// calls are told which node serves it now.
pub fn on_unplaced(node: &Arc<Node>, c: &AgentComputer, uid: &str) {
    let Some(target) = node.moves.leaving.lock().remove(uid) else {
        return;
    };
    // The watch's last object may still carry this node's label: the
    // computer went where it was handed over to, unless it is deleted.
    let to = c.metadata.deletion_timestamp.is_none().then_some(target);
    match to {
        Some(to) if to != node.config.node_name => {
            info!(%uid, node = %to, "the computer moved");
            node.index.depart(uid, &to);
            node.registry.departed(uid, &to);
        }
        // Deleted while it was handed over.
        _ => node.registry.forget_departure(uid),
    }
}

/// Watches the computers moving to this node until `stop`, restoring each
/// in the background.
pub async fn run_target(node: Arc<Node>, stop: CancellationToken) {
    if node.registry.backup_target().is_none() {
        return;
    }
    let api: Api<AgentComputer> = Api::all(node.client.clone());
    let selector = format!("{MOVE_TARGET_LABEL}={}", node.config.node_name);
    let mut events = watcher::watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Err(e)) => warn!(error = %e, "watch of computers moving here failed; retrying"),
            Some(Ok(Event::Apply(c) | Event::InitApply(c))) => {
                // Only for the move the operator's status names.
                let here = moving_to(&c).is_some_and(|m| m.target == node.config.node_name);
                if let (Some(uid), true) = (c.metadata.uid.clone(), here) {
                    prepare(&node, uid);
                }
            }
            Some(Ok(Event::Delete(c))) => {
                if let Some(uid) = &c.metadata.uid {
                    node.moves.arriving.lock().remove(uid);
                }
            }
            Some(Ok(Event::Init | Event::InitDone)) => {}
        }
    }
}

/// The move `c`'s status names (written by the operator only).
fn moving_to(c: &AgentComputer) -> Option<&MoveStatus> {
    c.status.as_ref()?.moving.as_ref()
}

/// Restores computer `uid` here ahead of its move, once, and says so on
/// its writer Lease.
fn prepare(node: &Arc<Node>, uid: String) {
    if node.index.get(&uid).is_some() || !node.moves.arriving.lock().insert(uid.clone()) {
        return;
    }
    let node = node.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        match node.registry.prepare_arrival(&uid).await {
            Ok(position) => {
                let value = format!("{} {position}", node.config.node_name);
                match annotate_lease(&node, &uid, PREPARED_ON, &value).await {
                    Ok(()) => info!(
                        %uid,
                        position,
                        ms = started.elapsed().as_millis() as u64,
                        "restored the computer ahead of its move here"
                    ),
                    Err(e) => {
                        warn!(%uid, error = %e, "cannot record the restore on the writer Lease")
                    }
                }
            }
            Err(e) => {
                // The operator hands over after its limit anyway; the open
                // then restores.
                warn!(%uid, error = %e, "cannot restore the computer ahead of its move");
                node.moves.arriving.lock().remove(&uid);
            }
        }
    });
}

/// Sets annotation `key` to `value` on computer `uid`'s writer Lease (made
/// if missing, with no holder) by server-side apply.
async fn annotate_lease(node: &Node, uid: &str, key: &str, value: &str) -> kube::Result<()> {
    let api: Api<Lease> = Api::namespaced(node.client.clone(), &node.config.namespace);
    let name = writer_lease_name(uid);
    let patch = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "labels": {"agentcomputer.dev/computer-uid": uid},
            "annotations": {key: value},
        },
    });
    api.patch(
        &name,
        &PatchParams::apply(&field_manager(key)),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Once the agent is ready (a node that comes back finds its copies of
/// computers that failed over at once), then every [`SWEEP_EVERY`] until
/// `stop`: removes this node's copies of computers not placed here that
/// the store's log has gone past.
pub async fn sweep(node: Arc<Node>, stop: CancellationToken) {
    if node.registry.backup_target().is_none() {
        return;
    }
    loop {
        while !node.readiness.missing().is_empty() {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        let names = match node.registry.names().await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "cannot list this node's computers");
                Vec::new()
            }
        };
        for uid in names {
            if node.index.get(&uid).is_some() || node.moves.is_arriving(&uid) {
                continue;
            }
            if let Err(e) = node.registry.discard_if_superseded(&uid).await {
                warn!(%uid, error = %e, "cannot check this node's copy against the store");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
    }
}
