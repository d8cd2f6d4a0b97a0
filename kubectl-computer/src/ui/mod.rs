//! `kubectl computer ui [NAME]`: a web page where a person types a task
//! and runs it in several runtimes of one computer side by side, each
//! column streaming its output live with its exit code and duration, then
//! browses the computer's files (docs/ui.md).
//!
//! It is a client like the CLI's other commands: every call goes through
//! the same [`Backend`] (a local agent, an endpoint such as the API
//! gateway, or a cluster through port-forwards). The page is served on
//! loopback by default, and only to holders of a random token printed in
//! its URL: every API call must carry it (header `x-ui-token`, or `token`
//! in the query for images), and a request whose `Host` is not the
//! listener's own address is refused (no DNS rebinding from a web page).

mod api;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{CliError, Result};

/// `ui` arguments.
#[derive(clap::Args, Debug)]
pub struct UiArgs {
    /// The computer the page opens with (another can be typed in it).
    pub name: Option<String>,
    /// Address to serve the page on. Anything but loopback lets others on
    /// the network reach it (the token still guards it).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

/// What the handlers share.
pub(crate) struct Ui {
    backend: Backend,
    token: String,
    /// `Host` header values the page is served under (`ADDR`, and
    /// `localhost:PORT` for a loopback address).
    hosts: Vec<String>,
    computer: String,
}

/// Serves the page until interrupted; prints its URL first.
pub async fn serve(backend: Backend, args: UiArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::new(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::new(format!("cannot read the listener's address: {e}")))?;
    let token = random_token()?;
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() {
        hosts.push(format!("localhost:{}", addr.port()));
    }
    let ui = Arc::new(Ui {
        backend,
        token: token.clone(),
        hosts,
        computer: args.name.unwrap_or_default(),
    });
    println!("open http://{addr}/?token={token}");
    if !addr.ip().is_loopback() {
        eprintln!(
            "warning: serving on {addr}, not loopback: anyone who can reach it and has the URL's token can run commands in the computer"
        );
    }
    axum::serve(listener, api::router(ui))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| CliError::new(format!("the page's server failed: {e}")))
}

/// 128 random bits from the kernel, as 32 hex digits.
fn random_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            CliError::new(format!(
                "cannot read /dev/urandom for the page's token: {e}"
            ))
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
