//! `agentcomputer-mounter`: the privileged CSI node plugin of Agent
//! Computer. See `docs/csi.md` for what it does and the privileges it needs.
//!
//! Flags (each also an environment variable): `--node-name`,
//! `--csi-endpoint`, `--registration-dir`, `--handover-socket`,
//! `--agent-uid`, `--agent-gid`, `--data-dir`, `--agent-grace`. Logs go to stderr
//! (`RUST_LOG`, default `info`); SIGINT or SIGTERM stops it, leaving live
//! mounts to the agent.

use std::io::IsTerminal;
use std::path::PathBuf;

use agentcomputer_csi::handover;
use agentcomputer_csi::mounter::{self, MounterConfig};
use agentcomputer_csi::sockets::endpoint_path;
use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "agentcomputer-mounter",
    version,
    about = "Agent Computer CSI node plugin (privileged mounter)"
)]
struct Cli {
    /// This node's name (the CSI node id).
    #[arg(long, env = "AGENTCOMPUTER_NODE_NAME")]
    node_name: String,
    /// Where the kubelet reaches the CSI services.
    #[arg(
        long,
        env = "AGENTCOMPUTER_CSI_ENDPOINT",
        default_value = "unix:///var/lib/kubelet/plugins/agentcomputer.dev/csi.sock"
    )]
    csi_endpoint: String,
    /// The kubelet's plugin registration directory.
    #[arg(
        long,
        env = "AGENTCOMPUTER_REGISTRATION_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    registration_dir: PathBuf,
    /// The socket the node agent connects to for FUSE descriptors.
    #[arg(long, env = "AGENTCOMPUTER_HANDOVER_SOCKET", default_value = handover::DEFAULT_SOCKET)]
    handover_socket: PathBuf,
    /// The node agent's uid (the only peer accepted on the hand-over socket).
    #[arg(long, env = "AGENTCOMPUTER_AGENT_UID", default_value_t = 65532)]
    agent_uid: u32,
    /// The node agent's gid.
    #[arg(long, env = "AGENTCOMPUTER_AGENT_GID", default_value_t = 65532)]
    agent_gid: u32,
    /// The node agent's data directory (created mode 0700, owned by the agent).
    #[arg(
        long,
        env = "AGENTCOMPUTER_DATA_DIR",
        default_value = "/var/lib/agentcomputer/data"
    )]
    data_dir: PathBuf,
    /// Seconds a published volume waits for a node agent to serve it
    /// (after the agent that served it left) before its FUSE connection is
    /// ended: processes on the mount then get ECONNABORTED/ENOTCONN instead
    /// of waiting. 0 waits forever. See docs/csi.md.
    #[arg(long, env = "AGENTCOMPUTER_AGENT_GRACE", default_value_t = agentcomputer_csi::grace::DEFAULT_AGENT_GRACE.as_secs())]
    agent_grace: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let csi_socket = endpoint_path(&cli.csi_endpoint).map_err(anyhow::Error::msg)?;
    let config = MounterConfig {
        node_name: cli.node_name,
        csi_socket,
        registration_dir: cli.registration_dir,
        handover_socket: cli.handover_socket,
        agent_uid: cli.agent_uid,
        agent_gid: cli.agent_gid,
        data_dir: cli.data_dir,
        agent_grace: std::time::Duration::from_secs(cli.agent_grace),
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        };
        mounter::run(config, shutdown).await
    })
}
