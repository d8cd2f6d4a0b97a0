//! The placement step: the computer's node. Placement is sticky: the PV is
//! authoritative once it exists (its node affinity is immutable), then
//! `status.node`; a computer with neither gets the eligible node with room
//! that serves the fewest computers ([`crate::placement`]), recorded in the
//! [`Context`] so that concurrent placements count it. Once the computer
//! holds its node it is labelled `agentcomputer.dev/node` for the node
//! agent.

use std::collections::HashMap;

use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{AgentComputer, AgentComputerStatus, labels};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, Patch};

use crate::context::Context;
use crate::error::Result;
use crate::placement::{self, Agent};
use crate::resources::pv;
use crate::status::{INVALID_SIZE, NO_ELIGIBLE_NODE, NO_NODE_HAS_ROOM};
use crate::writes::merge_params;

/// Where the computer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Its node, from `status.node` or from its existing PV.
    Known(String),
    /// A node chosen now (and recorded as assumed in the context).
    Chosen(String),
    /// No node: [`NO_ELIGIBLE_NODE`] with the nodes counted per cause,
    /// [`NO_NODE_HAS_ROOM`] (same message) when room is all that is
    /// missing on every node the computer may use, or [`INVALID_SIZE`]
    /// when `spec.storage.size` has no byte count.
    Unplaced {
        /// Reason of `Placed=False`.
        reason: &'static str,
        /// Its message.
        why: String,
    },
}

/// The node of `c`: kept (`old.node`, else the node of `existing_pv`), or
/// chosen among the nodes cached in `ctx` whose agents are in `agents`.
pub fn place(
    ctx: &Context,
    c: &AgentComputer,
    old: &AgentComputerStatus,
    existing_pv: Option<&PersistentVolume>,
    agents: &HashMap<String, Agent>,
) -> Placement {
    if let Some(node) = old
        .node
        .clone()
        .or_else(|| existing_pv.and_then(pv::node_of))
    {
        return Placement::Known(node);
    }
    let bytes = match quantity_bytes(&c.spec.storage.size) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Placement::Unplaced {
                reason: INVALID_SIZE,
                why: format!("spec.storage.size: {e}"),
            };
        }
    };
    let nodes = ctx.nodes.state();
    let uid = c.uid().unwrap_or_default();
    let chosen = ctx.place(&uid, bytes, |load, room| {
        let cands = placement::Candidates {
            agents,
            room,
            size: bytes,
        };
        placement::choose(&c.spec, nodes.iter().map(|n| n.as_ref()), &cands, load)
    });
    match chosen {
        Some(node) => Placement::Chosen(node),
        None => {
            let room = ctx.room();
            let cands = placement::Candidates {
                agents,
                room: &room,
                size: bytes,
            };
            let only_room =
                placement::only_room_lacks(&c.spec, nodes.iter().map(|n| n.as_ref()), &cands);
            Placement::Unplaced {
                reason: if only_room {
                    NO_NODE_HAS_ROOM
                } else {
                    NO_ELIGIBLE_NODE
                },
                why: placement::explain(&c.spec, nodes.iter().map(|n| n.as_ref()), &cands),
            }
        }
    }
}

/// Labels `c` (namespace `ns`) `agentcomputer.dev/node=node` by a merge
/// patch under the operator's field manager, unless it has that label:
/// the node agent finds the computers of its node by it. Written whatever
/// the cache says of the status, since the node never changes. Errors: the
/// API server's refusal.
pub async fn label(client: &kube::Client, c: &AgentComputer, ns: &str, node: &str) -> Result<()> {
    if c.labels().get(labels::NODE).map(String::as_str) == Some(node) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"labels": {labels::NODE: node}}});
    Api::<AgentComputer>::namespaced(client.clone(), ns)
        .patch(&c.name_any(), &merge_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
