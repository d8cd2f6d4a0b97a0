//! `agentcomputer-gateway`: the front door of an installation
//! (docs/gateway.md). Reads the in-cluster or KUBECONFIG credentials and
//! needs `list`/`watch` on AgentComputers in every namespace, nothing
//! else. Prints `listening on ADDR` once its API listener is bound;
//! `/readyz` on the operations listener turns 200 once the watch cache has
//! synced. On SIGTERM or SIGINT it turns not ready, keeps serving for
//! `--drain-delay` (so Services stop sending it calls), then accepts
//! nothing more and gives the calls under way `--grace` to end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_gateway::deleted::Deleted;
use agentcomputer_gateway::limits::{LimitSettings, Limits};
use agentcomputer_gateway::mcp::McpServers;
use agentcomputer_gateway::metrics::Metrics;
use agentcomputer_gateway::ops::{self, Ops};
use agentcomputer_gateway::routes::Routes;
use agentcomputer_gateway::upstream::{AgentTls, Upstreams};
use agentcomputer_gateway::{Gateway, api_router, serve};
use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio_util::sync::CancellationToken;

/// Command-line flags (each also read from the environment).
#[derive(Parser, Debug)]
#[command(
    name = "agentcomputer-gateway",
    version,
    about = "Serves every Agent Computer's API and MCP server at one address"
)]
struct Args {
    /// Address of the API listener (gRPC and /mcp/NAMESPACE/NAME).
    #[arg(long, env = "LISTEN", default_value = "0.0.0.0:7443")]
    listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    metrics_listen: SocketAddr,
    /// Certificate chain (PEM) of the API listener: TLS with it and
    /// --tls-key (a kubernetes.io/tls Secret's tls.crt); plaintext without.
    #[arg(long, env = "TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert (the Secret's tls.key).
    #[arg(long, env = "TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Certificates (PEM) that sign the node agents' certificates: the
    /// agents are reached over TLS checked against them; plaintext without.
    #[arg(long, env = "AGENT_CA_CERT")]
    agent_ca_cert: Option<PathBuf>,
    /// DNS name in the node agents' certificates, checked instead of the
    /// pod IP the gateway dials.
    #[arg(long, env = "AGENT_TLS_SERVER_NAME", requires = "agent_ca_cert")]
    agent_tls_server_name: Option<String>,
    /// The gateway's client certificate chain (PEM), presented to the
    /// agents (mutual TLS; they check it against their --tls-client-ca).
    #[arg(long, env = "AGENT_CLIENT_CERT", requires_all = ["agent_client_key", "agent_ca_cert"])]
    agent_client_cert: Option<PathBuf>,
    /// Private key (PEM) of --agent-client-cert.
    #[arg(long, env = "AGENT_CLIENT_KEY", requires = "agent_client_cert")]
    agent_client_key: Option<PathBuf>,
    /// Calls in flight per computer at most (a stream counts until it ends).
    #[arg(long, env = "PER_COMPUTER_IN_FLIGHT", default_value_t = LimitSettings::default().per_computer_in_flight as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    per_computer_in_flight: u32,
    /// Calls in flight per credential at most.
    #[arg(long, env = "PER_TOKEN_IN_FLIGHT", default_value_t = LimitSettings::default().per_token_in_flight as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    per_token_in_flight: u32,
    /// Calls started per second per credential at most (bursts of twice).
    #[arg(long, env = "PER_TOKEN_RATE", default_value_t = LimitSettings::default().per_token_rate)]
    per_token_rate: f64,
    /// Serve each computer as a remote MCP server at /mcp/NAMESPACE/NAME.
    #[arg(long, env = "MCP", default_value = "on", value_parser = ["on", "off"])]
    mcp: String,
    /// How long to keep serving, not ready, after SIGTERM.
    #[arg(long, env = "DRAIN_DELAY", default_value = "5s", value_parser = humantime::parse_duration)]
    drain_delay: Duration,
    /// How long calls under way may run once the listener closed.
    #[arg(long, env = "GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    grace: Duration,
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
    anyhow::ensure!(
        args.per_token_rate.is_finite() && args.per_token_rate > 0.0,
        "--per-token-rate must be a positive number of calls a second, got {}",
        args.per_token_rate
    );
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(serve::tls_acceptor(cert, key)?),
        _ => None,
    };
    let agent_tls = AgentTls {
        ca_pem: match &args.agent_ca_cert {
            Some(p) => Some(
                std::fs::read(p)
                    .with_context(|| format!("cannot read --agent-ca-cert {}", p.display()))?,
            ),
            None => None,
        },
        server_name: args.agent_tls_server_name.clone(),
        identity: match (&args.agent_client_cert, &args.agent_client_key) {
            (Some(cert), Some(key)) => Some(client_identity(cert, key)?),
            _ => None,
        },
    };
    let client = kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("no Kubernetes client (in-cluster or KUBECONFIG): {e}"))?;
    let (computers, writer) = reflector::store::<AgentComputer>();
    let deleted = Arc::new(Deleted::new());
    let watch_deleted = deleted.clone();
    tokio::spawn(
        reflector::reflector(
            writer,
            watcher(
                Api::<AgentComputer>::all(client),
                watcher::Config::default().any_semantic(),
            ),
        )
        .default_backoff()
        .for_each(move |ev| {
            match ev {
                Ok(ev) => watch_deleted.observe(&ev),
                Err(e) => {
                    tracing::warn!(error = %e, "watch of AgentComputers failed; retrying")
                }
            }
            futures::future::ready(())
        }),
    );

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let ops_listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_listen))?;
    // The MCP tools call the API through the gateway itself: a loopback
    // listener without TLS, serving the same routes.
    let loopback = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on loopback")?;
    let stop = CancellationToken::new();
    let mcp = (args.mcp == "on").then(|| -> anyhow::Result<McpServers> {
        let url = format!("http://{}", loopback.local_addr()?);
        let channel = tonic::transport::Endpoint::from_shared(url)?
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(McpServers::new(channel, stop.child_token()))
    });
    let metrics = Metrics::new();
    let gw = Arc::new(Gateway {
        routes: Routes::new(computers.clone(), deleted),
        upstreams: Upstreams::new(agent_tls),
        limits: Limits::new(LimitSettings {
            per_computer_in_flight: args.per_computer_in_flight as usize,
            per_token_in_flight: args.per_token_in_flight as usize,
            per_token_rate: args.per_token_rate,
        }),
        metrics: metrics.clone(),
        mcp: mcp.transpose()?,
    });
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let ready = ready.clone();
        async move {
            if computers.wait_until_ready().await.is_ok() {
                ready.store(true, Ordering::Release);
                tracing::info!("watch cache synced; routing calls");
            }
        }
    });
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    println!("metrics on {}", ops_listener.local_addr()?);
    tracing::info!(%addr, tls = tls.is_some(), metrics = %ops_listener.local_addr()?, "serving");

    let app = api_router(gw);
    let ops_stop = CancellationToken::new();
    let ops = tokio::spawn(serve::serve(
        ops_listener,
        None,
        ops::router(Ops {
            metrics,
            ready: ready.clone(),
        }),
        ops_stop.clone(),
        Duration::from_secs(1),
    ));
    let internal = tokio::spawn(serve::serve(
        loopback,
        None,
        app.clone(),
        stop.clone(),
        args.grace,
    ));
    let api = tokio::spawn(serve::serve(listener, tls, app, stop.clone(), args.grace));

    shutdown_signal().await;
    tracing::info!(drain_delay = ?args.drain_delay, "stopping: not ready, then closing");
    ready.store(false, Ordering::Release);
    tokio::time::sleep(args.drain_delay).await;
    stop.cancel();
    let _ = api.await;
    let _ = internal.await;
    ops_stop.cancel();
    let _ = ops.await;
    Ok(())
}

/// The gateway's client certificate and key, read and checked now: a bad
/// file stops the gateway at start rather than failing every handshake.
fn client_identity(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("cannot read --agent-client-cert {}", cert.display()))?;
    let key_pem = std::fs::read(key)
        .with_context(|| format!("cannot read --agent-client-key {}", key.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad PEM in --agent-client-cert {}", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "no certificate in --agent-client-cert {}",
        cert.display()
    );
    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        anyhow::anyhow!(
            "no private key in --agent-client-key {}: {e}",
            key.display()
        )
    })?;
    Ok((cert_pem, key_pem))
}

/// SIGTERM (Kubernetes) or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
