//! The computer's PersistentVolume: CSI driver `agentcomputer.dev`, handle =
//! the computer's uid, capacity = quota, pre-bound to the computer's PVC
//! through `claimRef` (see "Reserving a PersistentVolume" in the
//! Kubernetes persistent volumes docs).
//!
//! It has no node affinity: a PV's node affinity cannot change, and a
//! computer moves between nodes (its data follows through object storage,
//! docs/moves.md). The serving node is in the label and annotation
//! `agentcomputer.dev/node`, and the sandbox pod is pinned to it by its
//! own node affinity. Volumes made before computers could move are pinned
//! by node affinity ([`pinned`]); they keep it until their computer moves,
//! when they are made again.
//!
//! For the node agent it carries the label `agentcomputer.dev/node`, the
//! volumeAttributes namespace, name, uid and gid, and from its creation the
//! finalizer `agentcomputer.dev/node-data`, which the node agent removes once
//! it has deleted (annotation `agentcomputer.dev/delete-data: "true"`) or
//! kept the data of a deleted PV.

use std::collections::BTreeMap;

use agentcomputer_crds::{AgentComputer, CSI_DRIVER, SANDBOX_GID, SANDBOX_UID, labels};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, PersistentVolume, PersistentVolumeSpec, VolumeNodeAffinity,
};
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{child_labels, pv_name, pvc_name};

pub use agentcomputer_crds::labels::{ATTR_GID, ATTR_NAME, ATTR_NAMESPACE, ATTR_UID};
/// Annotation with the serving node's name.
pub const NODE_ANNOTATION: &str = "agentcomputer.dev/node";

/// Builds the PV for `node`. `pinned_to`: the `kubernetes.io/hostname`
/// of a volume made pinned (kept as it is, being immutable); None for every
/// new volume. Its reclaim policy is Retain because no external provisioner exists to
/// delete it: the operator deletes it itself under the Delete policy.
pub fn build(
    c: &AgentComputer,
    node: &str,
    pinned_to: Option<&str>,
    storage_class: &str,
) -> PersistentVolume {
    let ns = c.namespace().unwrap_or_default();
    let uid = c.uid().unwrap_or_default();
    let mut lbl = child_labels(c, "volume");
    lbl.insert(labels::COMPUTER_NAMESPACE.into(), ns.clone());
    lbl.insert(labels::COMPUTER_UID.into(), uid.clone());
    lbl.insert(labels::NODE.into(), node.to_string());
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name(c)),
            labels: Some(lbl),
            annotations: Some([(NODE_ANNOTATION.to_string(), node.to_string())].into()),
            finalizers: Some(vec![labels::NODE_DATA_FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some([("storage".to_string(), c.spec.storage.size.clone())].into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            storage_class_name: Some(storage_class.into()),
            volume_mode: Some("Filesystem".into()),
            csi: Some(CSIPersistentVolumeSource {
                driver: CSI_DRIVER.into(),
                volume_handle: uid,
                volume_attributes: Some(BTreeMap::from([
                    (ATTR_NAMESPACE.to_string(), ns.clone()),
                    (ATTR_NAME.to_string(), c.name_any()),
                    (ATTR_UID.to_string(), SANDBOX_UID.to_string()),
                    (ATTR_GID.to_string(), SANDBOX_GID.to_string()),
                ])),
                ..Default::default()
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns),
                name: Some(pvc_name(c)),
                ..Default::default()
            }),
            node_affinity: pinned_to.map(|hostname| VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![hostname.into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The `kubernetes.io/hostname` a PV made before computers could move is
/// pinned to by its node affinity; None for a movable one.
pub fn pinned_hostname(pv: &PersistentVolume) -> Option<String> {
    pv.spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .iter()
        .find_map(|t| {
            t.match_expressions.iter().flatten().find_map(|e| {
                (e.key == "kubernetes.io/hostname" && e.operator == "In")
                    .then(|| e.values.as_ref().and_then(|v| v.first().cloned()))
                    .flatten()
            })
        })
}

/// True when `pv` is pinned to a node by node affinity.
pub fn pinned(pv: &PersistentVolume) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .is_some()
}

/// Removes the node agent's finalizer from PV `name` (for a volume whose
/// node is lost: its agent will never release it). Absent: nothing to do.
/// Errors: the API server's refusal.
pub async fn drop_node_data_finalizer(
    pvs: &kube::Api<PersistentVolume>,
    name: &str,
) -> crate::error::Result<()> {
    let Some(pv) = pvs.get_opt(name).await? else {
        return Ok(());
    };
    let finalizers: Vec<String> = pv
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != labels::NODE_DATA_FINALIZER)
        .cloned()
        .collect();
    if finalizers.len() == pv.finalizers().len() {
        return Ok(());
    }
    // The resourceVersion makes this a compare-and-swap of the list.
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": pv.resource_version(),
    }});
    match pvs
        .patch(
            name,
            &crate::writes::merge_params(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The node a PV is pinned to, from its label or annotation (the node name)
/// or its node affinity (the hostname label value).
pub fn node_of(pv: &PersistentVolume) -> Option<String> {
    if let Some(n) = pv
        .labels()
        .get(labels::NODE)
        .or_else(|| pv.annotations().get(NODE_ANNOTATION))
    {
        return Some(n.clone());
    }
    pinned_hostname(pv)
}
