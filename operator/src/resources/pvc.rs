//! The computer's PersistentVolumeClaim, pre-bound to its PV by `volumeName`.

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{child_labels, owner, pv_name, pvc_name};

/// Builds the PVC requesting `request` (the quota when it is created; a
/// statically bound claim cannot be resized, so later applies keep the
/// request it has).
pub fn build(c: &AgentComputer, storage_class: &str, request: Quantity) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(pvc_name(c)),
            namespace: c.namespace(),
            labels: Some(child_labels(c, "volume")),
            owner_references: Some(owner(c)),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(storage_class.into()),
            volume_mode: Some("Filesystem".into()),
            volume_name: Some(pv_name(c)),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), request)].into()),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The storage request of an existing claim.
pub fn request_of(pvc: &PersistentVolumeClaim) -> Option<Quantity> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .cloned()
}
