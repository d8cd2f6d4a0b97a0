//! Cluster mode: the unprivileged node agent of one Kubernetes node.
//!
//! It serves the computers placed on its node (AgentComputers labelled
//! `agentcomputer.dev/node=<node>`, each keyed by its `metadata.uid`) with
//! the same gRPC service as local mode, checking each computer's own
//! credential. It keeps their databases in line with their specs
//! ([`computers`]), finishes the deletion of their volumes ([`volumes`]),
//! reports usage, activity and backup on them ([`status`],
//! [`backup_status`]), publishes the node's
//! storage capacity ([`capacity`]), serves the FUSE connections the
//! mounter hands over ([`crate::cluster::fuse_link`]), runs container execs in the
//! computers' sandbox pods through the runners attached to it
//! ([`sandboxes`]), and serves metrics and probes ([`http`]).
//! docs/cluster.md describes the contract with the operator.

mod activity;
pub mod api_gate;
mod backup_status;
mod capacity;
mod computers;
mod credential_wait;
mod credentials;
mod egress_proxy;
pub mod fuse_link;
mod http;
mod index;
mod keys;
mod metrics;
mod moves;
mod sandboxes;
mod share_binding;
mod spec;
mod status;
mod volumes;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::Service;
use crate::registry::Registry;
use activity::{Activity, NodeObserver};
use credentials::ClusterAuthorizer;
use index::Index;
use metrics::Metrics;
use sandboxes::Sandboxes;

/// Default address of the gRPC API in cluster mode (all interfaces: pods
/// reach it at the agent pod's IP).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:7433";

/// Default address of `/metrics`, `/healthz` and `/readyz`.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9090";

/// How long after start every open keeps orphans while the agent has not
/// reached the mounter ([`Registry::hold_orphans_until`]): a mounter that
/// keeps connections of the previous process hands them over (`resume`)
/// as soon as the link is up; one that does not answer for this long is
/// taken to have lost them (it restarted too).
pub const ORPHAN_HOLD_UNLINKED: Duration = Duration::from_secs(300);

/// Settings of cluster mode.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's name (`spec.nodeName` of the agent pod).
    pub node_name: String,
    /// Directory holding `computers/<uid>/`.
    pub data_dir: PathBuf,
    /// The agent's own namespace, where its CSIStorageCapacity lives.
    pub namespace: String,
    /// Idle time after which an unused computer's engine is closed.
    pub idle_timeout: Duration,
    /// Factor on the disk space offered to quotas (1.0: none).
    pub overcommit: f64,
    /// Shortest time between two usage reports of one computer.
    pub status_interval: Duration,
    /// Time running calls get after SIGTERM before they are cancelled.
    pub shutdown_grace: Duration,
    /// The mounter's hand-over socket, where FUSE connections of sandbox
    /// mounts come from ([`crate::cluster::fuse_link`]).
    pub handover_socket: PathBuf,
    /// Serve the API over TLS with this identity ([`crate::tls::server_tls`]);
    /// `None` serves plain HTTP/2.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// Where the egress proxy for sandbox pods listens
    /// ([`egress_proxy`]); `None`: nowhere.
    pub proxy_listen: Option<std::net::SocketAddr>,
    /// Where share links are served and where they point
    /// ([`crate::share`], docs/share.md); `None`: no share links.
    pub share: Option<ClusterShare>,
    /// Bounds of the API port per source address ([`api_gate`]).
    pub api_gate: api_gate::ApiGate,
    /// Most egress proxy connections of one computer, and of one source
    /// address, at once.
    pub proxy_connections_per_computer: usize,
    /// Where every computer is backed up ([`crate::backup`]); with it, each
    /// open computer's writes are fenced by its writer Lease.
    pub backup: Option<crate::backup::BackupUrl>,
    /// The computers' default retention (with `backup`; a computer's
    /// `spec.retention` overrides it).
    pub retention: std::time::Duration,
    /// How writer Leases are held (with `backup`).
    pub writer_lease: agentcomputer_lease::Timing,
}

