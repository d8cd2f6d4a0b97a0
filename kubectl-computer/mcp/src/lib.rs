//! A Model Context Protocol server whose tools work on one computer's files
//! and runtimes: `read`, `write`, `edit`, `ls`, `find`, `grep`, `delete`,
//! `share`, `exec`, `snapshot`, `restore` and `publish` ([`Tools`]), served over standard input and output
//! ([`serve_stdio`]) or streamable HTTP behind a bearer token
//! ([`http::serve`]).
//!
//! The protocol is the official Rust SDK's (`rmcp`). The caller opens the
//! computer, an [`Agent`]: a connected [`client::Client`] of the node agent
//! serving it and the runtimes it enables (the CLI's `kubectl-computer mcp`
//! reaches a local, directly addressed or cluster agent; a gateway can
//! bring its own). The node agent calls the tools make ([`calls`]) and the
//! text forms of names and attributes ([`format`]) are the CLI's too;
//! failures are an [`error::Error`]: one line, and the errno name the agent
//! sent.

mod agent;
pub mod calls;
pub mod client;
pub mod error;
pub mod format;
pub mod http;
mod search;
mod stdio;
mod text;
pub mod tools;

use std::sync::Arc;

use rmcp::ServiceExt;

pub use agent::{Agent, MAX_FILE_STREAMS};
pub use tools::Tools;

use error::{Error, Result};

/// Serves `agent`'s tools over standard input and output until the client
/// closes its end (the way MCP hosts start local servers). Lines the SDK
/// would drop unanswered (not a JSON object, too long) are answered with a
/// JSON-RPC error by a guard in front of it. Errors: the MCP session could
/// not start or broke.
pub async fn serve_stdio(agent: Agent) -> Result<()> {
    let (input, output, writer) = stdio::transport();
    let server = Tools::new(Arc::new(agent))
        .serve((input, output))
        .await
        .map_err(|e| Error::new(format!("MCP over stdio: {e}")))?;
    let ended = server
        .waiting()
        .await
        .map_err(|e| Error::new(format!("MCP over stdio: {e}")));
    // The service's end closed its output: the last answers are written,
    // then standard output is flushed.
    let _ = writer.await;
    ended.map(|_| ())
}
