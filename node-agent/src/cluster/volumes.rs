//! The deletion protocol of computers' data: the watch of this node's
//! PersistentVolumes of the `agentcomputer.dev` CSI driver.
//!
//! A PV being deleted (deletionTimestamp set) that still carries the
//! finalizer `agentcomputer.dev/node-data` is this agent's to finish:
//! with the annotation `agentcomputer.dev/delete-data: "true"` the
//! computer's database directory is deleted, without it the data is kept
//! (and a warning logged); then the finalizer is removed. The watch's first
//! listing covers deletions decided while the agent was down. Nothing else
//! ever deletes a computer's data.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Node;
use super::keys::{DELETE_DATA_ANNOTATION, FIELD_MANAGER, NODE_DATA_FINALIZER, NODE_LABEL};
use crate::computer::is_valid_name;
use crate::registry::RegistryError;

/// Delay before retrying a PV whose data could not be dealt with.
const RETRY: Duration = Duration::from_secs(5);

/// Watches this node's PVs until `stop`; marks the watch synced after its
/// first listing has been handled.
pub async fn run(node: Arc<Node>, stop: CancellationToken) {
    let api: Api<PersistentVolume> = Api::all(node.client.clone());
    let selector = format!("{NODE_LABEL}={}", node.config.node_name);
    let mut events = watcher::watcher(api.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Err(e)) => warn!(error = %e, "PersistentVolume watch failed; retrying"),
            Some(Ok(Event::Init | Event::Delete(_))) => {}
            Some(Ok(Event::InitApply(pv) | Event::Apply(pv))) => {
                if !handle(&node, &api, &pv).await {
                    retry_later(node.clone(), api.clone(), pv.name_any(), stop.clone());
                }
            }
            Some(Ok(Event::InitDone)) => node.readiness.set_volumes_synced(),
        }
    }
}

/// Handles `pv` again after [`RETRY`] until it is done or gone.
fn retry_later(node: Arc<Node>, api: Api<PersistentVolume>, name: String, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
            match api.get_opt(&name).await {
                Ok(None) => return,
                Ok(Some(pv)) => {
                    if handle(&node, &api, &pv).await {
                        return;
                    }
                }
                Err(e) => warn!(pv = %name, error = %e, "cannot read PersistentVolume; retrying"),
            }
        }
    });
}

/// Finishes `pv`'s deletion if it is this agent's to finish. Returns false
/// when it must be retried.
async fn handle(node: &Node, api: &Api<PersistentVolume>, pv: &PersistentVolume) -> bool {
    let name = pv.name_any();
    let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
        return true;
    };
    if csi.driver != agentcomputer_crds::CSI_DRIVER
        || pv.metadata.deletion_timestamp.is_none()
        || !pv.finalizers().iter().any(|f| f == NODE_DATA_FINALIZER)
    {
        return true;
    }
    let uid = csi.volume_handle.as_str();
    let delete = pv
        .annotations()
        .get(DELETE_DATA_ANNOTATION)
        .is_some_and(|v| v == "true");
    if delete {
        if !is_valid_name(uid) {
            warn!(pv = %name, volume_handle = uid, "volume handle is not a computer uid; no data to delete");
        } else {
            node.mark_deleted(uid);
            match node.registry.delete(uid).await {
                Ok(()) => {
                    info!(pv = %name, %uid, "deleted the computer's data (volume deleted with {DELETE_DATA_ANNOTATION}=true)")
                }
                Err(RegistryError::NotFound(_)) => {
                    info!(pv = %name, %uid, "volume deleted; the computer has no data on this node")
                }
                Err(e) => {
                    warn!(pv = %name, %uid, error = %e, "cannot delete the computer's data; retrying");
                    return false;
                }
            }
            node.activity.forget(uid);
        }
    } else {
        warn!(pv = %name, %uid, "volume deleted without {DELETE_DATA_ANNOTATION}=true: keeping the computer's data on this node");
    }
    match remove_finalizer(api, pv).await {
        Ok(()) => {
            node.placement_changed.notify_one();
            true
        }
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        // Changed meanwhile: the watch delivers the new object.
        Err(kube::Error::Api(e)) if e.code == 409 => true,
        Err(e) => {
            warn!(pv = %name, error = %e, "cannot remove the {NODE_DATA_FINALIZER} finalizer; retrying");
            false
        }
    }
}

/// Removes [`NODE_DATA_FINALIZER`] from `pv` by a merge patch of the
/// finalizer list computed from `pv`, guarded by its resourceVersion: a
/// concurrent change of the PV makes the patch fail with a conflict (and
/// be retried from the new object) instead of undoing that change.
async fn remove_finalizer(api: &Api<PersistentVolume>, pv: &PersistentVolume) -> kube::Result<()> {
    let kept: Vec<&String> = pv
        .finalizers()
        .iter()
        .filter(|f| *f != NODE_DATA_FINALIZER)
        .collect();
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": pv.resource_version(),
            "finalizers": kept,
        }
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(&pv.name_any(), &params, &Patch::Merge(patch))
        .await
        .map(|_| ())
}
