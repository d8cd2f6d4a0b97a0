//! Connecting to a node agent.

use std::time::Duration;

use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use tonic::transport::{Channel, Endpoint};

use crate::error::{CliError, Result};

/// Endpoint used when neither `--endpoint` nor `AGENTCOMPUTER_ENDPOINT` is set.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7433";

/// A connected API client.
pub type Client = AgentComputerClient<Channel>;

/// Connects to the node agent at `url`. Errors: a malformed URL, or the
/// agent is unreachable (`cannot connect to node agent at URL: connection
/// refused (start one with: node-agent local)`).
pub async fn connect(url: &str) -> Result<Client> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| CliError(format!("invalid endpoint {url:?}: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    let channel = endpoint.connect().await.map_err(|e| {
        CliError(format!(
            "cannot connect to node agent at {url}: {} (start one with: node-agent local)",
            root_cause(&e)
        ))
    })?;
    Ok(AgentComputerClient::new(channel)
        .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES))
}

/// The innermost cause, which names what really went wrong (for example
/// "connection refused"), with an OS error code stripped.
fn root_cause(err: &tonic::transport::Error) -> String {
    let mut cause: &dyn std::error::Error = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        let text = io.to_string();
        // "Connection refused (os error 111)" -> "connection refused"
        let text = text.split(" (os error").next().unwrap_or(&text);
        return lowercase_first(text);
    }
    lowercase_first(&cause.to_string())
}

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
