//! The cleanup step of a deleted computer, run through the finalizer
//! `agentcomputer.dev/volume`: the computer is marked Terminating, its
//! sandbox pod, NetworkPolicy and credential Secret go, and its volume is
//! released per `spec.storage.reclaimPolicy`:
//! - `Delete`: the claim is deleted, the PV annotated
//!   `agentcomputer.dev/delete-data` and then deleted. The PV stays
//!   Terminating until the node agent of its node has deleted the data and
//!   removed its finalizer `agentcomputer.dev/node-data`; the computer does
//!   not wait for that.
//! - `Retain`: the claim loses its owner reference (garbage collection
//!   keeps it) and the PV is annotated `agentcomputer.dev/retained-from`.

use agentcomputer_crds::{AgentComputer, ComputerPhase, ReclaimPolicy, labels};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::resources;
use crate::steps::{events, status};
use crate::writes::{delete_ignoring_absent, merge_if_present, merge_params};

/// Releases the objects of the deleted computer `c`. Errors: the API
/// server's refusal of a delete or patch (the finalizer stays, and the
/// cleanup is retried).
pub async fn cleanup(c: &AgentComputer, ctx: &Context) -> Result<Action> {
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let client = &ctx.client;
    ctx.forget(&c.uid().unwrap_or_default());
    // Best effort: the snapshot a fork not made yet was to come from.
    if let Err(e) = super::source::release_fork(ctx, c, &ns).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "cannot delete the snapshot the fork was to be made from");
    }
    let old = c.status.clone().unwrap_or_default();
    if old.phase != Some(ComputerPhase::Terminating) {
        let mut next = old.clone();
        next.phase = Some(ComputerPhase::Terminating);
        // Best effort: the object may already be on its way out.
        if let Err(e) = status::write(ctx, c, &ns, &old, next).await {
            tracing::debug!(error = %e, "could not mark computer Terminating");
        }
    }
    delete_ignoring_absent(
        &Api::<Pod>::namespaced(client.clone(), &ns),
        &resources::pod_name(c),
    )
    .await?;
    delete_ignoring_absent(
        &Api::<NetworkPolicy>::namespaced(client.clone(), &ns),
        &resources::netpol_name(c),
    )
    .await?;
    delete_ignoring_absent(
        &Api::<Secret>::namespaced(client.clone(), &ns),
        &resources::secret_name(c),
    )
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let (pvc_name, pv_name) = (resources::pvc_name(c), resources::pv_name(c));
    match c.spec.storage.reclaim_policy {
        ReclaimPolicy::Delete => {
            delete_ignoring_absent(&pvcs, &pvc_name).await?;
            // The node agent deletes the database of a deleted PV only with
            // this annotation; it must be there before the deletion is.
            let mark =
                serde_json::json!({"metadata": {"annotations": {labels::DELETE_DATA: "true"}}});
            if merge_if_present(&pvs, &pv_name, &merge_params(), &mark).await? {
                delete_ignoring_absent(&pvs, &pv_name).await?;
            }
            let node = old.node.as_deref().unwrap_or("its node");
            events::publish(
                ctx,
                c,
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
            merge_if_present(&pvcs, &pvc_name, &PatchParams::default(), &orphan).await?;
            let note = serde_json::json!({"metadata": {"annotations": {
                "agentcomputer.dev/retained-from": format!("{ns}/{}", c.name_any())
            }}});
            merge_if_present(&pvs, &pv_name, &PatchParams::default(), &note).await?;
            events::publish(
                ctx,
                c,
                EventType::Normal,
                "VolumeRetained",
                format!("kept claim {pvc_name} and volume {pv_name}"),
            )
            .await;
        }
    }
    Ok(Action::await_change())
}
