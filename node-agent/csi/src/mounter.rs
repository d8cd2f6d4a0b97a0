//! The mounter process: prepares its directories, binds its three sockets
//! and serves until told to stop.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::handover::Listener;
use crate::identity::{DRIVER_NAME, IdentityService, RegistrationService};
use crate::node::NodeService;
use crate::pb::csi::identity_server::IdentityServer;
use crate::pb::csi::node_server::NodeServer;
use crate::pb::registration::registration_server::RegistrationServer;
use crate::publish::{Publisher, Table};
use crate::sockets;

/// Settings of the mounter (the binary's flags).
#[derive(Debug, Clone)]
pub struct MounterConfig {
    /// The Kubernetes node name, answered as the CSI node id.
    pub node_name: String,
    /// Path of the CSI socket the kubelet calls.
    pub csi_socket: PathBuf,
    /// The kubelet's plugin registration directory; the registration socket
    /// is `<dir>/agentcomputer.dev-reg.sock`.
    pub registration_dir: PathBuf,
    /// Path of the hand-over socket the agent connects to.
    pub handover_socket: PathBuf,
    /// The agent's uid: the only peer accepted on the hand-over socket, and
    /// owner of the data directory and the hand-over socket's directory.
    pub agent_uid: u32,
    /// The agent's gid.
    pub agent_gid: u32,
    /// The agent's data directory, created (mode 0700) for the agent.
    pub data_dir: PathBuf,
    /// How long a published connection may go without a serving agent
    /// process before the mounter ends it (`crate::grace`); zero waits
    /// forever.
    pub agent_grace: std::time::Duration,
}

impl MounterConfig {
    /// `<registration_dir>/agentcomputer.dev-reg.sock`.
    pub fn registration_socket(&self) -> PathBuf {
        self.registration_dir
            .join(format!("{DRIVER_NAME}-reg.sock"))
    }
}

/// Creates `dir` (and parents) and gives it to `uid:gid` with `mode`.
fn agent_dir(dir: &Path, uid: u32, gid: u32, mode: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .with_context(|| format!("cannot give {} to {uid}:{gid}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", dir.display()))
}

fn bind_grpc(path: &Path) -> anyhow::Result<UnixListener> {
    sockets::remove_stale(path).with_context(|| format!("cannot prepare {}", path.display()))?;
    let l =
        UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
    sockets::restrict(path, None).with_context(|| format!("cannot restrict {}", path.display()))?;
    Ok(l)
}

/// Runs the mounter until `shutdown` completes: creates the data and
/// hand-over directories for the agent, listens on the hand-over socket,
/// serves CSI Identity and Node on the CSI socket and the registration
/// service on the registration socket. At shutdown the CSI and
/// registration sockets are removed (the kubelet then deregisters the
/// driver until the next start); live mounts stay, served by the agent.
///
/// Errors: a directory or socket cannot be prepared, or a server fails.
pub async fn run(config: MounterConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (uid, gid) = (config.agent_uid, config.agent_gid);
    agent_dir(&config.data_dir, uid, gid, 0o700)?;
    if let Some(dir) = config.handover_socket.parent() {
        agent_dir(dir, uid, gid, 0o700)?;
    }
    if let Some(dir) = config.csi_socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::create_dir_all(&config.registration_dir)
        .with_context(|| format!("cannot create {}", config.registration_dir.display()))?;

    let table = Arc::new(Table::default());
    // On each agent connection: a restarted mounter first takes back the
    // connections it holds no descriptor for (crate::adopt), then a new
    // agent process gets the published connections of the previous one
    // back (resume). Both run once the connection reads replies.
    let (connected_tx, mut connected_rx) = tokio::sync::mpsc::unbounded_channel::<Option<i32>>();
    let on_connect = Box::new(move |pid: Option<i32>| {
        let _ = connected_tx.send(pid);
    });
    let handover = Arc::new(
        Listener::bind(&config.handover_socket, uid, gid, on_connect)
            .with_context(|| format!("cannot listen on {}", config.handover_socket.display()))?,
    );
    let csi = bind_grpc(&config.csi_socket)?;
    let reg_path = config.registration_socket();
    let registration = bind_grpc(&reg_path)?;

    let publisher = Arc::new(Publisher::new(handover.clone(), table.clone()));
    let stop = CancellationToken::new();
    let resumer = {
        let publisher = publisher.clone();
        tokio::spawn(async move {
            while connected_rx.recv().await.is_some() {
                crate::adopt::adopt_unheld(&publisher).await;
                publisher.resume_orphans().await;
            }
        })
    };
    let handover_task = tokio::spawn(handover.clone().run(stop.clone()));
    let grace_task = tokio::spawn(crate::grace::watch(
        publisher.clone(),
        config.agent_grace,
        stop.clone(),
    ));
    let csi_server = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(IdentityService::new(handover.clone())))
        .add_service(NodeServer::new(NodeService::new(
            config.node_name.clone(),
            publisher.clone(),
        )))
        .serve_with_incoming_shutdown(UnixListenerStream::new(csi), stop.clone().cancelled_owned());
    let reg_server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(RegistrationService::new(
            config.csi_socket.clone(),
        )))
        // The kubelet's registration client sends a path as :authority,
        // which the HTTP/2 server would refuse (crate::authority).
        .serve_with_incoming_shutdown(
            crate::authority::normalized(registration),
            stop.clone().cancelled_owned(),
        );
    info!(
        node = %config.node_name,
        csi = %config.csi_socket.display(),
        registration = %reg_path.display(),
        handover = %config.handover_socket.display(),
        agent_grace = ?config.agent_grace,
        "mounter serving"
    );
    let servers = async { tokio::try_join!(csi_server, reg_server) };
    let result = tokio::select! {
        r = servers => r.map(|_| ()).context("gRPC server failed"),
        _ = shutdown => {
            info!("shutting down");
            Ok(())
        }
    };
    stop.cancel();
    let _ = handover_task.await;
    let _ = grace_task.await;
    resumer.abort();
    for path in [&config.csi_socket, &reg_path] {
        if let Err(e) = std::fs::remove_file(path) {
            warn!(path = %path.display(), error = %e, "could not remove socket");
        }
    }
    let live = table.volumes();
    if !live.is_empty() {
        info!(
            count = live.len(),
            "leaving published volumes mounted; the node agent keeps serving them"
        );
    }
    result
}