/// The share server of cluster mode.
#[derive(Debug, Clone)]
pub struct ClusterShare {
    /// Address to listen on: the gateway reaches it at the agent pod's IP.
    pub listen: std::net::SocketAddr,
    /// Where links point: the gateway's external address, which routes
    /// `/share/v1/UID/...` to the agent of the computer's node.
    pub base_url: url::Url,
    /// Most downloads at once.
    pub max_downloads: usize,
    /// Most downloads of one computer at once (`None`: an eighth of
    /// `max_downloads`).
    pub max_downloads_per_computer: Option<usize>,
    /// Bytes a second a download must move (0: no minimum).
    pub min_rate: u64,
}

/// What `/readyz` waits for.
#[derive(Debug, Default)]
pub struct Readiness {
    computers_synced: AtomicBool,
    volumes_synced: AtomicBool,
    capacity_published: AtomicBool,
    serving: AtomicBool,
}

impl Readiness {
    fn set_computers_synced(&self) {
        self.computers_synced.store(true, Ordering::SeqCst);
    }
    fn set_volumes_synced(&self) {
        self.volumes_synced.store(true, Ordering::SeqCst);
    }
    fn set_capacity_published(&self) {
        self.capacity_published.store(true, Ordering::SeqCst);
    }

    /// What is not ready yet; empty when ready.
    pub fn missing(&self) -> Vec<&'static str> {
        [
            (&self.computers_synced, "AgentComputer watch not synced"),
            (&self.volumes_synced, "PersistentVolume watch not synced"),
            (&self.capacity_published, "storage capacity not published"),
            (&self.serving, "gRPC API not serving"),
        ]
        .into_iter()
        .filter(|(flag, _)| !flag.load(Ordering::SeqCst))
        .map(|(_, what)| what)
        .collect()
    }
}

/// Everything the parts of cluster mode share.
pub struct Node {
    client: kube::Client,
    registry: Registry,
    index: Arc<Index>,
    /// Callers of the egress proxy and their policies.
    proxy_callers: Arc<egress_proxy::ProxyCallers>,
    config: ClusterConfig,
    metrics: Arc<Metrics>,
    activity: Arc<Activity>,
    /// Publishes Events on the computers (as `agentcomputer-node-agent`,
    /// instance: the node's name).
    recorder: kube::runtime::events::Recorder,
    readiness: Readiness,
    /// Signalled when the computers placed here (or their quotas) change.
    placement_changed: Notify,
    /// uids whose data this process deleted by the volume protocol: their
    /// volume is gone for good, so no later event of a lingering
    /// AgentComputer may create an empty database for them again.
    deleted: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Moves of computers this node takes part in ([`moves`]).
    moves: moves::Moves,
}

impl Node {
    fn mark_deleted(&self, uid: &str) {
        self.deleted.lock().insert(uid.to_string());
    }

    fn was_deleted(&self, uid: &str) -> bool {
        self.deleted.lock().contains(uid)
    }
}

