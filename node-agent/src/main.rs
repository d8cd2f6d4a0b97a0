//! `node-agent`: the Agent Computer node agent.
//!
//! `node-agent local [--data-dir DIR] [--listen ADDR] [--idle-timeout DUR]
//! [--tls-cert PEM --tls-key PEM] [--proxy-listen ADDR|off]
//! [--share-listen ADDR|off] [--share-url URL]` serves the gRPC API without a
//! cluster, and share links over HTTP (docs/share.md).
//! It makes the data directory private to its user and keeps the agent token
//! that every call must carry in `DIR/token`. It prints `listening on ADDR`
//! on stdout once ready (useful with `--listen 127.0.0.1:0`), logs to stderr
//! (`RUST_LOG`, default `info`), and shuts down cleanly on SIGINT or SIGTERM
//! (unmounting its host mounts). At start it removes the dead host mounts a
//! killed previous run left behind.
//!
//! Either mode refuses to start on a data directory another live agent
//! holds, naming that agent's pid ([`DataDirLock`]).
//!
//! `node-agent cluster --node-name N --data-dir D --namespace NS ...` is the
//! agent of one Kubernetes node (docs/cluster.md). It prints `listening on
//! ADDR` and `metrics on ADDR` on stdout once bound.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentcomputer_node_agent::admission::AdmissionConfig;
use agentcomputer_node_agent::backup::BackupUrl;
use agentcomputer_node_agent::cluster::{self, ClusterConfig};
use agentcomputer_node_agent::control_addresses::{self, ControlArgs};
use agentcomputer_node_agent::data_lock::DataDirLock;
use agentcomputer_node_agent::local::containers::parse_proxy_listen;
use agentcomputer_node_agent::local::{
    self, DEFAULT_LISTEN, DEFAULT_PROXY_LISTEN, LocalConfig, LocalShare,
};
use agentcomputer_node_agent::share;
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
        /// inside their own network namespace whatever this says. An
        /// address given here must be free; the default, when taken, gives
        /// way to a free port (a warning says which) [default:
        /// 127.0.0.1:3128].
        #[arg(long)]
        proxy_listen: Option<String>,
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
        #[command(flatten)]
        admission: AdmissionArgs,
        /// Keep host mounts alive across restarts of the agent: a small
        /// holder process keeps their FUSE connections, and the next agent
        /// takes them over (root only). `off` makes host mounts end with
        /// the agent. SIGUSR2 stops the agent leaving its mounts for the
        /// next one; SIGTERM and SIGINT unmount them.
        #[arg(long, default_value = "on", value_parser = ["on", "off"])]
        keep_mounts: String,
        /// How long the holder keeps mounts while no agent runs; then they
        /// fail with ENOTCONN until mounted again or unmounted.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        mount_grace: Duration,
        /// Address of the share-link server (HTTP), or `off` (then Share
        /// calls fail). Loopback by default: links work on this machine.
        /// An address given here must be free, and so must the default
        /// when --share-url is given (a proxy forwards to it); otherwise the
        /// default, when taken, gives way to a free port (a warning says
        /// which) [default: 127.0.0.1:7434].
        #[arg(long)]
        share_listen: Option<String>,
        /// Where share links point, e.g. https://files.example.com/, when
        /// a proxy in front of the share server is what others reach
        /// [default: http://SHARE-LISTEN-ADDR/].
        #[arg(long, value_name = "URL", value_parser = share::parse_base_url)]
        share_url: Option<url::Url>,
        /// Most share-link downloads served at once (more get 503).
        #[arg(long, default_value_t = share::DEFAULT_MAX_DOWNLOADS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        max_downloads: usize,
        /// Most share-link downloads of one computer served at once (more
        /// get 503) [default: an eighth of --max-downloads, at least 1].
        #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        max_downloads_per_computer: Option<usize>,
        /// Bytes a second a share-link download's client must take, over
        /// each 10 s; a slower download is ended and its place freed.
        /// Bytes or with a binary suffix (4Ki); 0 for no minimum.
        #[arg(long, default_value = "4Ki", value_parser = parse_bytes)]
        download_min_rate: u64,
        #[command(flatten)]
        control: ControlArgs,
        /// Back every computer up continuously to s3://BUCKET/PREFIX
        /// (endpoint, region and keys from AWS_ENDPOINT_URL, AWS_REGION,
        /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or file:///DIR; a
        /// computer with no directory here is restored from it on first
        /// use. See docs/backup.md.
        #[arg(long, value_name = "URL", value_parser = BackupUrl::parse)]
        backup: Option<BackupUrl>,
        /// How long a computer's past states stay restorable (with
        /// --backup): point-in-time restores reach back this far, and a
        /// restore's undo snapshot is kept this long. See docs/snapshots.md.
        #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
        retention: Duration,
    },
    /// Serve the computers placed on one Kubernetes node (unprivileged).
    /// The Kubernetes client comes from the in-cluster service account or
    /// KUBECONFIG.
    Cluster(ClusterArgs),
    /// Hold the FUSE connections of local mode's host mounts while the
    /// agent restarts (started by `node-agent local`; not for direct use).
    #[command(hide = true)]
    FuseHolder {
        /// The socket to serve the agent on.
        #[arg(long)]
        socket: PathBuf,
        /// How long to keep connections with no agent connected.
        #[arg(long, value_parser = humantime::parse_duration)]
        grace: Duration,
    },
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
    /// The node's addresses (the chart passes the pod's `status.hostIP`),
    /// comma-separated. A computer's connections, made by this agent,
    /// reach none of them (nor any address of the agent pod's own
    /// interfaces) unless its egress policy names them (docs/egress.md).
    #[arg(long, env = "NODE_IPS", value_delimiter = ',')]
    node_ips: Vec<std::net::IpAddr>,
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
    /// Ask clients for a certificate signed by these certificates (PEM):
    /// one that is not ends the handshake; clients without one (sandbox
    /// runners, port-forwarded CLIs) are served as without this flag. The
    /// API gateway presents one (mutual TLS between it and the agents).
    #[arg(
        long,
        env = "AGENTCOMPUTER_TLS_CLIENT_CA",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    tls_client_ca: Option<PathBuf>,
    /// The mounter's hand-over socket (FUSE connections of sandbox mounts).
    #[arg(long, env = "AGENTCOMPUTER_HANDOVER_SOCKET", default_value = agentcomputer_handover::mounter::DEFAULT_SOCKET)]
    handover_socket: PathBuf,
    /// Time running calls get to finish after SIGTERM.
    #[arg(long, env = "AGENTCOMPUTER_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// Address of the egress proxy for the sandbox pods of computers with
    /// an allow-list (they authenticate with their computer's token), or
    /// `off`.
    #[arg(long, env = "AGENTCOMPUTER_PROXY_LISTEN", default_value = "off")]
    proxy_listen: String,
    /// Address of the share-link server (HTTP) the share gateway reaches,
    /// or `off` (then Share calls fail).
    #[arg(long, env = "AGENTCOMPUTER_SHARE_LISTEN", default_value = "off")]
    share_listen: String,
    /// Where share links point: the gateway's external URL. Required with
    /// --share-listen.
    #[arg(long, env = "AGENTCOMPUTER_SHARE_URL", value_name = "URL", value_parser = share::parse_base_url)]
    share_url: Option<url::Url>,
    /// Most share-link downloads served at once (more get 503).
    #[arg(long, env = "AGENTCOMPUTER_MAX_DOWNLOADS", default_value_t = share::DEFAULT_MAX_DOWNLOADS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_downloads: usize,
    /// Most share-link downloads of one computer served at once (more get
    /// 503) [default: an eighth of --max-downloads, at least 1].
    #[arg(long, env = "AGENTCOMPUTER_MAX_DOWNLOADS_PER_COMPUTER", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_downloads_per_computer: Option<usize>,
    /// Bytes a second a share-link download's client must take, over each
    /// 10 s; a slower download is ended and its place freed. Bytes or with
    /// a binary suffix (4Ki); 0 for no minimum.
    #[arg(long, env = "AGENTCOMPUTER_DOWNLOAD_MIN_RATE", default_value = "4Ki", value_parser = parse_bytes)]
    download_min_rate: u64,
    /// Most API connections open at once from one source address (a
    /// sandbox pod; port-forwarded clients share 127.0.0.1); past it the
    /// source's oldest unauthenticated connection is closed, or the new one.
    #[arg(long, env = "AGENTCOMPUTER_API_CONNECTIONS_PER_SOURCE", default_value_t = agentcomputer_node_agent::gate::DEFAULT_CONNECTIONS_PER_SOURCE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    api_connections_per_source: usize,
    /// Most API connections from one source address that have not yet
    /// carried a computer's token; one more closes the source's oldest.
    #[arg(long, env = "AGENTCOMPUTER_API_UNAUTHENTICATED_PER_SOURCE", default_value_t = agentcomputer_node_agent::gate::DEFAULT_UNAUTHENTICATED_PER_SOURCE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    api_unauthenticated_per_source: usize,
    /// Time an API connection has, from its accept (TLS handshake
    /// included), to carry a computer's token; then it is closed.
    #[arg(long, env = "AGENTCOMPUTER_API_AUTH_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration)]
    api_auth_deadline: Duration,
    /// Most egress proxy connections of one computer at once, and of one
    /// source address (a sandbox pod); more are refused.
    #[arg(long, env = "AGENTCOMPUTER_PROXY_CONNECTIONS_PER_COMPUTER", default_value_t = agentcomputer_proxy::DEFAULT_PER_COMPUTER, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    proxy_connections_per_computer: usize,
    /// Back every computer up continuously to s3://BUCKET/PREFIX (endpoint,
    /// region and keys from AWS_ENDPOINT_URL, AWS_REGION,
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or file:///DIR, and hold
    /// a writer Lease per open computer; a computer placed here with no
    /// database on this node is restored from it. See docs/backup.md.
    #[arg(long, env = "AGENTCOMPUTER_BACKUP_URL", value_name = "URL", value_parser = BackupUrl::parse)]
    backup: Option<BackupUrl>,
    /// How long a computer's past states stay restorable unless its
    /// spec.retention says otherwise (with --backup): point-in-time
    /// restores reach back this far, and a restore's undo snapshot is kept
    /// this long. See docs/snapshots.md.
    #[arg(long, env = "AGENTCOMPUTER_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    retention: Duration,
    /// How long another node must wait before it may take over a computer
    /// whose writer Lease this agent stopped renewing; this agent stops
    /// committing at two thirds of it (client-go's 15:10:2 proportions).
    #[arg(long, env = "AGENTCOMPUTER_WRITER_LEASE_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    writer_lease_duration: Duration,
    #[command(flatten)]
    control: ControlArgs,
    /// Services whose endpoints no computer may reach whatever its egress
    /// policy says (NAMESPACE/NAME, comma-separated; the chart names the
    /// operator's and the node agents'). `default/kubernetes`, the API
    /// server's, is always one of them.
    #[arg(long, env = "AGENTCOMPUTER_CONTROL_SERVICES", value_delimiter = ',')]
    control_services: Vec<control_addresses::ControlService>,
}

