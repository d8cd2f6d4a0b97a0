//! The claim step, before placement: a PersistentVolumeClaim of the
//! computer's name (`NAME-workspace`) that this computer does not own
//! blocks it. Such a claim was kept by an earlier computer of the same name
//! under reclaim policy Retain (or made by someone else); it stays bound to
//! its volume, and `spec.volumeName` of a claim cannot change, so the
//! computer waits, Pending, until the claim is deleted.

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::Api;

use crate::error::Result;
use crate::resources;

/// Why this computer cannot use the claim of its name, if one exists that
/// it does not own: kept by an earlier computer of the same name under
/// reclaim policy Retain (or made by someone else). Such a claim is bound
/// to another volume, and `spec.volumeName` of a claim cannot change.
/// `pv_name` is this computer's PV. Errors: the claim cannot be read.
pub async fn kept_claim(
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
