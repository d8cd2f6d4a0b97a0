//! Kubernetes API of Agent Computer: the `AgentComputer` custom resource
//! (group `agentcomputer.dev`, version `v1alpha1`, namespaced, short name
//! `computer`) and the `ComputerSnapshot` custom resource (short name
//! `csnap`).
//!
//! The Rust types here are the one place the API is defined. The CRD manifest
//! in `crds/agentcomputer.yaml` is generated from them by the `crdgen` binary
//! ([`crd_yaml`]), and a test fails when the committed file drifts.
//!
//! Validation follows the Kubernetes API conventions
//! (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md>):
//! OpenAPI bounds and enums for single fields, CEL `x-kubernetes-validations`
//! (<https://kubernetes.io/docs/reference/using-api/cel/>) for rules across
//! fields and across updates.

pub mod moves;
pub mod quantity;
pub mod reference;
mod snapshot;
mod spec;
mod status;

pub use snapshot::{
    ComputerSnapshot, ComputerSnapshotSpec, ComputerSnapshotStatus, SnapshotDeletionPolicy,
    SourceKind, SourceRef, snapshot_handle, snapshot_reasons,
};
pub use spec::{
    AgentComputer, AgentComputerSpec, CidrRule, EgressMode, EgressSpec, ExecLimits, PortRule,
    Protocol, ReclaimPolicy, RuntimesSpec, SandboxSpec, StorageSpec,
};
pub use status::{
    AgentComputerStatus, BackupStatus, ComputerPhase, VolumeStatus, backup_reasons,
    condition_types, placed_reasons, sandbox_reasons,
};

use kube::CustomResourceExt;

/// API group of every Agent Computer resource and of the CSI driver.
pub const GROUP: &str = "agentcomputer.dev";
/// Served and stored version of [`AgentComputer`].
pub const VERSION: &str = "v1alpha1";
/// Name of the CSI driver that serves computers' volumes (the node agent's
/// node plugin); also the `spec.csi.driver` of every computer's PersistentVolume.
pub const CSI_DRIVER: &str = "agentcomputer.dev";
/// gRPC port of the node agent (package `agentcomputer.v1`).
pub const NODE_AGENT_GRPC_PORT: u16 = 7433;
/// Port of the node agent's HTTP egress proxy, used by sandbox pods whose egress
/// policy allows host names.
pub const NODE_AGENT_PROXY_PORT: u16 = 3128;
/// uid the sandbox pod runs as (`runAsUser`), and so the owner of the files
/// the node agent serves to it: the PV's `agentcomputer.dev/uid` attribute;
/// gid of the sandbox pod (`runAsGroup`, `fsGroup`): the PV's
/// `agentcomputer.dev/gid` attribute. The same user as every runtime's.
pub use agentcomputer_runtime_contract::{SANDBOX_GID, SANDBOX_UID};
/// Exit status of a sandbox pod's `agentcomputer-runner serve` when its
/// node agent refuses the runner's attach protocol revision
/// (`SandboxRunner.Attach` answering FAILED_PRECONDITION; see
/// proto/agentcomputer/v1/agentcomputer.proto, `RunnerHello.protocol`). The
/// runner writes why to the container's termination message. The operator
/// reads it from the sandbox container's last termination and replaces the
/// pod when a newer runner image is configured. Equal to
/// `agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE`, which the runner uses
/// (a node agent test checks both).
pub const RUNNER_EXIT_INCOMPATIBLE: i32 = 3;
/// Exit status of a sandbox pod's `agentcomputer-runner serve` when the
/// sandbox's workspace mount has ended for good (its node agent did not
/// come back within the mounter's grace period, docs/csi.md): the pod's
/// containers bind the dead mount, so the operator replaces the pod and
/// reports [`sandbox_reasons::WORKSPACE_LOST`] until the new one is ready.
/// Equal to `agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST`.
pub const RUNNER_EXIT_WORKSPACE_LOST: i32 = 4;
/// storageClassName of computers' PersistentVolumes and claims, and of the
/// CSIStorageCapacity objects the node agents publish.
pub const STORAGE_CLASS: &str = "agentcomputer";
/// Field manager of the node agent's server-side applies (status.volume
/// usage, CSIStorageCapacity).
pub const NODE_AGENT_FIELD_MANAGER: &str = "agentcomputer-node-agent";
/// Field manager of the node agent's server-side applies of `status.backup`
/// and the `BackupHealthy` condition: a manager of their own, so that the
/// usage applies and the backup applies, each sending only its fields, do
/// not remove each other's.
pub const NODE_AGENT_BACKUP_FIELD_MANAGER: &str = "agentcomputer-node-agent-backup";