/// An overcommit factor: a finite number above 0.
fn parse_overcommit(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a factor above 0 (e.g. 1.0, 1.5)")),
    }
}

/// Limits on running execs; each left out takes the default that fits the
/// machine (docs/isolation.md, "Admission and CPU fairness").
#[derive(clap::Args)]
struct AdmissionArgs {
    /// Execs running at once on this agent [default: 128 per CPU].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_execs: Option<u64>,
    /// Execs running at once on one computer [default: 4 per CPU].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_execs_per_computer: Option<u64>,
    /// Memory all running execs may reserve together, each its budget, in
    /// bytes or with a binary suffix (512Mi, 8Gi) [default: half the memory
    /// available at start].
    #[arg(long, value_parser = parse_bytes)]
    exec_memory: Option<u64>,
    /// Floor of an exec's memory budget, held back for each free exec
    /// slot so that a newcomer always fits; an exec asking for no budget
    /// gets the default or its fair share of --exec-memory, never less
    /// [default: 32Mi].
    #[arg(long, value_parser = parse_bytes)]
    min_exec_memory: Option<u64>,
    /// Execs that may wait for room at once; 0 refuses at once
    /// [default: --max-execs].
    #[arg(long)]
    exec_queue: Option<u64>,
    /// Longest wait for room before RESOURCE_EXHAUSTED, e.g. 2s, 500ms.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    exec_queue_wait: Duration,
    /// Demote an exec's thread to SCHED_IDLE once it has used --cpu-slice
    /// of CPU, so short execs and the agent itself stay fast (off: every
    /// thread gets the kernel's plain equal share).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    cpu_fairness: String,
    /// CPU time an exec runs at normal priority, e.g. 5ms.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    cpu_slice: Duration,
    /// Execs in their normal-priority slice at once; more wait in line
    /// for a place [default: 2 per CPU].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    cpu_foreground: Option<u64>,
    /// Demoted execs that run at once, in turns handed round the
    /// computers; 0 lets all of them run [default: 1 per CPU].
    #[arg(long)]
    cpu_background: Option<u64>,
}

