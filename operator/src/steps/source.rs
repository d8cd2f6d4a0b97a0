//! The source step, for a computer with `spec.source` that is not placed
//! yet: its files come from a snapshot in the node agents' backup store,
//! which the node agent that first serves it restores (it finds the
//! snapshot's name in the annotation [`labels::SOURCE_SNAPSHOT`]).
//!
//! - `kind: ComputerSnapshot`: that snapshot, once `readyToUse`.
//! - `kind: AgentComputer` (a fork): a snapshot of that computer taken
//!   now by its node agent, named `fork-<uid of the new computer>`, so
//!   that the fork is the source as it was when the new one was placed.
//!
//! A fork's snapshot is deleted once the fork is made ([`release_fork`]).
//!
//! Where it may go: with the agents' backup store (operator `--moves`,
//! one store every agent reads) any node; without it only the source's
//! node, whose own store holds the snapshot. Until the source is there
//! the computer waits, Placed False with reason `SourceNotFound` or
//! `SourceNotReady`; when only the source's node may take it and that
//! node cannot, `SourceOnAnotherNode`.

use agentcomputer_crds::{
    AgentComputer, ComputerSnapshot, SourceKind, labels, placed_reasons as reasons,
};
use kube::ResourceExt;
use kube::api::{Api, Patch};

use crate::context::Context;
use crate::error::Result;
use crate::snapshots;
use crate::writes::merge_params;

/// What the source of a computer allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Its snapshot is known and named on the computer: place it.
    Ready {
        /// The one node it may go to, when only one may.
        only: Option<String>,
    },
    /// Not yet: Placed False.
    Wait {
        /// The condition's reason.
        reason: &'static str,
        /// Its message.
        why: String,
    },
}

/// Finds the snapshot the computer `c` (namespace `ns`, with
/// `spec.source`) starts from, takes it for a fork, and names it on `c`.
/// Errors: the API server's.
pub async fn prepare(ctx: &Context, c: &AgentComputer, ns: &str) -> Result<Prepared> {
    let Some(source) = &c.spec.source else {
        return Ok(Prepared::Ready { only: None });
    };
    let kind = source.kind.as_str();
    let wait = |reason, why: String| Ok(Prepared::Wait { reason, why });
    let (handle, node) = match source.kind {
        SourceKind::ComputerSnapshot => {
            let api: Api<ComputerSnapshot> = Api::namespaced(ctx.client.clone(), ns);
            let Some(s) = api.get_opt(&source.name).await? else {
                let why = format!("{kind} {} not found in namespace {ns}", source.name);
                return wait(reasons::SOURCE_NOT_FOUND, why);
            };
            let st = s.status.unwrap_or_default();
            match (st.ready_to_use, st.snapshot_handle) {
                (Some(true), Some(handle)) => (handle, st.node),
                _ => {
                    let why = format!("{kind} {} is not readyToUse yet", source.name);
                    return wait(reasons::SOURCE_NOT_READY, why);
                }
            }
        }
        SourceKind::AgentComputer => {
            let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
            let Some(from) = api.get_opt(&source.name).await? else {
                let why = format!("{kind} {} not found in namespace {ns}", source.name);
                return wait(reasons::SOURCE_NOT_FOUND, why);
            };
            let handle = format!("fork-{}", c.uid().unwrap_or_default());
            if annotated(c) != Some(handle.as_str()) {
                let taken = snapshots::take_for_copy(ctx, &from, ns, &handle).await?;
                if let Err(why) = taken {
                    let why = format!("{kind} {}: {why}", source.name);
                    return wait(reasons::SOURCE_NOT_READY, why);
                }
            }
            (handle, from.status.and_then(|s| s.node))
        }
    };
    if annotated(c) != Some(handle.as_str()) {
        let patch =
            serde_json::json!({"metadata": {"annotations": {labels::SOURCE_SNAPSHOT: handle}}});
        Api::<AgentComputer>::namespaced(ctx.client.clone(), ns)
            .patch(&c.name_any(), &merge_params(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Prepared::Ready {
        only: if ctx.config.moves { None } else { node },
    })
}

/// Deletes the snapshot a fork was made from once the fork's node agent
/// has made it (it reports the fork's usage), or once the fork is being
/// deleted: the snapshot was the fork's source only, and would count
/// against its source's snapshots.
/// The annotation goes after it, so that a failed delete is tried again.
/// A source deleted since took its snapshots with it. Errors: the API
/// server's, or the source's node agent's.
pub async fn release_fork(ctx: &Context, c: &AgentComputer, ns: &str) -> Result<()> {
    let Some(source) = c
        .spec
        .source
        .as_ref()
        .filter(|s| s.kind == SourceKind::AgentComputer)
    else {
        return Ok(());
    };
    // Made (its agent reports its usage), or going (a fork deleted before
    // its agent made it has no use for the snapshot either).
    let made = c.metadata.deletion_timestamp.is_some()
        || c.status
            .as_ref()
            .and_then(|s| s.volume.as_ref())
            .is_some_and(|v| v.bytes_used.is_some());
    let Some(handle) = annotated(c).filter(|h| h.starts_with("fork-")) else {
        return Ok(());
    };
    if !made {
        return Ok(());
    }
    let api = Api::<AgentComputer>::namespaced(ctx.client.clone(), ns);
    if let Some(from) = api.get_opt(&source.name).await? {
        snapshots::delete_for_copy(ctx, &from, ns, handle).await?;
    }
    if c.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": {labels::SOURCE_SNAPSHOT: null}}});
    api.patch(&c.name_any(), &merge_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The snapshot named on `c`, if any.
fn annotated(c: &AgentComputer) -> Option<&str> {
    c.annotations()
        .get(labels::SOURCE_SNAPSHOT)
        .map(String::as_str)
}

/// The message of a computer that only `node` may take and that it
/// cannot take (`why`, the placement's own message).
pub fn pinned_elsewhere(node: &str, why: &str) -> String {
    format!(
        "its source is on node {node}, which cannot take it ({why}), and the node agents have no backup store to carry the source to another node (docs/snapshots.md)"
    )
}
