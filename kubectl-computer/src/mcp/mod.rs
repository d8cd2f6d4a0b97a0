//! `kubectl-computer mcp NAME`: a Model Context Protocol server whose tools
//! work on one computer's files and runtimes.
//!
//! The protocol is the official Rust SDK's (`rmcp`); this module only
//! supplies the tools ([`tools`]) and picks the transport: standard input
//! and output by default (the way MCP hosts start local servers; [`stdio`]
//! answers the lines the SDK cannot decode), or
//! streamable HTTP with `--listen ADDR` ([`http`], behind a bearer token).
//! The tools reach the computer through the CLI's own [`Backend`]: a local
//! or directly addressed node agent, or a cluster's agent through a
//! port-forward, exactly as the other commands do.

mod agent;
mod http;
mod search;
mod stdio;
mod text;
mod tools;

use std::path::PathBuf;

use rmcp::ServiceExt;

use crate::backend::Backend;
use crate::error::{CliError, Result};

use agent::Agent;

/// The command line of `mcp`.
#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The computer the tools work on.
    pub name: String,
    /// Serve streamable HTTP at this address (`PORT`, `HOST:PORT`; the
    /// endpoint is `http://ADDR/mcp`) instead of standard input and output.
    /// A bare port binds 127.0.0.1; an address other than loopback needs
    /// --allow-remote.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// File holding the bearer token HTTP clients must send
    /// (`Authorization: Bearer TOKEN`) [default: a random token, printed
    /// once on stderr]. Only with --listen.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub mcp_token_file: Option<PathBuf>,
    /// Allow --listen on an address other than loopback. The HTTP is
    /// plain (no TLS): put a TLS-terminating proxy in front of it.
    #[arg(long, requires = "listen")]
    pub allow_remote: bool,
}

/// Runs the server until the client goes away (stdio) or the process is
/// interrupted (HTTP). Errors, before serving: the computer cannot be
/// reached or does not exist, the listen address is refused or taken, the
/// token file cannot be read.
pub async fn serve(backend: Backend, args: McpArgs) -> Result<()> {
    let agent = Agent::open(backend, args.name).await?;
    match args.listen {
        None => {
            // Lines rmcp would drop unanswered are answered by the guard.
            let (input, output, writer) = stdio::transport();
            let server = tools::Tools::new(std::sync::Arc::new(agent))
                .serve((input, output))
                .await
                .map_err(|e| CliError::new(format!("MCP over stdio: {e}")))?;
            let ended = server
                .waiting()
                .await
                .map_err(|e| CliError::new(format!("MCP over stdio: {e}")));
            // The service's end closed its output: the last answers are
            // written, then standard output is flushed.
            let _ = writer.await;
            ended.map(|_| ())
        }
        Some(listen) => {
            let options = http::Options {
                listen,
                token_file: args.mcp_token_file,
                allow_remote: args.allow_remote,
            };
            http::serve(agent, options).await
        }
    }
}
