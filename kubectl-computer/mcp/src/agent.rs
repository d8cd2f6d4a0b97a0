//! The computer the MCP tools work on: a connected API client of its node
//! agent, opened once by the caller (the CLI through its backend, a gateway
//! through its own routing), and the runtimes the computer enables.

use std::sync::Arc;

use agentcomputer_runtime_contract::Runtime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client::Client;

/// Most Read and Write streams the server keeps open on the agent at once.
/// The agent refuses a connection's stream past its own cap (32 by
/// default, `DEFAULT_STREAMS_PER_CLIENT` of the node agent's
/// `api::streams`); staying well below it leaves room for streams the
/// agent has not yet let go of, so parallel tool calls wait here instead of
/// failing there.
pub const MAX_FILE_STREAMS: usize = 16;

/// One computer, reachable.
pub struct Agent {
    /// A client of the agent serving it. Its channel reconnects on its own
    /// (in a cluster through a new port-forward), so one is kept for the
    /// server's life; calls clone it (a cheap handle).
    client: Client,
    /// The name sent in requests (`NAMESPACE/NAME` in a cluster).
    computer: String,
    /// The name the user gave.
    name: String,
    /// Runtimes `exec` may select, in the order offered.
    runtimes: Vec<Runtime>,
    /// Places for Read/Write streams ([`MAX_FILE_STREAMS`]).
    file_streams: Arc<Semaphore>,
    /// Environment variables of this process `publish` may read
    /// credentials from ([`Agent::allow_credentials_env`]); none by default.
    credentials_env: Vec<String>,
}

impl Agent {
    /// The computer `computer` (its name as requests carry it,
    /// `NAMESPACE/NAME` in a cluster), served by the agent `client` talks
    /// to; `name` is how the user named it, `runtimes` those `exec` may
    /// select, in the order offered. Nothing is checked here: the caller
    /// has connected and found the computer.
    pub fn new(client: Client, computer: String, name: String, runtimes: Vec<Runtime>) -> Agent {
        Agent {
            client,
            computer,
            name,
            runtimes,
            file_streams: Arc::new(Semaphore::new(MAX_FILE_STREAMS)),
            credentials_env: Vec::new(),
        }
    }

    /// Lets the `publish` tool read a remote's credentials from these
    /// environment variables of this process, named by the model in its
    /// `credentials_env` argument (it never sees the values). Without this
    /// (the default, and what the API gateway's remote MCP uses: its
    /// process environment is not the user's) every `credentials_env` is
    /// refused, so a model cannot send the server's other secrets to a
    /// remote of its choosing.
    pub fn allow_credentials_env(mut self, names: Vec<String>) -> Agent {
        self.credentials_env = names;
        self
    }

    /// The environment variables `publish` may read credentials from.
    pub fn credentials_env(&self) -> &[String] {
        &self.credentials_env
    }

    /// A client handle for one call.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A place for one Read or Write stream at a time, waited for when
    /// [`MAX_FILE_STREAMS`] are taken; hold it while the call reads or
    /// writes files.
    pub async fn file_stream(&self) -> OwnedSemaphorePermit {
        self.file_streams
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// The computer's name as requests carry it.
    pub fn computer(&self) -> String {
        self.computer.clone()
    }

    /// The computer's name as the user gave it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtimes `exec` may select.
    pub fn runtimes(&self) -> &[Runtime] {
        &self.runtimes
    }
}
