//! `AgentComputer.status`: what the operator (and the node agent) observed.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of an AgentComputer. Written by the operator (field manager
/// `agentcomputer-operator`), except volume.bytesUsed, volume.inodesUsed
/// and volume.diskBytes, which the serving node agent reports, and backup
/// with the BackupHealthy condition, which it reports when it backs
/// computers up (field manager `agentcomputer-node-agent-backup`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentComputerStatus {
    /// Lifecycle phase: Pending (no node with a ready node agent fits yet),
    /// Ready (placed; volume, credential and policy in place), Unavailable (the
    /// node or its agent is gone; the data stays on that node), Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ComputerPhase>,

    /// Name of the node whose agent serves this computer. It changes only
    /// by a move (`move`, `lastMove`), which needs the node agents'
    /// backup store: the data follows through object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,

    /// The computer's volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeStatus>,

    /// The computer's continuous backup to object storage, as the serving
    /// node agent last reported it; absent when the agent has no backup
    /// store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupStatus>,

    /// A move to another node, while one runs (docs/moves.md).
    #[serde(default, rename = "move", skip_serializing_if = "Option::is_none")]
    pub moving: Option<crate::moves::MoveStatus>,

    /// The last move that ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_move: Option<crate::moves::MoveRecord>,

    /// host:port of the serving node agent's gRPC API (agentcomputer.v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,

    /// Name of the Secret (in the computer's namespace) whose "token" key is
    /// the computer's access credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_secret: Option<String>,

    /// Fingerprint of the computer's access credential, "sha256:" and the
    /// lowercase hex SHA-256 (FIPS 180-4) of the Secret's token. The node
    /// agent checks tokens against it and never reads the Secret; a
    /// rotated token changes it, which revokes the old token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_hash: Option<String>,

    /// Name of the sandbox pod, while the container runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_pod: Option<String>,

    /// Latest observations of the computer's state, one per type: Placed,
    /// VolumeReady, CredentialReady, EgressReady, SandboxReady, Ready,
    /// Reconciled and Moving (the operator's), BackupHealthy (the node
    /// agent's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// metadata.generation of the spec this status describes: it moves
    /// only once every step of a generation was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Lifecycle phase of an AgentComputer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComputerPhase {
    /// Waiting for a node with a ready node agent that fits the computer.
    Pending,
    /// Placed; volume, credential and network policy are in place.
    Ready,
    /// The serving node or its node agent is gone or not ready.
    Unavailable,
    /// Being deleted; the volume is released per storage.reclaimPolicy.
    Terminating,
}

impl ComputerPhase {
    /// Every phase, in lifecycle order (for metrics).
    pub const ALL: [ComputerPhase; 4] = [
        ComputerPhase::Pending,
        ComputerPhase::Ready,
        ComputerPhase::Unavailable,
        ComputerPhase::Terminating,
    ];

    /// The phase as it appears in status.phase.
    pub const fn as_str(self) -> &'static str {
        match self {
            ComputerPhase::Pending => "Pending",
            ComputerPhase::Ready => "Ready",
            ComputerPhase::Unavailable => "Unavailable",
            ComputerPhase::Terminating => "Terminating",
        }
    }
}

/// The computer's volume: a PersistentVolume of the agentcomputer.dev CSI
/// driver bound to a PersistentVolumeClaim in the computer's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    /// Name of the PersistentVolumeClaim in the computer's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Name of the (cluster-scoped) PersistentVolume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// Capacity (the quota) of the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Quantity>,
    /// Phase of the PersistentVolumeClaim (Pending, Bound, Lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_phase: Option<String>,
    /// Bytes used by the filesystem, as last reported by the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_used: Option<i64>,
    /// Inodes used by the filesystem, as last reported by the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<i64>,
    /// Bytes the computer's database takes on the node's disk (database
    /// file plus its write-ahead log), as last reported by the node agent.
    /// Unlike `bytesUsed` it counts free pages not yet given back and the
    /// log; it stays within 1.25 x the quota + 64 MiB after a checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<i64>,
    /// `diskBytes` for people, as a quantity rounded down to one decimal
    /// of its largest binary unit (`25Mi`, `1.5Gi`, `512`), reported with
    /// it by the node agent; the `Disk` printer column shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
}

/// The computer's continuous backup, as the serving node agent reports it
/// (at most once per its `--status-interval`, at once when its health
/// changes).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The latest position of the computer's log in the store (each
    /// position is one uploaded object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// When the latest object went up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_shipped_time: Option<Time>,
    /// How long the oldest commit not yet in the store has waited, in
    /// seconds; 0 when everything committed is shipped (and while the
    /// computer is hibernated: it was shipped whole when it closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
}

