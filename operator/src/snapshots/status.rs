//! A ComputerSnapshot's status: what to write after each try, and the
//! write itself (a merge patch of the status subresource, only when it
//! changed).

use agentcomputer_crds::{
    AgentComputer, ComputerSnapshot, ComputerSnapshotStatus, snapshot_reasons,
};
use agentcomputer_proto::v1 as pb;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::conditions;
use crate::context::Context;
use crate::error::Result;

/// The `Ready` condition's type.
pub(super) const READY: &str = "Ready";

/// The status of a snapshot not taken (or, with `ready`, taken before and
/// kept): `Ready` False (True when `ready`) with `reason` and `why`.
pub(super) fn waiting(
    old: &ComputerSnapshotStatus,
    reason: &str,
    why: String,
    ready: bool,
) -> ComputerSnapshotStatus {
    let mut next = old.clone();
    next.ready_to_use = Some(ready);
    next.conditions = conditions::set(
        &old.conditions,
        (READY, ready, reason, why),
        None,
        Timestamp::now(),
    );
    next
}

/// The status of a snapshot the agent took (`info`).
pub(super) fn taken(
    old: &ComputerSnapshotStatus,
    info: &pb::SnapshotInfo,
    handle: &str,
    computer: &AgentComputer,
    node: Option<String>,
) -> ComputerSnapshotStatus {
    let time = Timestamp::from_nanosecond(i128::from(info.created_unix_nanos))
        .unwrap_or_else(|_| Timestamp::now());
    let bytes = i64::try_from(info.database_bytes).unwrap_or(i64::MAX);
    let why = format!(
        "taken of computer {} at position {} of its backup log",
        computer.name_any(),
        info.position
    );
    ComputerSnapshotStatus {
        ready_to_use: Some(true),
        time: Some(Time(time)),
        size: Some(Quantity(agentcomputer_runtime_contract::human_quantity(
            info.database_bytes,
        ))),
        size_bytes: Some(bytes),
        computer_uid: computer.metadata.uid.clone(),
        node,
        snapshot_handle: Some(handle.to_string()),
        position: i64::try_from(info.position).ok(),
        conditions: conditions::set(
            &old.conditions,
            (READY, true, snapshot_reasons::TAKEN, why),
            None,
            Timestamp::now(),
        ),
    }
}

/// Writes `next` over `old` when they differ.
pub(super) async fn write(
    ctx: &Context,
    s: &ComputerSnapshot,
    ns: &str,
    old: &ComputerSnapshotStatus,
    next: ComputerSnapshotStatus,
) -> Result<()> {
    if *old == next {
        return Ok(());
    }
    let api: Api<ComputerSnapshot> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"status": next});
    api.patch_status(&s.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}
