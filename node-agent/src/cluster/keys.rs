//! Names the node agent shares with the operator through Kubernetes objects
//! (the cluster contract written down in docs/cluster.md).

/// Label on AgentComputers and on their PersistentVolumes: the node whose
/// agent serves the computer. Set by the operator once it placed it.
pub const NODE_LABEL: &str = "agentcomputer.dev/node";

/// Finalizer the operator puts on every computer's PersistentVolume at
/// creation; the node agent of the PV's node removes it once it has dealt
/// with the data (deleted or kept).
pub const NODE_DATA_FINALIZER: &str = "agentcomputer.dev/node-data";

/// Annotation on a PersistentVolume: `"true"` asks the node agent to delete
/// the computer's database when the PV is deleted. Without it the data is
/// kept.
pub const DELETE_DATA_ANNOTATION: &str = "agentcomputer.dev/delete-data";

/// Field manager of every write of the node agent (server-side apply and
/// patches), so that `managedFields` shows which fields it owns.
pub const FIELD_MANAGER: &str = "agentcomputer-node-agent";

/// StorageClass of the computers' volumes; the CSIStorageCapacity objects
/// of the node agents are published for it.
pub const STORAGE_CLASS: &str = "agentcomputer";

/// Node label the kubelet sets to the node's name; the topology key of the
/// published capacity.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Name of the CSIStorageCapacity a node agent publishes for `node`.
pub fn capacity_name(node: &str) -> String {
    format!("agentcomputer-{node}")
}

/// Name of the PersistentVolume the operator creates for the computer whose
/// `metadata.uid` is `uid` (its CSI volume handle is `uid`).
pub fn volume_name(uid: &str) -> String {
    format!("agentcomputer-{uid}")
}
