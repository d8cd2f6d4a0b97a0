//! The status step: writes the status [`crate::status::derive`] made to
//! the computer's status subresource, by server-side apply, only when it
//! differs from the status the computer has.

use agentcomputer_crds::{AgentComputer, AgentComputerStatus, condition_types};
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch};

use crate::context::Context;
use crate::error::Result;
use crate::writes::ssa;

/// Writes `status` unless it equals `old`. What the node agent reports
/// (`status.volume.{bytesUsed,inodesUsed,diskBytes}`, `status.backup` and
/// the `BackupHealthy` condition, its own fields) is left out of both for
/// the comparison and never sent, so the operator neither owns nor clears
/// it. Errors: the API server's refusal, or a transport failure.
pub async fn write(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    mut status: AgentComputerStatus,
) -> Result<()> {
    without_node_agent_fields(&mut status);
    let mut was = old.clone();
    without_node_agent_fields(&mut was);
    if status == was {
        return Ok(());
    }
    let name = c.name_any();
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(&name, &ssa(), &Patch::Apply(status_only(c, status)))
        .await?;
    Ok(())
}

/// `status` without the fields the node agent owns.
fn without_node_agent_fields(status: &mut AgentComputerStatus) {
    if let Some(v) = status.volume.as_mut() {
        v.bytes_used = None;
        v.inodes_used = None;
        v.disk_bytes = None;
    }
    status.backup = None;
    status
        .conditions
        .retain(|c| c.type_ != condition_types::BACKUP_HEALTHY);
}

/// The typed object a status apply sends: the computer's name, its spec as
/// read (the status subresource resets `spec`, so it is neither changed nor
/// owned by this apply), and `status`.
fn status_only(c: &AgentComputer, status: AgentComputerStatus) -> AgentComputer {
    AgentComputer {
        metadata: ObjectMeta {
            name: Some(c.name_any()),
            ..Default::default()
        },
        spec: c.spec.clone(),
        status: Some(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::{BackupStatus, VolumeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn condition(type_: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    /// What the node agent reports neither makes the operator write nor
    /// goes into its apply; everything else is kept.
    #[test]
    fn node_agent_fields_are_left_out() {
        let ours = AgentComputerStatus {
            volume: Some(VolumeStatus {
                claim_name: Some("c".into()),
                ..Default::default()
            }),
            conditions: vec![condition("Ready")],
            ..Default::default()
        };
        let mut reported = ours.clone();
        reported.volume.as_mut().unwrap().bytes_used = Some(5);
        reported.backup = Some(BackupStatus {
            position: Some(3),
            ..Default::default()
        });
        reported
            .conditions
            .push(condition(condition_types::BACKUP_HEALTHY));
        let mut stripped = reported.clone();
        without_node_agent_fields(&mut stripped);
        assert_eq!(stripped, ours);
    }
}