/// Runs the agent of node `config.node_name` with Kubernetes client
/// `client`: gRPC on `listener`, metrics and probes on `http_listener`,
/// until `shutdown` completes. Then the API stops accepting calls, running
/// calls get `config.shutdown_grace` to finish, the rest are cancelled and
/// every computer is closed cleanly. FUSE connections belong to the
/// mounter's mounts: nothing is unmounted. Errors: the data directory
/// cannot be prepared, or a server fails.
pub async fn serve<S>(
    client: kube::Client,
    listener: TcpListener,
    http_listener: TcpListener,
    config: ClusterConfig,
    shutdown: S,
) -> anyhow::Result<()>
where
    S: Future<Output = ()> + Send + 'static,
{
    let registry = Registry::new(&config.data_dir, config.idle_timeout).with_context(|| {
        format!(
            "cannot prepare data directory {}",
            config.data_dir.display()
        )
    })?;
    // Connections the previous process served come back with the
    // mounter's `resume`; until then, opens keep the files their kernels
    // hold unlinked while open (fuse_link shortens this once linked).
    registry.hold_orphans_until(std::time::Instant::now() + ORPHAN_HOLD_UNLINKED);
    if let Some(url) = &config.backup {
        config
            .writer_lease
            .validate()
            .context("--writer-lease-duration")?;
        let target = crate::backup::open_checked(url)
            .await?
            .with_retention(config.retention);
        registry.set_backup(Arc::new(target), crate::registry::BackupIds::DirectoryName);
        registry.set_writer_leases(
            kube::Api::namespaced(client.clone(), &config.namespace),
            config.node_name.clone(),
            config.writer_lease,
        );
        info!(%url, lease = ?config.writer_lease, "backing up every computer; writes fenced by writer leases");
    }
    let addr = listener.local_addr()?;
    info!(%addr, node = %config.node_name, data_dir = %config.data_dir.display(), "node agent serving in cluster mode");
    // Half the descriptors outside connections may hold go to the egress
    // proxy, a quarter each to the API and share ports.
    let descriptors = crate::descriptors::Descriptors::raise();
    let index = Arc::new(Index::default());
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: keys::FIELD_MANAGER.into(),
            instance: Some(config.node_name.clone()),
        },
    );
    let node = Arc::new(Node {
        client,
        recorder,
        registry: registry.clone(),
        proxy_callers: Arc::new(egress_proxy::ProxyCallers::new(index.clone())),
        index,
        config,
        metrics: Arc::new(Metrics::new()),
        activity: Arc::new(Activity::default()),
        readiness: Readiness::default(),
        placement_changed: Notify::new(),
        deleted: Default::default(),
        moves: Default::default(),
    });

    let stop = CancellationToken::new();
    let http = tokio::spawn(http::serve(http_listener, node.clone(), stop.clone()));
    tokio::spawn(registry.clone().run_sweeper(stop.clone()));
    tokio::spawn(computers::run(node.clone(), stop.clone()));
    tokio::spawn(moves::run_target(node.clone(), stop.clone()));
    tokio::spawn(moves::sweep(node.clone(), stop.clone()));
    tokio::spawn(volumes::run(node.clone(), stop.clone()));
    tokio::spawn(capacity::run(node.clone(), stop.clone()));
    tokio::spawn(status::run(node.clone(), stop.clone()));
    tokio::spawn(crate::cluster::fuse_link::run(
        registry.clone(),
        node.config.handover_socket.clone(),
        stop.clone(),
    ));
    tokio::task::spawn_blocking(agentcomputer_js::warm_up);
    let egress_denials = agentcomputer_proxy::Denials::new();
    if let Some(addr) = node.config.proxy_listen {
        let proxy_listener = TcpListener::bind(addr).await.with_context(|| {
            format!("cannot listen on {addr} for the egress proxy (--proxy-listen)")
        })?;
        info!(addr = %proxy_listener.local_addr()?, "egress proxy serving");
        let metrics = agentcomputer_proxy::Metrics::new();
        metrics
            .register(node.metrics.registry())
            .context("cannot register the egress proxy metrics")?;
        // One listener for every sandbox pod of the node: bounded in
        // all, per source address (a pod) from accept, and per computer
        // once its credential is known.
        let per_computer = node.config.proxy_connections_per_computer;
        let proxy = agentcomputer_proxy::Proxy::new(node.proxy_callers.clone(), metrics)
            .with_limits(
                agentcomputer_proxy::ConnectionLimits::new(
                    descriptors.outside() / 2 / 2,
                    usize::MAX,
                ),
                "sandboxes",
            )
            .with_source_limits(agentcomputer_proxy::ConnectionLimits::new(
                usize::MAX,
                per_computer,
            ))
            .with_computer_limits(agentcomputer_proxy::ConnectionLimits::new(
                usize::MAX,
                per_computer,
            ))
            .with_denials(egress_denials.clone());
        tokio::spawn(proxy.serve(proxy_listener, stop.clone()));
    }

    let observer = Arc::new(NodeObserver {
        metrics: node.metrics.clone(),
        activity: node.activity.clone(),
    });
    // Admission limits that fit the node (docs/isolation.md), shown in
    // /metrics.
    let admission =
        crate::admission::Admission::new(crate::admission::AdmissionConfig::for_cluster());
    admission
        .register_metrics(node.metrics.registry())
        .context("cannot register the admission metrics")?;
    let cluster_authorizer = Arc::new(ClusterAuthorizer::new(node.index.clone()));
    let authorizer: Arc<dyn crate::auth::Authorizer> = cluster_authorizer.clone();
    let sandboxes = Arc::new(
        Sandboxes::new(
            node.index.clone(),
            authorizer.clone(),
            node.client.clone(),
            node.activity.clone(),
        )
        .with_egress_denials(egress_denials),
    );
    sandboxes
        .register_metrics(node.metrics.registry())
        .context("cannot register the sandbox runner metrics")?;
    let mut service = Service::new(registry.clone(), authorizer)
        .with_observer(observer)
        .with_admission(admission)
        .with_containers(sandboxes.clone());
    if let Some(share) = node.config.share.clone() {
        let share_listener = TcpListener::bind(share.listen).await.with_context(|| {
            format!(
                "cannot listen on {} for share links (--share-listen)",
                share.listen
            )
        })?;
        info!(addr = %share_listener.local_addr()?, base_url = %share.base_url, "share links serving");
        let mut config = crate::share::ShareConfig::new(share.base_url);
        config.max_downloads = share.max_downloads;
        config.max_downloads_per_computer = share.max_downloads_per_computer;
        config.min_rate = share.min_rate;
        config.gate = crate::gate::GateConfig::within(descriptors.outside() / 4);
        let sharer = crate::share::Sharer::new(
            registry.clone(),
            Arc::new(share_binding::CredentialBinding::new(node.index.clone())),
            config,
        );
        tokio::spawn(crate::share::http::serve(
            share_listener,
            sharer.clone(),
            stop.clone(),
        ));
        service = service.with_sharer(sharer);
    }
    let stopping = CancellationToken::new();
    let on_signal = {
        let stopping = stopping.clone();
        let node = node.clone();
        let sandboxes = sandboxes.clone();
        async move {
            shutdown.await;
            info!("shutting down: no new calls; running calls may finish");
            // /readyz fails from now on, so no new traffic is sent here.
            node.readiness.serving.store(false, Ordering::SeqCst);
            // Idle runner streams end now (their runners reconnect to the
            // next agent); the others when their runs end.
            sandboxes.stop();
            stopping.cancel();
        }
    };
    let incoming = node
        .config
        .api_gate
        .listener(listener, descriptors.outside() / 4)
        .into_stream();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = node.config.tls.clone() {
        builder = builder
            .tls_config(tls)
            .context("cannot set up TLS for the API")?;
    }
    // Keepalive pings find runners (and clients) whose connection died
    // without closing.
    let server = builder
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .layer(credential_wait::AwaitCredentialLayer::new(
            cluster_authorizer.clone(),
            node.index.clone(),
            credential_wait::WAIT,
        ))
        .layer(tonic::service::InterceptorLayer::new(
            api_gate::AuthenticatedConnections(cluster_authorizer),
        ))
        .add_service(service.into_server())
        .add_service(sandboxes.server())
        .serve_with_incoming_shutdown(incoming, on_signal);
    node.readiness.serving.store(true, Ordering::SeqCst);
    let grace = node.config.shutdown_grace;
    let forced = async {
        stopping.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::pin!(server);
    let served = tokio::select! {
        result = &mut server => result,
        _ = forced => {
            warn!(?grace, "calls still running after the shutdown grace period; cancelling them");
            registry.cancel_all();
            // Cancelled execs end at once; give their streams a moment.
            match tokio::time::timeout(Duration::from_secs(2), &mut server).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            }
        }
    };
    node.readiness.serving.store(false, Ordering::SeqCst);
    registry.cancel_all();
    stop.cancel();
    registry.close_all().await;
    match http.await {
        Ok(Err(e)) => warn!(error = %e, "metrics endpoint failed"),
        Err(e) => warn!(error = %e, "metrics endpoint task failed"),
        Ok(Ok(())) => {}
    }
    served.context("gRPC server failed")?;
    info!("node agent stopped");
    Ok(())
}
