//! `kubectl-computer mcp NAME`: a Model Context Protocol server whose tools
//! work on one computer's files and runtimes.
//!
//! The server is the `agentcomputer-mcp` library's; this module opens the
//! computer through the CLI's own [`Backend`] (a local or directly
//! addressed node agent, or a cluster's agent through a port-forward,
//! exactly as the other commands do) and picks the transport: standard
//! input and output by default (the way MCP hosts start local servers), or
//! streamable HTTP with `--listen ADDR` (behind a bearer token), served
//! until SIGINT, SIGTERM or SIGHUP.

use std::path::PathBuf;

use agentcomputer_mcp::{Agent, http};
use agentcomputer_proto::v1 as pb;
use agentcomputer_runtime_contract::Runtime;

use crate::backend::Backend;
use crate::error::Result;

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
    /// An environment variable of this process the `publish` tool may read
    /// a git remote's credentials from (`USER:SECRET` or a bare token),
    /// when the model names it in `credentials_env`; repeat for more.
    /// The model never sees the value. Without it every `credentials_env`
    /// is refused, so a model cannot send other variables of this process
    /// to a remote.
    #[arg(long, value_name = "NAME")]
    pub allow_credentials_env: Vec<String>,
}

/// Runs the server until the client goes away (stdio) or the process is
/// interrupted (HTTP). Errors, before serving: the computer cannot be
/// reached or does not exist, the listen address is refused or taken, the
/// token file cannot be read.
pub async fn serve(backend: Backend, args: McpArgs) -> Result<()> {
    let agent = open(backend, args.name)
        .await?
        .allow_credentials_env(args.allow_credentials_env);
    match args.listen {
        None => agentcomputer_mcp::serve_stdio(agent).await,
        Some(listen) => {
            let options = http::Options {
                listen,
                token_file: args.mcp_token_file,
                allow_remote: args.allow_remote,
            };
            http::serve(agent, options, crate::interrupt::interrupted()).await
        }
    }
}

/// Connects to the agent serving computer `name` and checks that the
/// computer exists. In a cluster the runtimes are those of the
/// AgentComputer's `spec.runtimes`; a local or directly addressed agent
/// runs all three (the container runtime needs bubblewrap on its host).
/// Errors: the backend's (no token, agent unreachable, computer not found
/// or not routable).
async fn open(backend: Backend, name: String) -> Result<Agent> {
    let runtimes = match &backend {
        Backend::Cluster(cluster) => {
            let spec = cluster.get(&name).await?.spec.runtimes;
            [
                (spec.shell, Runtime::Shell),
                (spec.javascript, Runtime::JavaScript),
                (spec.container, Runtime::Container),
            ]
            .into_iter()
            .filter_map(|(on, r)| on.then_some(r))
            .collect()
        }
        Backend::Agent { .. } => Runtime::ALL.to_vec(),
    };
    let (mut client, computer) = backend.client(name.clone()).await?;
    client
        .get_computer(pb::GetComputerRequest {
            name: computer.clone(),
        })
        .await?;
    Ok(Agent::new(client, computer, name, runtimes))
}
