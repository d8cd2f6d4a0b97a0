//! Moving a computer to another node: while it runs (`status.move`), the
//! record of the last one (`status.lastMove`), and the annotations and
//! labels that ask for and carry it. docs/moves.md tells the protocol.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a computer moves.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveReason {
    /// Its node was cordoned (`kubectl cordon`, `kubectl drain`).
    NodeCordoned,
    /// Someone asked (`kubectl computer move`, annotation
    /// [`MOVE_REQUEST`]).
    Requested,
    /// Its node is gone, or its node agent has not been ready for longer
    /// than the operator's `--failover-after` (or annotation
    /// [`FAILOVER`] says `now`): it comes back from object storage.
    NodeLost,
}

impl MoveReason {
    /// The reason as it appears in status and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::NodeCordoned => "NodeCordoned",
            MoveReason::Requested => "Requested",
            MoveReason::NodeLost => "NodeLost",
        }
    }
}

/// How far a move got.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MovePhase {
    /// The target's node agent restores the computer from object storage
    /// in the background while the source keeps serving it.
    Preparing,
    /// The source stopped serving (calls wait), ships its last changes and
    /// gives its writer Lease up; the target then takes over.
    HandingOver,
}

/// A move of the computer that has not finished.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MoveStatus {
    /// The node serving the computer until the move ends.
    pub source: String,
    /// The node it moves to.
    pub target: String,
    /// Why it moves.
    pub reason: MoveReason,
    /// How far it got.
    pub phase: MovePhase,
    /// When the move began.
    pub started_time: Time,
    /// When the source was told to stop serving (phase HandingOver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hand_over_time: Option<Time>,
}

/// The last move that ended, kept until the next one.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MoveRecord {
    /// The node that served the computer before.
    pub source: String,
    /// The node that serves it now.
    pub target: String,
    /// Why it moved.
    pub reason: MoveReason,
    /// When the move began.
    pub started_time: Time,
    /// When the target was made the computer's node.
    pub finished_time: Time,
    /// Milliseconds from the source being told to stop serving to the
    /// target being made the computer's node: calls wait this long (plus
    /// the target's catch-up on its first call). Absent after a node loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hand_over_millis: Option<i64>,
    /// After a node loss: the latest backup position the source's node
    /// agent had reported, and when that position was shipped. The target
    /// restores from the store's latest position, which is this one or
    /// later; writes the lost node committed after it may be lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reported_position: Option<i64>,
    /// When the position above was shipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reported_shipped_time: Option<Time>,
    /// After a node loss: when the operator saw the source's node agent
    /// stop being ready (absent when unknown). The writes the lost node
    /// committed after `lastReportedShippedTime` (or after the store's
    /// latest position) and before its writer Lease's renew deadline may
    /// be lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_last_ready_time: Option<Time>,
}

/// Annotation on an AgentComputer asking the operator to move it: the
/// target node's name, or empty for any eligible node
/// (`kubectl computer move NAME [--to NODE]`). The operator removes it
/// when the move ends or cannot start (a Warning event says why).
pub const MOVE_REQUEST: &str = "agentcomputer.dev/move-to";

/// Annotation on an AgentComputer: `now` fails it over to another node at
/// once when its node agent is not ready, instead of after the operator's
/// `--failover-after`. Removed by the operator once acted upon.
pub const FAILOVER: &str = "agentcomputer.dev/failover";

/// Label the operator puts on an AgentComputer that moves, with the
/// target node's name: that node's agent restores it in the background.
pub const MOVE_TARGET_LABEL: &str = "agentcomputer.dev/move-target";

/// Annotation the operator puts on a moving AgentComputer when its source
/// must stop serving it (the target's name): the source's node agent
/// holds new calls, closes the computer (shipping its last changes) and
/// releases its writer Lease.
pub const HAND_OVER_TO: &str = "agentcomputer.dev/hand-over-to";

/// Annotation a target node agent puts on the computer's writer Lease once
/// it restored the computer in the background: `<node> <position>`.
pub const PREPARED_ON: &str = "agentcomputer.dev/prepared-on";

/// Condition type: a move runs (True, reason [`MoveReason`]'s name and
/// source and target in the message) or the last one ended or cannot
/// happen (False; reasons in [`move_condition_reasons`]).
pub const MOVING: &str = "Moving";

/// Reasons of `Moving=False`.
pub mod move_condition_reasons {
    /// The last move ended; the message names its source and target.
    pub const MOVED: &str = "Moved";
    /// The node is cordoned or lost but the computer cannot move: the
    /// node agents have no backup store, so its data cannot follow.
    pub const NO_BACKUP: &str = "NoBackupStore";
    /// No other node is eligible (the message counts nodes per cause).
    pub const NO_TARGET: &str = "NoEligibleTarget";
    /// The requested target is not an eligible node.
    pub const BAD_TARGET: &str = "TargetNotEligible";
    /// The source did not hand the computer over within the operator's
    /// limit (10 minutes); it stays there.
    pub const HAND_OVER_TIMED_OUT: &str = "HandOverTimedOut";
}

/// Annotation the source's node agent puts on the computer's writer Lease
/// once it closed the computer, shipped its last changes and released the
/// Lease for a move: `<target> <position>` (the last position shipped).
pub const HANDED_OVER_TO: &str = "agentcomputer.dev/handed-over-to";