impl AdmissionArgs {
    fn config(&self) -> AdmissionConfig {
        let mut c = AdmissionConfig::for_node();
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = self.max_execs {
            c.max_execs = size(n);
            c.max_queued = c.max_execs;
        }
        if let Some(n) = self.max_execs_per_computer {
            c.max_execs_per_computer = size(n);
        }
        if let Some(n) = self.exec_memory {
            c.exec_memory_bytes = n;
        }
        if let Some(n) = self.min_exec_memory {
            c.min_exec_memory_bytes = n;
        }
        if let Some(n) = self.exec_queue {
            c.max_queued = size(n);
        }
        c.queue_wait = self.exec_queue_wait;
        c.cpu.enabled = self.cpu_fairness == "on";
        c.cpu.slice = self.cpu_slice;
        if let Some(n) = self.cpu_foreground {
            c.cpu.foreground = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = self.cpu_background {
            c.cpu.background = usize::try_from(n).unwrap_or(usize::MAX);
        }
        c
    }
}

/// Parses a byte count as a Kubernetes quantity (`1073741824`, `512Mi`,
/// `8Gi`, `1e9`), with the operator's parser
/// (`agentcomputer_crds::quantity`), so the two never disagree.
fn parse_bytes(s: &str) -> Result<u64, String> {
    agentcomputer_crds::quantity::parse_bytes(s).map_err(|e| e.to_string())
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
    // Before any thread or descriptor: everything after runs under it.
    agentcomputer_node_agent::descriptors::Descriptors::raise();
    // One agent per data directory: the lock is taken before anything in
    // it is touched (stale mounts, scratch, leftovers) and held until the
    // last exec thread had its chance to stop, after the runtime's
    // shutdown. Cluster mode takes it once it has a Kubernetes client
    // (`run_cluster`), so that a node without one fails before it creates
    // anything.
    let mut local_lock = None;
    let data_dir = match &cli.command {
        Command::Local { data_dir, .. } => {
            let dir = match data_dir {
                Some(d) => d.clone(),
                None => local::default_data_dir()
                    .context("no data directory: pass --data-dir (no home directory is known)")?,
            };
            local_lock = Some(DataDirLock::create_and_acquire(&dir)?);
            dir
        }
        Command::Cluster(args) => args.data_dir.clone(),
        Command::FuseHolder { socket, grace } => {
            return agentcomputer_node_agent::local::holder::run(socket, *grace)
                .with_context(|| format!("FUSE descriptor holder on {}", socket.display()));
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Local {
                data_dir: _,
                listen,
                idle_timeout,
                tls_cert,
                tls_key,
                proxy_listen,
                stream_idle_timeout,
                max_streams_per_client,
                max_streams_per_computer,
                admission,
                keep_mounts,
                mount_grace,
                share_listen,
                share_url,
                max_downloads,
                max_downloads_per_computer,
                backup,
                retention,
                download_min_rate,
                control,
            } => {
                // Before announcing readiness: a client may use the old
                // mountpoints as soon as it sees the address.
                local::cleanup_stale_mounts(&data_dir);
                let tls = match (tls_cert, tls_key) {
                    (Some(cert), Some(key)) => Some(tls::server_tls(&cert, &key, None)?),
                    _ => None,
                };
                // The token exists before the address is announced.
                local::prepare(&data_dir)?;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                // Bound before the address is announced, like the API. A
                // default port that is taken gives way to a free one.
                let share_fixed = share_listen.is_some() || share_url.is_some();
                let share = match parse_share_listen(
                    share_listen.as_deref().unwrap_or(local::DEFAULT_SHARE_LISTEN),
                )? {
                    Some(addr) => Some(LocalShare {
                        base_url: share_url,
                        max_downloads,
                        max_downloads_per_computer,
                        min_rate: download_min_rate,
                        // With --share-url something in front forwards to
                        // this address: moving it would hand the links to
                        // whoever holds the port.
                        ..LocalShare::on(local::bind_optional(
                            addr,
                            share_fixed,
                            "share links",
                            "--share-listen",
                        )?)
                    }),
                    None => None,
                };
                let proxy = match parse_proxy_listen(
                    proxy_listen.as_deref().unwrap_or(DEFAULT_PROXY_LISTEN),
                )
                .map_err(anyhow::Error::msg)?
                {
                    Some(addr) => Some(Arc::new(local::bind_optional(
                        addr,
                        proxy_listen.is_some(),
                        "the egress proxy",
                        "--proxy-listen",
                    )?)),
                    None => None,
                };
                // Before any computer runs: the agent's own ports are
                // control addresses (the egress proxy's is added when bound).
                let share_port = match &share {
                    Some(s) => Some(s.listener.local_addr()?.port()),
                    None => None,
                };
                control_addresses::configure(
                    &control,
                    std::iter::once(listener.local_addr()?.port()).chain(share_port),
                );
                // The backup store answers before the address is announced:
                // a wrong bucket or key ends the start with the store's
                // message, never after a client was told to connect.
                let backup = match &backup {
                    Some(url) => Some(Arc::new(
                        agentcomputer_node_agent::backup::open_checked(url)
                            .await?
                            .with_retention(retention),
                    )),
                    None => None,
                };
                println!("listening on {}", listener.local_addr()?);
                let config = LocalConfig {
                    data_dir,
                    idle_timeout,
                    tls,
                    proxy_listen: proxy,
                    streams: agentcomputer_node_agent::api::streams::StreamLimits {
                        idle_timeout: stream_idle_timeout,
                        per_client: max_streams_per_client,
                        per_computer: max_streams_per_computer,
                    },
                    admission: admission.config(),
                    fuse_holder: None,
                    share,
                    backup,
                };
                let hand_over = Arc::new(AtomicBool::new(false));
                let config = LocalConfig {
                    fuse_holder: (keep_mounts == "on" && nix::unistd::geteuid().is_root())
                        .then(|| -> anyhow::Result<_> {
                            Ok(local::FuseHolder {
                                exe: std::env::current_exe()
                                    .context("cannot find the node-agent executable")?,
                                grace: mount_grace,
                                hand_over: hand_over.clone(),
                            })
                        })
                        .transpose()?,
                    ..config
                };
                let signal = shutdown_signal()?;
                let mut usr2 = signal_hook(SignalKind::user_defined2())?;
                let lock_dir = config.data_dir.clone();
                let shutdown = async move {
                    tokio::select! {
                        _ = signal => {}
                        _ = usr2.recv() => {
                            tracing::info!("SIGUSR2 received: stopping, leaving host mounts to the next agent");
                            hand_over.store(true, Ordering::SeqCst);
                            // The next agent, started right away, waits for
                            // this one to let go of the data directory.
                            if let Err(e) = agentcomputer_node_agent::data_lock::mark_handing_over(&lock_dir) {
                                tracing::warn!(error = %e, "cannot mark the data directory as handed over");
                            }
                        }
                    }
                };
                local::serve(listener, config, shutdown)
                    .await
                    .map(|()| None)
            }
            Command::Cluster(args) => run_cluster(args).await.map(Some),
            Command::FuseHolder { .. } => unreachable!("served before the runtime starts"),
        }
    });
    // Do not wait on blocking-pool threads left behind by cancelled work.
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(local_lock);
    result.map(drop)
}

