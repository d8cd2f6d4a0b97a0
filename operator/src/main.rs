//! `operator`: the Agent Computer Kubernetes operator.
//!
//! Reads the in-cluster or KUBECONFIG credentials, serves /metrics /healthz
//! /readyz, waits for the leader Lease (unless disabled), then reconciles
//! every AgentComputer (and ComputerSnapshot) until SIGTERM or lost
//! leadership.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_operator::context::{Config, Context};
use agentcomputer_operator::controller::{error_policy, reconcile};
use agentcomputer_operator::http::{self, Health};
use agentcomputer_operator::leader;
use agentcomputer_operator::metrics::Metrics;
use agentcomputer_operator::{MANAGED_BY, triggers};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Client;
use kube::api::Api;
use kube::runtime::{Controller, watcher};

/// Command-line flags (each also read from the environment).
#[derive(Parser, Debug)]
#[command(name = "operator", version, about = "Agent Computer operator")]
struct Args {
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Namespace of the node-agent DaemonSet.
    #[arg(long, env = "AGENT_NAMESPACE", default_value = "agentcomputer-system")]
    agent_namespace: String,
    /// Label selector (k=v[,k=v]) of node-agent pods.
    #[arg(
        long,
        env = "AGENT_SELECTOR",
        default_value = "app.kubernetes.io/name=agentcomputer-node-agent"
    )]
    agent_selector: String,
    /// storageClassName of computers' PVs and PVCs.
    #[arg(long, env = "STORAGE_CLASS", default_value = "agentcomputer")]
    storage_class: String,
    /// Image carrying agentcomputer-runner (the node agent's image), which
    /// sandbox pods install and run so that container execs reach them.
    /// Without it sandbox pods run spec.sandbox.command and container execs
    /// are refused.
    #[arg(long, env = "RUNNER_IMAGE")]
    runner_image: Option<String>,
    /// PEM file of the certificates that sign the node agents' TLS
    /// certificate, when the agents serve TLS: given to sandbox runners
    /// and put into credential Secrets (`ca.crt`) for the CLI.
    #[arg(long, env = "AGENT_TLS_CA", requires = "agent_tls_server_name")]
    agent_tls_ca: Option<std::path::PathBuf>,
    /// DNS name in the node agents' certificate (clients dial pod IPs and
    /// check this name instead).
    #[arg(long, env = "AGENT_TLS_SERVER_NAME", requires = "agent_tls_ca")]
    agent_tls_server_name: Option<String>,
    /// Service (in the agent namespace) that routes to the node agent of
    /// the caller's own node (internalTrafficPolicy: Local). Sandbox pods
    /// dial its cluster IP, so a node agent that restarts or is upgraded
    /// keeps their spec and they keep running. Without it they dial the
    /// agent pod's IP and are replaced with every agent pod.
    #[arg(long, env = "AGENT_SERVICE")]
    agent_service: Option<String>,
    /// Seconds between periodic reconciles of a Ready computer.
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// Most storage the computers of one namespace may have together: the
    /// sum of their spec.storage.size, e.g. 100Gi (empty: no limit). A
    /// computer past it is not placed, a growth past it not applied
    /// (reason NamespaceStorageLimit).
    #[arg(long, env = "NAMESPACE_STORAGE_LIMIT", default_value = "", value_parser = parse_limit)]
    namespace_storage_limit: Limit,
    /// The node agents have a backup store (the chart sets it with
    /// backup.url): computers move off cordoned nodes, on request, and
    /// fail over from lost nodes. Off: they stay on their node.
    #[arg(long, env = "MOVES", default_value_t = false, action = clap::ArgAction::Set)]
    moves: bool,
    /// How long a computer's node agent may be not ready before the
    /// computer fails over to another node (with --moves). Annotation
    /// agentcomputer.dev/failover: now fails it over at once.
    #[arg(long, env = "FAILOVER_AFTER", default_value = "5m", value_parser = humantime::parse_duration)]
    failover_after: std::time::Duration,
    /// Reconciles run in parallel at most.
    #[arg(long, env = "CONCURRENCY", default_value_t = 16)]
    concurrency: u16,
    /// Take part in leader election (turn off only for a single replica).
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Namespace of the leader Lease (default: the agent namespace).
    #[arg(long, env = "LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "agentcomputer-operator")]
    lease_name: String,
    /// Identity in the Lease (default: POD_NAME, else hostname and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a lease lasts without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
}

/// Reads `--agent-tls-ca`. Errors: an unreadable file, or one without a
/// PEM certificate.
fn agent_tls(args: &Args) -> anyhow::Result<Option<agentcomputer_operator::context::AgentTls>> {
    let (Some(path), Some(name)) = (&args.agent_tls_ca, &args.agent_tls_server_name) else {
        return Ok(None);
    };
    let ca_pem = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read --agent-tls-ca {}: {e}", path.display()))?;
    if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
        anyhow::bail!("--agent-tls-ca {} holds no PEM certificate", path.display());
    }
    Ok(Some(agentcomputer_operator::context::AgentTls {
        ca_pem,
        server_name: name.trim().to_string(),
    }))
}

