//! The CSI Node service (CSI spec v1.12.0, "Node Service RPC"): request
//! validation and error codes; the mounting itself is [`crate::publish`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::pb::csi::node_server::Node;
use crate::pb::csi::volume_capability::AccessType;
use crate::pb::csi::volume_capability::access_mode::Mode;
use crate::pb::csi::{self as csi, node_service_capability, volume_usage};
use crate::publish::{FSTYPE, PublishError, PublishSpec, Publisher};

/// `volume_context` key of the mount owner's uid (set by the operator on the PV).
pub const CONTEXT_UID: &str = "agentcomputer.dev/uid";
/// `volume_context` key of the mount owner's gid.
pub const CONTEXT_GID: &str = "agentcomputer.dev/gid";
/// Owner uid/gid when the volume context names none: the sandbox user.
pub const DEFAULT_OWNER: u32 = 1000;

/// The Node service of one node.
pub struct NodeService {
    node_id: String,
    publisher: Arc<Publisher>,
}

impl NodeService {
    /// Answers for node `node_id` (the Kubernetes node name), mounting
    /// through `publisher`.
    pub fn new(node_id: String, publisher: Arc<Publisher>) -> NodeService {
        NodeService { node_id, publisher }
    }
}

impl From<PublishError> for Status {
    fn from(e: PublishError) -> Status {
        match e {
            PublishError::NotFound(m) => Status::not_found(m),
            PublishError::Unavailable(m) => Status::unavailable(m),
            PublishError::AlreadyExists(m) => Status::already_exists(m),
            PublishError::Internal(m) => Status::internal(m),
        }
    }
}

/// Checks the fields of NodePublishVolume and derives the mount to make.
/// Errors are `INVALID_ARGUMENT` (CSI spec, "Error Scheme": a missing,
/// invalid or unsupported field).
pub fn publish_spec(req: &csi::NodePublishVolumeRequest) -> Result<PublishSpec, Status> {
    let volume = volume_id(&req.volume_id)?;
    let target = target_path(&req.target_path, "target_path")?;
    let cap = req
        .volume_capability
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
    match &cap.access_type {
        None => {
            return Err(Status::invalid_argument(
                "volume_capability.access_type is required",
            ));
        }
        Some(AccessType::Block(_)) => {
            return Err(Status::invalid_argument(
                "block access is not supported: agentcomputer volumes are filesystems (use a mount volume)",
            ));
        }
        Some(AccessType::Mount(m)) => {
            if !m.fs_type.is_empty() && m.fs_type != FSTYPE {
                return Err(Status::invalid_argument(format!(
                    "fs_type {:?} is not supported: leave it empty or use {FSTYPE}",
                    m.fs_type
                )));
            }
            if !m.mount_flags.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "mount flags {:?} are not supported: the mount's options are fixed",
                    m.mount_flags
                )));
            }
        }
    }
    let mode = cap
        .access_mode
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("volume_capability.access_mode is required"))?
        .mode;
    let reader_only = match Mode::try_from(mode) {
        Ok(Mode::SingleNodeWriter | Mode::SingleNodeSingleWriter | Mode::SingleNodeMultiWriter) => {
            false
        }
        Ok(Mode::SingleNodeReaderOnly) => true,
        Ok(
            m @ (Mode::MultiNodeReaderOnly
            | Mode::MultiNodeSingleWriter
            | Mode::MultiNodeMultiWriter),
        ) => {
            return Err(Status::invalid_argument(format!(
                "access mode {} is not supported: an agentcomputer volume lives on one node",
                m.as_str_name()
            )));
        }
        Ok(Mode::Unknown) | Err(_) => {
            return Err(Status::invalid_argument(format!(
                "access mode {mode} is not supported"
            )));
        }
    };
    Ok(PublishSpec {
        volume: volume.to_string(),
        target,
        uid: owner_id(req, CONTEXT_UID)?,
        gid: owner_id(req, CONTEXT_GID)?,
        readonly: req.readonly || reader_only,
    })
}

fn owner_id(req: &csi::NodePublishVolumeRequest, key: &str) -> Result<u32, Status> {
    match req.volume_context.get(key) {
        None => Ok(DEFAULT_OWNER),
        Some(v) => v.parse::<u32>().map_err(|_| {
            Status::invalid_argument(format!("volume_context {key}={v:?} is not a numeric id"))
        }),
    }
}

