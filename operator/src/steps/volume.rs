//! The volume step of a reconcile: the computer's PersistentVolumeClaim,
//! then its PersistentVolume, pre-bound to each other.
//!
//! The claim goes first: a claim the API server refuses (an exceeded
//! ResourceQuota, an admission webhook) leaves no PersistentVolume behind,
//! so a computer that cannot have its claim takes no volume, and, since the
//! controller labels it with its node only once it has a volume, no room on
//! that node either (the node agent counts the computers labelled for it).

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::Api;

use crate::error::{Error, Result};
use crate::resources::{self, pv, pvc};
use crate::writes::apply_obj;

/// What the volume step found.
pub struct VolumeState {
    /// The PV is being deleted although the computer lives (someone
    /// deleted it); it is left to finish and made again, empty, once gone.
    pub pv_deleting: bool,
    /// `status.phase` of the claim (`Pending` until bound).
    pub claim_phase: String,
}

/// Applies the claim, then the volume, for `node`. `existing_pv` is the
/// computer's PV as read before (None when absent); one pinned to a node
/// by node affinity keeps it (it cannot change). Errors: the API server's
/// refusal of either object.
pub async fn reconcile_volume(
    client: &kube::Client,
    c: &AgentComputer,
    node: &str,
    existing_pv: Option<&PersistentVolume>,
    storage_class: &str,
) -> Result<VolumeState> {
    let pv_deleting = existing_pv.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
    let ns = c
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim = apply_claim(&pvcs, c, &resources::pvc_name(c), storage_class).await?;
    if !pv_deleting {
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let pinned = existing_pv.and_then(pv::pinned_hostname);
        let desired = pv::build(c, node, pinned.as_deref(), storage_class);
        apply_obj(&pvs, &resources::pv_name(c), &desired).await?;
    }
    let claim_phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    Ok(VolumeState {
        pv_deleting,
        claim_phase,
    })
}

/// Applies the PVC. Its request is the quota when the claim is created and
/// never changes afterwards: a claim bound to a pre-provisioned volume
/// cannot be resized (the API server refuses the change, 422 while the
/// claim is unbound, 403 from the PersistentVolumeClaimResize admission
/// once it is bound), and re-sending a refused request would fail every
/// reconcile. The quota the node agent enforces follows the PV's capacity.
async fn apply_claim(
    pvcs: &Api<PersistentVolumeClaim>,
    c: &AgentComputer,
    name: &str,
    storage_class: &str,
) -> Result<PersistentVolumeClaim> {
    let request = pvcs
        .get_opt(name)
        .await?
        .as_ref()
        .and_then(pvc::request_of)
        .unwrap_or_else(|| c.spec.storage.size.clone());
    apply_obj(pvcs, name, &pvc::build(c, storage_class, request)).await
}