/// Name of the CSIStorageCapacity a node agent publishes for `node` in its
/// own namespace.
pub fn capacity_name(node: &str) -> String {
    format!("agentcomputer-{node}")
}

/// The well-known cloud metadata address (AWS, GCP, Azure, OpenStack), denied
/// to sandboxes unless `spec.egress.allowMetadata` is true.
pub const CLOUD_METADATA_CIDR: &str = "169.254.169.254/32";

/// Label keys and annotation keys that the operator and the node agent share.
pub mod labels {
    /// Name of the owning AgentComputer, on every object made for it.
    pub const COMPUTER: &str = "agentcomputer.dev/computer";
    /// Namespace of the owning AgentComputer (on cluster-scoped objects: PVs).
    pub const COMPUTER_NAMESPACE: &str = "agentcomputer.dev/computer-namespace";
    /// UID of the owning AgentComputer.
    pub const COMPUTER_UID: &str = "agentcomputer.dev/computer-uid";
    /// Role of a child object: `volume`, `credential`, `egress`, `sandbox`.
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    /// `app.kubernetes.io/managed-by` value set on every child object.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// Annotation (RFC 3339 time) the node agent sets on an AgentComputer when
    /// the computer was last used; the operator stops the sandbox pod once it is
    /// older than `spec.sandbox.idleTimeoutSeconds`.
    pub const LAST_ACTIVITY: &str = "agentcomputer.dev/last-activity";
    /// Label with the serving node's name: on an AgentComputer once placed, on
    /// its PersistentVolume, and on each node agent's CSIStorageCapacity.
    pub const NODE: &str = "agentcomputer.dev/node";
    /// Annotation `"true"` the operator puts on a PersistentVolume before
    /// deleting it under reclaim policy Delete (or a cluster admin, to remove
    /// a Retained volume's data): the node agent then deletes the database.
    /// Without it a deleted PV's data is kept.
    pub const DELETE_DATA: &str = "agentcomputer.dev/delete-data";
    /// Finalizer on every computer's PersistentVolume from its creation; the
    /// node agent of the PV's node removes it once it has deleted (or, without
    /// [`DELETE_DATA`], kept) the data.
    pub const NODE_DATA_FINALIZER: &str = "agentcomputer.dev/node-data";
    /// Annotation the operator puts on a computer with `spec.source`
    /// before it places it: the name, in the node agents' backup store, of
    /// the snapshot its files come from. The node agent that first serves
    /// the computer makes its database from that snapshot instead of an
    /// empty one.
    pub const SOURCE_SNAPSHOT: &str = "agentcomputer.dev/source-snapshot";
    /// CSI volumeAttributes key: the computer's namespace.
    pub const ATTR_NAMESPACE: &str = "agentcomputer.dev/namespace";
    /// CSI volumeAttributes key: the computer's name.
    pub const ATTR_NAME: &str = "agentcomputer.dev/name";
    /// CSI volumeAttributes key: uid owning the files as the sandbox sees them
    /// (decimal, [`crate::SANDBOX_UID`]).
    pub const ATTR_UID: &str = "agentcomputer.dev/uid";
    /// CSI volumeAttributes key: gid of the sandbox (decimal, [`crate::SANDBOX_GID`]).
    pub const ATTR_GID: &str = "agentcomputer.dev/gid";
}

/// The CustomResourceDefinitions of [`AgentComputer`] and
/// [`ComputerSnapshot`] as one YAML stream of two documents, exactly as
/// committed in `crds/agentcomputer.yaml` (and in the Helm chart's `crds/`).
///
/// Errors: only if serialization fails, which would be a bug in the types.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let computers = serde_yaml::to_string(&AgentComputer::crd())?;
    let snapshots = serde_yaml::to_string(&ComputerSnapshot::crd())?;
    let body = format!("{computers}---\n{snapshots}");
    Ok(format!(
        "# Generated from the Rust types in crds/src by `cargo run -p agentcomputer-crds --bin crdgen`.\n\
         # Do not edit by hand: a test fails when this file drifts from the types.\n{body}"
    ))
}
