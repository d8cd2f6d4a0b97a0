//! `node-agent`: the Agent Computer node agent.
//!
//! `node-agent local [--data-dir DIR] [--listen ADDR] [--idle-timeout DUR]
//! [--tls-cert PEM --tls-key PEM] [--proxy-listen ADDR|off]` serves the gRPC API without a cluster.
//! It makes the data directory private to its user and keeps the agent token
//! that every call must carry in `DIR/token`. It prints `listening on ADDR`
//! on stdout once ready (useful with `--listen 127.0.0.1:0`), logs to stderr
//! (`RUST_LOG`, default `info`), and shuts down cleanly on SIGINT or SIGTERM
//! (unmounting its host mounts). At start it removes the dead host mounts a
//! killed previous run left behind.
//!
//! `node-agent cluster --node-name N --data-dir D --namespace NS ...` is the
//! agent of one Kubernetes node (docs/cluster.md). It prints `listening on
//! ADDR` and `metrics on ADDR` on stdout once bound.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentcomputer_node_agent::cluster::{self, ClusterConfig};
use agentcomputer_node_agent::containers::parse_proxy_listen;
use agentcomputer_node_agent::local::{self, DEFAULT_LISTEN, DEFAULT_PROXY_LISTEN, LocalConfig};
use agentcomputer_node_agent::tls;
use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc malloc: the runtimes allocate and free many
/// small objects per script (bashkit's jq, sort, word expansion), and glibc
/// malloc took ~30% of their CPU; `jq` over 5 MB went from 414 to 189 ms
/// (bench/shell, docs/shell-runtime.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "node-agent", version, about = "Agent Computer node agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve computers from a local data directory, with no cluster.
    Local {
        /// Where computers live [default: $XDG_DATA_HOME/agentcomputer].
        #[arg(long, env = "AGENTCOMPUTER_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Address of the gRPC API (port 0 picks a free port).
        #[arg(long, default_value = DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// Close a computer after it has been unused this long, e.g. 5m, 30s.
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        idle_timeout: Duration,
        /// Serve the API over TLS with this certificate chain (PEM, leaf first).
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Address of the egress proxy for host-side clients holding a
        /// container run's credential, or `off`. Sandboxes reach the proxy
        /// inside their own network namespace whatever this says.
        #[arg(long, default_value = DEFAULT_PROXY_LISTEN)]
        proxy_listen: String,
        /// End a Read or Write stream that moved nothing for this long
        /// (DEADLINE_EXCEEDED), releasing its lease and upload.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        stream_idle_timeout: Duration,
        /// Most Read/Write streams open at once per client connection.
        #[arg(long, default_value_t = agentcomputer_node_agent::api::streams::DEFAULT_STREAMS_PER_CLIENT)]
        max_streams_per_client: usize,
        /// Most Read/Write streams open at once per computer.
        #[arg(long, default_value_t = agentcomputer_node_agent::api::streams::DEFAULT_STREAMS_PER_COMPUTER)]
        max_streams_per_computer: usize,
    },
    /// Serve the computers placed on one Kubernetes node (unprivileged).
    /// The Kubernetes client comes from the in-cluster service account or
    /// KUBECONFIG.
    Cluster(ClusterArgs),
}

#[derive(clap::Args)]
struct ClusterArgs {
    /// This node's name (the agent pod's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Where computers live (computers/<uid>/).
    #[arg(
        long,
        env = "AGENTCOMPUTER_DATA_DIR",
        default_value = "/var/lib/agentcomputer/data"
    )]
    data_dir: PathBuf,
    /// The agent's own namespace, where it publishes its CSIStorageCapacity.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// Address of the gRPC API.
    #[arg(long, env = "AGENTCOMPUTER_LISTEN", default_value = cluster::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "AGENTCOMPUTER_METRICS_ADDR", default_value = cluster::DEFAULT_METRICS_ADDR)]
    metrics_addr: SocketAddr,
    /// Close a computer after it has been unused this long, e.g. 5m, 30s.
    #[arg(long, env = "AGENTCOMPUTER_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    /// Factor on the disk space offered to quotas in the published capacity
    /// (1.0 offers exactly the free space; 2.0 promises twice as much).
    #[arg(long, env = "AGENTCOMPUTER_OVERCOMMIT", default_value_t = 1.0, value_parser = parse_overcommit)]
    overcommit: f64,
    /// Shortest time between two status.volume reports of one computer.
    #[arg(long, env = "AGENTCOMPUTER_STATUS_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    status_interval: Duration,
    /// Serve the API over TLS with this certificate chain (PEM).
    #[arg(
        long,
        env = "AGENTCOMPUTER_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(
        long,
        env = "AGENTCOMPUTER_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// The mounter's hand-over socket (FUSE connections of sandbox mounts).
    #[arg(long, env = "AGENTCOMPUTER_HANDOVER_SOCKET", default_value = agentcomputer_csi::handover::DEFAULT_SOCKET)]
    handover_socket: PathBuf,
    /// Time running calls get to finish after SIGTERM.
    #[arg(long, env = "AGENTCOMPUTER_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
}

/// An overcommit factor: a finite number above 0.
fn parse_overcommit(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a factor above 0 (e.g. 1.0, 1.5)")),
    }
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
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Local {
                data_dir,
                listen,
                idle_timeout,
                tls_cert,
                tls_key,
                proxy_listen,
                stream_idle_timeout,
                max_streams_per_client,
                max_streams_per_computer,
            } => {
                let data_dir = match data_dir {
                    Some(d) => d,
                    None => local::default_data_dir().context(
                        "no data directory: pass --data-dir (no home directory is known)",
                    )?,
                };
                // Before announcing readiness: a client may use the old
                // mountpoints as soon as it sees the address.
                local::cleanup_stale_mounts(&data_dir);
                let tls = match (tls_cert, tls_key) {
                    (Some(cert), Some(key)) => Some(tls::server_tls(&cert, &key)?),
                    _ => None,
                };
                // The token exists before the address is announced.
                local::prepare(&data_dir)?;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                println!("listening on {}", listener.local_addr()?);
                let config = LocalConfig {
                    data_dir,
                    idle_timeout,
                    tls,
                    proxy_listen: parse_proxy_listen(&proxy_listen).map_err(anyhow::Error::msg)?,
                    streams: agentcomputer_node_agent::api::streams::StreamLimits {
                        idle_timeout: stream_idle_timeout,
                        per_client: max_streams_per_client,
                        per_computer: max_streams_per_computer,
                    },
                };
                local::serve(listener, config, shutdown_signal()?).await
            }
            Command::Cluster(args) => run_cluster(args).await,
        }
    });
    // Do not wait on blocking-pool threads left behind by cancelled work.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run_cluster(args: ClusterArgs) -> anyhow::Result<()> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_tls(cert, key)?),
        _ => None,
    };
    let client = kube::Client::try_default().await.context(
        "no Kubernetes client: neither an in-cluster service account nor KUBECONFIG works",
    )?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let http = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_addr))?;
    println!("listening on {}", listener.local_addr()?);
    println!("metrics on {}", http.local_addr()?);
    let config = ClusterConfig {
        node_name: args.node_name,
        data_dir: args.data_dir,
        namespace: args.namespace,
        idle_timeout: args.idle_timeout,
        overcommit: args.overcommit,
        status_interval: args.status_interval,
        shutdown_grace: args.shutdown_grace,
        handover_socket: args.handover_socket,
        tls,
    };
    cluster::serve(client, listener, http, config, shutdown_signal()?).await
}

/// Completes on the first SIGINT or SIGTERM.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}