/// Reasons of the `Placed` condition when it is False.
pub mod placed_reasons {
    /// No node fits now (the message counts nodes per cause); nodes may
    /// come, free room or become ready, so the operator keeps trying.
    pub const NO_ELIGIBLE_NODE: &str = "NoEligibleNode";
    /// Every node that could serve the computer (ready, with a ready node
    /// agent that published its room) has less room than
    /// `spec.storage.size`, and the others are excluded by the computer's
    /// own nodeSelector or tolerations: no node of the cluster as it is can
    /// hold the quota. The operator keeps trying (a node may be added, room
    /// may be freed); a client waiting for `Ready` stops here, saying so.
    pub const NO_NODE_HAS_ROOM: &str = "NoNodeHasRoom";
    /// `spec.storage.size` has no byte count: final until the spec changes.
    pub const INVALID_SIZE: &str = "InvalidSize";
    /// `spec.source` names an object that does not exist (yet): retried.
    pub const SOURCE_NOT_FOUND: &str = "SourceNotFound";
    /// `spec.source` names a ComputerSnapshot that is not readyToUse, or
    /// an AgentComputer not served yet (or whose snapshot for the copy
    /// failed): retried.
    pub const SOURCE_NOT_READY: &str = "SourceNotReady";
    /// The source is on a node that cannot take the computer, and the node
    /// agents have no backup store (operator `--moves`) to carry it to
    /// another: the computer waits for that node.
    pub const SOURCE_ON_ANOTHER_NODE: &str = "SourceOnAnotherNode";
    /// The reasons that no amount of waiting changes: only a new spec
    /// does. A client waiting for `Ready` stops at one of them.
    pub const FINAL: &[&str] = &[INVALID_SIZE];
    /// The reasons a client waiting for `Ready` stops at although the
    /// computer may still be placed later, without a new spec: no current
    /// node can hold it, and only a change of the cluster (a node added,
    /// room freed) places it.
    pub const UNTIL_THE_CLUSTER_CHANGES: &[&str] = &[NO_NODE_HAS_ROOM, SOURCE_ON_ANOTHER_NODE];
}

/// Condition types of [`AgentComputerStatus::conditions`].
pub mod condition_types {
    /// A node with a ready node agent was chosen.
    pub const PLACED: &str = "Placed";
    /// The PersistentVolume and PersistentVolumeClaim exist.
    pub const VOLUME_READY: &str = "VolumeReady";
    /// The credential Secret exists.
    pub const CREDENTIAL_READY: &str = "CredentialReady";
    /// The sandbox NetworkPolicy matches spec.egress.
    pub const EGRESS_READY: &str = "EgressReady";
    /// The sandbox pod is running and ready (container runtime only).
    pub const SANDBOX_READY: &str = "SandboxReady";
    /// Summary: the computer can serve execs.
    pub const READY: &str = "Ready";
    /// The last reconcile applied every step of the current generation;
    /// False names the step that failed and the API server's reason.
    pub const RECONCILED: &str = "Reconciled";
    /// The node agent's continuous backup of the computer runs and keeps
    /// up (node agents with a backup store only; reasons in
    /// [`crate::backup_reasons`]). Written by the node agent, never by the
    /// operator.
    pub const BACKUP_HEALTHY: &str = "BackupHealthy";
}

/// Reasons of the `BackupHealthy` condition.
pub mod backup_reasons {
    /// True: the computer is open and its shipper keeps up.
    pub const SHIPPING: &str = "Shipping";
    /// True: the computer is hibernated; everything it committed was
    /// shipped when it closed.
    pub const SHIPPED_AT_CLOSE: &str = "ShippedAtClose";
    /// False: the backup does not run: the shipper could not start, or it
    /// stopped (another writer fenced it, the database failed); the message
    /// says why. Writes the computer accepts are not backed up.
    pub const STOPPED: &str = "BackupStopped";
    /// False: the shipper runs but commits have waited longer than the
    /// node agent's limit (30 s) to be shipped: uploads fail or cannot keep
    /// up.
    pub const FAILING: &str = "BackupFailing";
}

/// Reasons of the `SandboxReady` condition that mean the sandbox pod is on
/// its way (or stopped on purpose) rather than failing. Any other reason
/// of `SandboxReady=False` names why the pod cannot run: the API server's
/// refusal ([`sandbox_reasons::REJECTED`]) or the kubelet's own waiting
/// reason (`ErrImagePull`, `ImagePullBackOff`, `CrashLoopBackOff`,
/// `CreateContainerConfigError`…, see the kubelet's
/// `pkg/kubelet/images/types.go` and `container/sync_result.go`), which
/// the node agent reports to an exec waiting for the pod.
pub mod sandbox_reasons {
    /// The pod is running and ready.
    pub const RUNNING: &str = "Running";
    /// The pod exists and is starting (scheduled, pulling, initialising).
    pub const STARTING: &str = "Starting";
    /// The pod was stopped after `spec.sandbox.idleTimeoutSeconds` without
    /// activity; use (the `last-activity` annotation) starts it again.
    pub const IDLE: &str = "Idle";
    /// The pod is being replaced after its spec changed.
    pub const REPLACING: &str = "Replacing";
    /// The API server refused the pod (admission, quota, Pod Security).
    pub const REJECTED: &str = "SandboxRejected";
    /// A pod that ended (phase `Failed` or `Succeeded`, e.g. evicted); it
    /// is replaced, so this counts as progress.
    pub const ENDED: &str = "PodEnded";
    /// The node agent refuses the pod's runner (an attach protocol revision
    /// it does not serve) and no other runner image is configured: the
    /// runner is restarted by the kubelet until a node agent that serves it
    /// runs on the node.
    pub const RUNNER_INCOMPATIBLE: &str = "RunnerIncompatible";
    /// The sandbox's workspace mount ended for good (its node agent did not
    /// come back within the mounter's grace period, docs/csi.md): the pod
    /// is replaced, and the reason stays until the new pod is ready.
    pub const WORKSPACE_LOST: &str = "WorkspaceLost";

    /// Whether `reason` (of `SandboxReady=False`) means the pod is
    /// starting or stopped on purpose, not failing.
    pub fn is_progress(reason: &str) -> bool {
        matches!(reason, RUNNING | STARTING | IDLE | REPLACING | ENDED)
    }
}