/// The volume id: the computer's uid, a DNS-1123 label.
fn volume_id(id: &str) -> Result<&str, Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument("volume_id is required"));
    }
    if !is_volume_id(id) {
        return Err(Status::invalid_argument(format!(
            "volume_id {id:?} is not an agentcomputer volume id (a DNS-1123 label)"
        )));
    }
    Ok(id)
}

/// Whether `id` is a volume id: a non-empty DNS-1123 label (at most 63
/// lowercase letters, digits and `-`, not starting or ending with `-`).
pub fn is_volume_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

fn target_path(p: &str, field: &str) -> Result<PathBuf, Status> {
    if p.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} {p:?} is not absolute"
        )));
    }
    Ok(path.to_path_buf())
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        _: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "NodeStageVolume: no STAGE_UNSTAGE_VOLUME capability",
        ))
    }

    async fn node_unstage_volume(
        &self,
        _: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "NodeUnstageVolume: no STAGE_UNSTAGE_VOLUME capability",
        ))
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let spec = publish_spec(request.get_ref())?;
        self.publisher.publish(&spec).await?;
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.get_ref();
        let volume = volume_id(&req.volume_id)?;
        let target = target_path(&req.target_path, "target_path")?;
        self.publisher.unpublish(volume, &target).await?;
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let req = request.get_ref();
        let volume = volume_id(&req.volume_id)?;
        let path = target_path(&req.volume_path, "volume_path")?;
        let s = self.publisher.stats(volume, &path).await?;
        let usage = vec![
            csi::VolumeUsage {
                available: to_i64(s.available_bytes),
                total: to_i64(s.total_bytes),
                used: to_i64(s.used_bytes),
                unit: volume_usage::Unit::Bytes as i32,
            },
            csi::VolumeUsage {
                available: to_i64(s.available_inodes),
                total: to_i64(s.total_inodes),
                used: to_i64(s.used_inodes),
                unit: volume_usage::Unit::Inodes as i32,
            },
        ];
        Ok(Response::new(csi::NodeGetVolumeStatsResponse {
            usage,
            volume_condition: None,
        }))
    }

    async fn node_expand_volume(
        &self,
        _: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "NodeExpandVolume: no EXPAND_VOLUME capability",
        ))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        let rpc = node_service_capability::Rpc {
            r#type: node_service_capability::rpc::Type::GetVolumeStats as i32,
        };
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: vec![csi::NodeServiceCapability {
                r#type: Some(node_service_capability::Type::Rpc(rpc)),
            }],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::csi::volume_capability::{AccessMode, BlockVolume, MountVolume};

    fn request(mode: Mode) -> csi::NodePublishVolumeRequest {
        csi::NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            target_path: "/var/lib/kubelet/pods/p/volumes/v/mount".into(),
            volume_capability: Some(csi::VolumeCapability {
                access_mode: Some(AccessMode { mode: mode as i32 }),
                access_type: Some(AccessType::Mount(MountVolume::default())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_good_request_gives_its_mount() {
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_context.insert(CONTEXT_UID.into(), "1001".into());
        let s = publish_spec(&r).unwrap();
        assert_eq!(
            (s.volume.as_str(), s.uid, s.gid, s.readonly),
            ("vol-1", 1001, DEFAULT_OWNER, false)
        );
        assert!(
            publish_spec(&request(Mode::SingleNodeReaderOnly))
                .unwrap()
                .readonly
        );
    }

    #[test]
    fn bad_requests_are_invalid_arguments() {
        let code = |r: &csi::NodePublishVolumeRequest| publish_spec(r).unwrap_err().code();
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_id.clear();
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_id = "Not A Label".into();
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        let mut r = request(Mode::SingleNodeWriter);
        r.target_path = "relative".into();
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_capability = None;
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_capability.as_mut().unwrap().access_type = Some(AccessType::Block(BlockVolume {}));
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        for m in [
            Mode::MultiNodeMultiWriter,
            Mode::MultiNodeReaderOnly,
            Mode::MultiNodeSingleWriter,
            Mode::Unknown,
        ] {
            assert_eq!(code(&request(m)), tonic::Code::InvalidArgument, "{m:?}");
        }
        let mut r = request(Mode::SingleNodeWriter);
        r.volume_context.insert(CONTEXT_GID.into(), "staff".into());
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
        let mut r = request(Mode::SingleNodeWriter);
        if let Some(AccessType::Mount(m)) = &mut r.volume_capability.as_mut().unwrap().access_type {
            m.mount_flags.push("noatime".into());
        }
        assert_eq!(code(&r), tonic::Code::InvalidArgument);
    }
}
