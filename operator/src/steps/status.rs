//! The status step: writes the status [`crate::status::derive`] made to
//! the computer's status subresource, by server-side apply, only when it
//! differs from the status the computer has.

use agentcomputer_crds::{AgentComputer, AgentComputerStatus};
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch};

use crate::context::Context;
use crate::error::Result;
use crate::writes::ssa;

/// Writes `status` unless it equals `old`. The usage the node agent reports
/// (`status.volume.{bytesUsed,inodesUsed,diskBytes}`, its own fields) is
/// carried over from `old` for the comparison and never sent, so the
/// operator neither owns nor clears it. Errors: the API server's refusal,
/// or a transport failure.
pub async fn write(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    old: &AgentComputerStatus,
    mut status: AgentComputerStatus,
) -> Result<()> {
    if let (Some(v), Some(o)) = (status.volume.as_mut(), old.volume.as_ref()) {
        v.bytes_used = o.bytes_used;
        v.inodes_used = o.inodes_used;
        v.disk_bytes = o.disk_bytes;
    }
    if &status == old {
        return Ok(());
    }
    if let Some(v) = status.volume.as_mut() {
        v.bytes_used = None;
        v.inodes_used = None;
        v.disk_bytes = None;
    }
    let name = c.name_any();
    let api: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(&name, &ssa(), &Patch::Apply(status_only(c, status)))
        .await?;
    Ok(())
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
