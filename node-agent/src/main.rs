//! `node-agent`: the Agent Computer node agent.
//!
//! `node-agent local [--data-dir DIR] [--listen ADDR] [--idle-timeout DUR]
//! [--tls-cert PEM --tls-key PEM]` serves the gRPC API without a cluster.
//! It makes the data directory private to its user and keeps the agent token
//! that every call must carry in `DIR/token`. It prints `listening on ADDR`
//! on stdout once ready (useful with `--listen 127.0.0.1:0`), logs to stderr
//! (`RUST_LOG`, default `info`), and shuts down cleanly on SIGINT or SIGTERM
//! (unmounting its host mounts). At start it removes the dead host mounts a
//! killed previous run left behind.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentcomputer_node_agent::local::{self, DEFAULT_LISTEN, LocalConfig};
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
    },
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
                };
                local::serve(listener, config, shutdown_signal()?).await
            }
        }
    });
    // Do not wait on blocking-pool threads left behind by cancelled work.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
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
