//! The CSI Identity service (CSI spec v1.12.0, "Identity Service RPC") and
//! the kubelet's plugin registration service
//! (`pluginregistration.Registration`, k8s.io/kubelet v0.36.3).

use std::path::PathBuf;
use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::{error, info};

use crate::handover::Listener;
use crate::pb::csi::identity_server::Identity;
use crate::pb::csi::{self as csi};
use crate::pb::registration as reg;
use crate::pb::registration::registration_server::Registration;

/// The CSI driver's name (the PV's `spec.csi.driver`).
pub const DRIVER_NAME: &str = "agentcomputer.dev";

/// The plugin type the kubelet's plugin watcher expects for a CSI driver.
pub const PLUGIN_TYPE: &str = "CSIPlugin";

/// CSI versions offered to the kubelet at registration.
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// The Identity service: ready while a node agent is connected.
pub struct IdentityService {
    handover: Arc<Listener>,
}

impl IdentityService {
    /// Reports readiness from `handover`'s connection state.
    pub fn new(handover: Arc<Listener>) -> IdentityService {
        IdentityService { handover }
    }
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: DRIVER_NAME.to_string(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    /// No capabilities: a node-only plugin (no Controller service, no
    /// topology constraints).
    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities: Vec::new(),
        }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse {
            ready: Some(self.handover.is_connected()),
        }))
    }
}

/// The registration service the kubelet's plugin watcher calls on
/// `<registration-dir>/agentcomputer.dev-reg.sock`.
pub struct RegistrationService {
    csi_socket: PathBuf,
}

impl RegistrationService {
    /// Announces the CSI endpoint at `csi_socket`.
    pub fn new(csi_socket: PathBuf) -> RegistrationService {
        RegistrationService { csi_socket }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: PLUGIN_TYPE.to_string(),
            name: DRIVER_NAME.to_string(),
            endpoint: self.csi_socket.display().to_string(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.get_ref();
        if status.plugin_registered {
            info!(driver = DRIVER_NAME, "registered with the kubelet");
        } else {
            error!(driver = DRIVER_NAME, error = %status.error, "the kubelet refused the registration");
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}
