//! The computer's PersistentVolume: CSI driver `agentcomputer.dev`, handle =
//! the computer's uid, node affinity to the serving node, capacity = quota,
//! pre-bound to the computer's PVC through `claimRef` (see "Reserving a
//! PersistentVolume" in the Kubernetes persistent volumes docs).
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

/// Builds the PV. `hostname` is the node's `kubernetes.io/hostname` label.
/// Its reclaim policy is Retain because no external provisioner exists to
/// delete it: the operator deletes it itself under the Delete policy.
pub fn build(
    c: &AgentComputer,
    node: &str,
    hostname: &str,
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
            node_affinity: Some(VolumeNodeAffinity {
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