/// Runs cluster mode until SIGTERM; returns the data directory's lock, to
/// be let go after the runtime's shutdown.
async fn run_cluster(args: ClusterArgs) -> anyhow::Result<DataDirLock> {
    agentcomputer_egress::node::add_node_addresses(args.node_ips.iter().copied());
    let proxy_listen = parse_proxy_listen(&args.proxy_listen).map_err(anyhow::Error::msg)?;
    let share_listen = parse_share_listen(&args.share_listen)?;
    control_addresses::configure(
        &args.control,
        [args.listen.port(), args.metrics_addr.port()]
            .into_iter()
            .chain(proxy_listen.map(|a| a.port()))
            .chain(share_listen.map(|a| a.port())),
    );
    control_addresses::configure_cluster(
        &args.node_ips,
        control_addresses::api_service_from_env(),
        &control_addresses::system_nameservers(),
    );
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_tls(cert, key, args.tls_client_ca.as_deref())?),
        _ => None,
    };
    let client = kube::Client::try_default().await.context(
        "no Kubernetes client: neither an in-cluster service account nor KUBECONFIG works",
    )?;
    let (api_ns, api_name) = control_addresses::API_SERVER_SERVICE;
    let services = std::iter::once(control_addresses::ControlService::new(api_ns, api_name))
        .chain(args.control_services.iter().cloned())
        .collect();
    tokio::spawn(control_addresses::watch_services(client.clone(), services));
    let lock = DataDirLock::create_and_acquire(&args.data_dir)?;
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
        proxy_listen,
        share: match (share_listen, args.share_url) {
            (None, _) => None,
            (Some(listen), Some(base_url)) => Some(cluster::ClusterShare {
                listen,
                base_url,
                max_downloads: args.max_downloads,
                max_downloads_per_computer: args.max_downloads_per_computer,
                min_rate: args.download_min_rate,
            }),
            (Some(_), None) => anyhow::bail!(
                "--share-listen needs --share-url: the address outside the cluster that links point at (the share gateway's)"
            ),
        },
        api_gate: cluster::api_gate::ApiGate {
            connections_per_source: args.api_connections_per_source,
            unauthenticated_per_source: args.api_unauthenticated_per_source,
            auth_deadline: args.api_auth_deadline,
        },
        proxy_connections_per_computer: args.proxy_connections_per_computer,
        backup: args.backup.clone(),
        retention: args.retention,
        writer_lease: agentcomputer_lease::Timing::scaled_to(args.writer_lease_duration),
    };
    cluster::serve(client, listener, http, config, shutdown_signal()?).await?;
    Ok(lock)
}

/// `--share-listen`: an address, or `off`.
fn parse_share_listen(text: &str) -> anyhow::Result<Option<SocketAddr>> {
    if text == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        anyhow::anyhow!("--share-listen {text:?}: not an address (e.g. 127.0.0.1:7434) or `off`")
    })
}

/// Completes on the first SIGINT or SIGTERM.
fn signal_hook(kind: SignalKind) -> anyhow::Result<tokio::signal::unix::Signal> {
    signal(kind).with_context(|| format!("cannot watch signal {}", kind.as_raw_value()))
}

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