/// `--namespace-storage-limit`: a byte quantity, or empty for none.
#[derive(Debug, Clone, Copy)]
struct Limit(Option<u64>);

fn parse_limit(text: &str) -> Result<Limit, String> {
    if text.trim().is_empty() {
        return Ok(Limit(None));
    }
    let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.trim().to_string());
    match agentcomputer_crds::quantity::quantity_bytes(&q) {
        Ok(0) | Err(_) => Err(format!(
            "{text:?} is not a storage size such as 100Gi (empty: no limit)"
        )),
        Ok(b) => Ok(Limit(Some(b))),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .json()
        .init();
    let args = Args::parse();
    let agent_labels = Config::parse_selector(&args.agent_selector).map_err(anyhow::Error::msg)?;
    let config = Config {
        agent_namespace: args.agent_namespace.clone(),
        agent_selector: args.agent_selector.clone(),
        agent_labels,
        storage_class: args.storage_class.clone(),
        resync_seconds: args.resync_seconds,
        runner_image: args.runner_image.clone().filter(|i| !i.trim().is_empty()),
        agent_tls: agent_tls(&args)?,
        agent_service: args.agent_service.clone().filter(|s| !s.trim().is_empty()),
        namespace_storage_limit: args.namespace_storage_limit.0,
        moves: args.moves,
        failover_after: args.failover_after,
    };
    if config.runner_image.is_none() {
        tracing::warn!(
            "--runner-image is not set: sandbox pods get no runner and container execs are refused"
        );
    }
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::new());
    let health = Health::new(metrics.clone());
    tokio::spawn({
        let health = health.clone();
        async move {
            if let Err(e) = http::serve(args.metrics_addr, health).await {
                tracing::error!(error = %e, "metrics server failed");
                std::process::exit(1);
            }
        }
    });

    let lock = args
        .leader_election
        .then(|| {
            let ns = args
                .lease_namespace
                .clone()
                .unwrap_or_else(|| args.agent_namespace.clone());
            leader::candidate(
                Api::<Lease>::namespaced(client.clone(), &ns),
                &args.lease_name,
                &identity,
                Duration::from_secs(args.lease_duration_seconds.max(1)),
            )
        })
        .transpose()?;
    let mut held = None;
    if let Some(lock) = &lock {
        // A standby is healthy and ready: it only waits.
        client.apiserver_version().await?;
        health.ready.store(true, Ordering::Relaxed);
        tracing::info!(identity = %lock.identity(), "waiting for leadership");
        held = Some(leader::lead(lock).await);
        tracing::info!(identity = %lock.identity(), "became leader");
    }
    metrics.leader.set(1);

    let (caches, placement_changes) = triggers::watch_placement_inputs(&client, &config);
    let owned =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"));
    let controller = Controller::new(
        Api::<AgentComputer>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    // Computers waiting for a node are retried when a node agent's published
    // room changes (and every 30 s regardless).
    let on_capacity = triggers::pending_on_capacity_change(controller.store());
    let controller = controller
        .watches(
            Api::<CSIStorageCapacity>::namespaced(client.clone(), &config.agent_namespace),
            triggers::capacity_watch_config(),
            on_capacity,
        )
        // Owned children: a change or deletion (a Secret's token edited or the
        // Secret deleted, a claim or pod gone) reconciles the owning computer.
        .owns(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            owned.clone(),
        )
        .owns(Api::<Secret>::all(client.clone()), owned.clone())
        .owns(Api::<NetworkPolicy>::all(client.clone()), owned.clone())
        .owns(Api::<Pod>::all(client.clone()), owned)
        .reconcile_all_on(placement_changes)
        .with_config(kube::runtime::controller::Config::default().concurrency(args.concurrency));
    let computers = controller.store();
    *health.computers.write().await = Some(computers.clone());
    health.ready.store(true, Ordering::Relaxed);
    let ctx = Arc::new(Context::new(
        client.clone(),
        config,
        caches,
        computers,
        metrics,
        Some(identity),
    ));

    let snapshots = agentcomputer_operator::snapshots::run(
        client.clone(),
        ctx.clone(),
        agentcomputer_operator::shutdown_signal(),
    );
    let computers = controller
        .graceful_shutdown_on(agentcomputer_operator::shutdown_signal())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::warn!(error = %e, "controller error");
            }
        });
    let run = futures::future::join(computers, snapshots);
    match held {
        Some(held) => {
            let fence = held.fence();
            tokio::select! {
                _ = run => {
                    if let Err(e) = held.release().await {
                        tracing::warn!(error = %e, "could not release the lease");
                    }
                }
                why = fence.lost() => {
                    tracing::error!(reason = %why, "lost leadership; exiting so that a restart rejoins the election");
                    std::process::exit(1);
                }
            }
        }
        None => {
            run.await;
        }
    }
    Ok(())
}
