//! Builders of the objects the operator makes for a computer. Each returns a
//! complete object for server-side apply; none talks to the API.
//!
//! | object | name | owner |
//! |---|---|---|
//! | PersistentVolume (cluster) | `agentcomputer-<uid>` | none (labels) |
//! | PersistentVolumeClaim | `<name>-workspace` | the computer |
//! | Secret | `<name>-credential` | the computer |
//! | NetworkPolicy | `<name>-egress` | the computer |
//! | Pod (container runtime) | `<name>-sandbox` | the computer |
//!
//! A PersistentVolume cannot have a namespaced owner (the garbage collector
//! would treat the owner as absent and delete it), so the operator's
//! finalizer releases it explicitly.

pub mod netpol;
pub mod pod;
pub mod pv;
pub mod pvc;
pub mod secret;

use std::collections::BTreeMap;

use agentcomputer_crds::{AgentComputer, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

/// Name of the computer's PersistentVolume (cluster-scoped, so keyed by uid).
pub fn pv_name(c: &AgentComputer) -> String {
    pv_name_of(&c.uid().unwrap_or_default())
}

/// Name of the PersistentVolume of the computer of uid `uid`.
pub fn pv_name_of(uid: &str) -> String {
    format!("agentcomputer-{uid}")
}

/// Name of the computer's PersistentVolumeClaim.
pub fn pvc_name(c: &AgentComputer) -> String {
    format!("{}-workspace", c.name_any())
}

/// Name of the computer's credential Secret.
pub fn secret_name(c: &AgentComputer) -> String {
    format!("{}-credential", c.name_any())
}

/// Name of the computer's sandbox NetworkPolicy.
pub fn netpol_name(c: &AgentComputer) -> String {
    format!("{}-egress", c.name_any())
}

/// Name of the computer's sandbox pod.
pub fn pod_name(c: &AgentComputer) -> String {
    format!("{}-sandbox", c.name_any())
}

/// Labels of every child object: managed-by, computer name, component.
pub fn child_labels(c: &AgentComputer, component: &str) -> BTreeMap<String, String> {
    [
        (
            labels::MANAGED_BY.to_string(),
            crate::MANAGED_BY.to_string(),
        ),
        (labels::COMPUTER.to_string(), c.name_any()),
        (labels::COMPONENT.to_string(), component.to_string()),
    ]
    .into()
}

/// Controller owner reference to the computer (garbage collection of
/// namespaced children, and the controller's `owns` watches).
pub fn owner(c: &AgentComputer) -> Vec<OwnerReference> {
    c.controller_owner_ref(&()).into_iter().collect()
}
