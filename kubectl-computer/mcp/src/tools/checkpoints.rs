//! `snapshot` and `restore`: an agent checkpoints its computer before a
//! risky step and comes back to it (docs/snapshots.md).

use agentcomputer_proto::v1 as pb;
use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::result::success;
use super::router::Tools;
use crate::error::Error;

/// Arguments of `snapshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotParams {
    /// A name for the snapshot: 1-63 lowercase letters, digits or '-'
    /// [default: the computer's name and the time].
    pub name: Option<String>,
}

/// Arguments of `restore`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RestoreParams {
    /// The snapshot to go back to (a name `snapshot` returned).
    pub snapshot: String,
}

impl Tools {
    pub(super) async fn checkpoint(&self, p: SnapshotParams) -> Result<CallToolResult, Error> {
        let mut client = self.agent.client();
        let s = client
            .snapshot(pb::SnapshotRequest {
                computer: self.agent.computer(),
                snapshot: p.name.unwrap_or_default(),
            })
            .await?
            .into_inner();
        Ok(success(
            format!(
                "snapshot {} taken ({} ms); `restore` with snapshot {:?} brings every file back to this point",
                s.name, s.duration_ms, s.name
            ),
            json!({
                "snapshot": s.name,
                "position": s.position,
                "created_unix_nanos": s.created_unix_nanos,
                "database_bytes": s.database_bytes,
            }),
        ))
    }

    pub(super) async fn go_back(&self, p: RestoreParams) -> Result<CallToolResult, Error> {
        let mut client = self.agent.client();
        let r = client
            .restore_computer(pb::RestoreComputerRequest {
                computer: self.agent.computer(),
                snapshot: p.snapshot.clone(),
                unix_nanos: 0,
            })
            .await?
            .into_inner();
        let undo = r.before.map(|b| b.name).unwrap_or_default();
        Ok(success(
            format!(
                "restored to snapshot {}: every file is as it was then ({} running program(s) ended); the state before the restore is snapshot {undo:?}",
                p.snapshot, r.ended_runs
            ),
            json!({
                "snapshot": p.snapshot,
                "undo_snapshot": undo,
                "ended_runs": r.ended_runs,
                "duration_ms": r.duration_ms,
            }),
        ))
    }
}
