//! Computer management calls.

use agentcomputer_fs::Limits;
use agentcomputer_proto::v1 as pb;
use tonic::Status;

use crate::registry::{ComputerInfo, Registry};

/// The API's view of a computer; its name is the one people know it by
/// (in a cluster `NAMESPACE/NAME`, see [`crate::computer::Settings::display_name`]).
pub fn to_proto(info: ComputerInfo) -> pb::Computer {
    pb::Computer {
        name: info.settings.shown_name().to_string(),
        max_bytes: info.settings.max_bytes,
        max_inodes: info.settings.max_inodes,
        used_bytes: info.usage.used_bytes,
        used_inodes: info.usage.used_inodes,
        created_unix_nanos: info.settings.created_unix_nanos,
        open: info.open,
        egress: Some(super::egress::to_proto(&info.settings.egress)),
        disk_bytes: info.usage.disk_bytes,
    }
}

pub async fn create(
    registry: &Registry,
    req: pb::CreateComputerRequest,
) -> Result<pb::Computer, Status> {
    let defaults = Limits::default();
    let limits = Limits {
        max_bytes: if req.max_bytes == 0 {
            defaults.max_bytes
        } else {
            req.max_bytes
        },
        max_inodes: if req.max_inodes == 0 {
            defaults.max_inodes
        } else {
            req.max_inodes
        },
    };
    let egress = super::egress::from_proto(req.egress)?;
    Ok(to_proto(registry.create(&req.name, limits, egress).await?))
}

pub async fn delete(
    registry: &Registry,
    req: pb::DeleteComputerRequest,
) -> Result<pb::DeleteComputerResponse, Status> {
    registry.delete(&req.name).await?;
    Ok(pb::DeleteComputerResponse {})
}

pub async fn get(registry: &Registry, req: pb::GetComputerRequest) -> Result<pb::Computer, Status> {
    Ok(to_proto(registry.get(&req.name).await?))
}

pub async fn list(registry: &Registry) -> Result<pb::ListComputersResponse, Status> {
    let computers = registry.list().await?.into_iter().map(to_proto).collect();
    Ok(pb::ListComputersResponse { computers })
}
