//! `ComputerSnapshot`: a snapshot of one computer as a namespaced object,
//! shaped after the CSI `VolumeSnapshot` (`spec.computer` for its
//! `source.persistentVolumeClaimName`; `status.readyToUse`, `status.time`
//! for its `creationTime`, `status.size` for its `restoreSize`), and
//! `spec.source` of an AgentComputer, shaped after a claim's
//! `dataSourceRef`. docs/snapshots.md tells how the operator takes one.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A consistent point in time of a computer's whole filesystem, taken by
/// the node agent serving it (a named position of its continuous backup
/// log, so it needs the node agents' backup store).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcomputer.dev",
    version = "v1alpha1",
    kind = "ComputerSnapshot",
    plural = "computersnapshots",
    singular = "computersnapshot",
    shortname = "csnap",
    namespaced,
    status = "ComputerSnapshotStatus",
    derive = "PartialEq",
    validation = Rule::new("self.spec.computer == oldSelf.spec.computer").message("spec.computer is immutable: a snapshot is of one computer"),
    doc = "ComputerSnapshot is a consistent point in time of an AgentComputer's whole filesystem, taken while it stays in use. An AgentComputer starts from it with spec.source.",
    printcolumn(name = "Computer", type_ = "string", json_path = ".spec.computer", description = "The computer the snapshot is of"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.readyToUse", description = "Whether a computer can start from it"),
    printcolumn(name = "Size", type_ = "string", json_path = ".status.size", description = "Size of the computer's database at the snapshot"),
    printcolumn(name = "Time", type_ = "date", json_path = ".status.time", description = "When the snapshot was taken"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ComputerSnapshotSpec {
    /// Name of the AgentComputer (in this namespace) to snapshot.
    /// Immutable.
    #[schemars(length(min = 1, max = 253))]
    pub computer: String,

    /// What happens to this snapshot when its computer is deleted: Delete
    /// (default) makes the computer its owner, so the snapshot goes with
    /// it; Retain keeps the object, and a computer can still start from it
    /// while the computer's data is kept (storage.reclaimPolicy Retain).
    /// Deleting the snapshot itself deletes it at the node agent.
    #[serde(default)]
    pub deletion_policy: SnapshotDeletionPolicy,
}

/// What deleting a snapshot's computer does to the snapshot.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotDeletionPolicy {
    /// Deleted with its computer (an ownerReference to it).
    #[default]
    Delete,
    /// Kept when its computer is deleted.
    Retain,
}

/// What the operator observed of a snapshot.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComputerSnapshotStatus {
    /// Whether the snapshot is taken and a computer can start from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,

    /// When the snapshot was taken (the node agent's time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,

    /// Size of the computer's database at the snapshot, as a quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,

    /// The same size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,

    /// uid of the computer the snapshot is of (a computer deleted and made
    /// again under the same name is another computer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_uid: Option<String>,

    /// The node whose agent took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,

    /// The snapshot's name in the node agents' backup store
    /// (`cs-` and this object's uid: unique in the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_handle: Option<String>,

    /// Position of the computer's backup log the snapshot names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,

    /// Latest observations, one per type: Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Reasons of a ComputerSnapshot's `Ready` condition.
pub mod snapshot_reasons {
    /// True: taken.
    pub const TAKEN: &str = "Taken";
    /// The computer named by spec.computer does not exist.
    pub const COMPUTER_NOT_FOUND: &str = "ComputerNotFound";
    /// The computer is not served yet (no node agent endpoint or
    /// credential): retried.
    pub const COMPUTER_NOT_READY: &str = "ComputerNotReady";
    /// The node agents have no backup store, where snapshots live.
    pub const NO_BACKUP_STORE: &str = "NoBackupStore";
    /// The node agent refused or failed the snapshot (the message says
    /// why): retried.
    pub const SNAPSHOT_FAILED: &str = "SnapshotFailed";
    /// The computer is gone (the snapshot was kept: deletionPolicy
    /// Retain). readyToUse stays true while the computer's volume is kept
    /// (reclaimPolicy Retain), whose data holds the log the snapshot is a
    /// position of; it is false once the data was deleted with it.
    pub const COMPUTER_DELETED: &str = "ComputerDeleted";
}

/// Where a new AgentComputer's files come from, shaped like a
/// PersistentVolumeClaim's `dataSourceRef`: an object in the computer's
/// namespace. Immutable; only read when the computer is first placed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.apiGroup) || self.apiGroup == 'agentcomputer.dev'").message("source.apiGroup must be agentcomputer.dev (or left out)").field_path(".apiGroup")
)]
pub struct SourceRef {
    /// agentcomputer.dev, the group of both kinds (may be left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// ComputerSnapshot (its files then) or AgentComputer (a fork: its
    /// files now).
    pub kind: SourceKind,
    /// Name of the object, in the computer's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The kinds a computer can start from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A snapshot: the files it holds.
    ComputerSnapshot,
    /// Another computer: its files as they are when the new one is placed.
    AgentComputer,
}

impl SourceKind {
    /// The kind as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ComputerSnapshot => "ComputerSnapshot",
            SourceKind::AgentComputer => "AgentComputer",
        }
    }
}

/// The snapshot name a ComputerSnapshot of uid `uid` has in the node
/// agents' backup store: a DNS-1123 label, unique in the store.
pub fn snapshot_handle(uid: &str) -> String {
    format!("cs-{uid}")
}
