//! `agentcomputer-share-gateway`: routes share links from outside the
//! cluster to the node agent holding each computer (see
//! `agentcomputer_operator::share_gateway` and docs/share.md).
//!
//! Reads the in-cluster or KUBECONFIG credentials; needs `list`/`watch` on
//! AgentComputers (all namespaces) and on pods in the agent namespace.
//! Prints `listening on ADDR` once bound; `/readyz` turns 200 once both
//! watch caches have synced. Exits on SIGTERM after the running requests.

use std::net::SocketAddr;
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_operator::share_gateway::Caches;
use agentcomputer_operator::share_gateway::proxy::{self, Gateway, GatewayConfig};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

/// Command-line flags (each also read from the environment).
#[derive(Parser, Debug)]
#[command(
    name = "agentcomputer-share-gateway",
    version,
    about = "Routes Agent Computer share links to the node agent of each computer"
)]
struct Args {
    /// Address of the HTTP/1.1 listener (links, /healthz, /readyz).
    #[arg(long, env = "LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Path of the node agents' share URL: links are
    /// BASE_PATH/share/v1/UID/PATH (use it when an Ingress forwards links
    /// below a prefix unchanged).
    #[arg(long, env = "BASE_PATH", default_value = "/")]
    base_path: String,
    /// Namespace of the node-agent pods.
    #[arg(long, env = "AGENT_NAMESPACE", default_value = "agentcomputer-system")]
    agent_namespace: String,
    /// Label selector (k=v[,k=v]) of node-agent pods.
    #[arg(
        long,
        env = "AGENT_SELECTOR",
        default_value = "app.kubernetes.io/name=agentcomputer-node-agent"
    )]
    agent_selector: String,
    /// Port of the node agents' share server (their --share-listen).
    #[arg(long, env = "AGENT_SHARE_PORT", default_value_t = 7434)]
    agent_share_port: u16,
    /// Longest wait for a connection to a node agent, e.g. 5s.
    #[arg(long, env = "CONNECT_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    connect_timeout: Duration,
    /// Longest wait for a node agent's response head once connected.
    #[arg(long, env = "RESPONSE_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    response_timeout: Duration,
    /// Proxied requests at once at most (a download counts until it
    /// ends); past that 503 with Retry-After.
    #[arg(long, env = "MAX_REQUESTS", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_requests: u32,
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
    if !args.base_path.starts_with('/') {
        anyhow::bail!("--base-path must start with /, got {:?}", args.base_path);
    }
    agentcomputer_operator::Config::parse_selector(&args.agent_selector)
        .map_err(anyhow::Error::msg)?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("no Kubernetes client (in-cluster or KUBECONFIG): {e}"))?;

    let (computers, computer_writer) = reflector::store::<AgentComputer>();
    let (agents, agent_writer) = reflector::store::<Pod>();
    tokio::spawn(
        reflector::reflector(
            computer_writer,
            watcher(
                Api::<AgentComputer>::all(client.clone()),
                watcher::Config::default().any_semantic(),
            ),
        )
        .default_backoff()
        .for_each(|ev| async move {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "watch of AgentComputers failed; retrying");
            }
        }),
    );
    tokio::spawn(
        reflector::reflector(
            agent_writer,
            watcher(
                Api::<Pod>::namespaced(client.clone(), &args.agent_namespace),
                watcher::Config::default()
                    .labels(&args.agent_selector)
                    .any_semantic(),
            ),
        )
        .default_backoff()
        .for_each(|ev| async move {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "watch of node-agent pods failed; retrying");
            }
        }),
    );

    let gateway = Gateway::new(
        GatewayConfig {
            base_path: args.base_path.clone(),
            share_port: args.agent_share_port,
            connect_timeout: args.connect_timeout,
            response_timeout: args.response_timeout,
            max_requests: args.max_requests as usize,
            ..GatewayConfig::default()
        },
        Caches {
            computers: computers.clone(),
            agents: agents.clone(),
        },
    );
    tokio::spawn({
        let gateway = gateway.clone();
        async move {
            if computers.wait_until_ready().await.is_ok() && agents.wait_until_ready().await.is_ok()
            {
                gateway.set_ready();
                tracing::info!("watch caches synced; routing links");
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    tracing::info!(%addr, "serving share links");
    proxy::serve(listener, gateway, agentcomputer_operator::shutdown_signal()).await?;
    Ok(())
}
