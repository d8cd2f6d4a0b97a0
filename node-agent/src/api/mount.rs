//! Host FUSE mounts of computers (local mode): `Mount` and `Unmount`.

use std::path::Path;

use agentcomputer_proto::v1 as pb;
use tonic::Status;

use crate::registry::Registry;

/// Mounts `req.computer` at the agent host's directory `req.host_path`
/// (over a non-empty directory only with `req.nonempty`).
pub async fn mount(
    registry: &Registry,
    req: pb::MountRequest,
) -> Result<pb::MountResponse, Status> {
    registry
        .mount(&req.computer, Path::new(&req.host_path), req.nonempty)
        .await?;
    Ok(pb::MountResponse {})
}

/// Unmounts `req.computer` from `req.host_path`.
pub async fn unmount(
    registry: &Registry,
    req: pb::UnmountRequest,
) -> Result<pb::UnmountResponse, Status> {
    registry
        .unmount(&req.computer, Path::new(&req.host_path))
        .await?;
    Ok(pb::UnmountResponse {})
}
