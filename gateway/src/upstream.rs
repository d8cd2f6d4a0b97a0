//! Channels to the node agents: one HTTP/2 connection per agent address
//! and computer, opened on first use and kept (it reconnects by itself),
//! plaintext or TLS with the chart's CA, presenting the gateway's own
//! certificate when it has one (mutual TLS).
//!
//! Per computer, not one per agent: a node agent caps the Read and Write
//! streams of one client connection (`--max-streams-per-client`, 32), so
//! one shared connection would cap every tenant of a node together, and a
//! busy tenant's streams would queue everyone else's.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// How the gateway reaches node agents.
#[derive(Clone, Debug, Default)]
pub struct AgentTls {
    /// PEM certificates that sign the agents' certificates; `None`:
    /// plaintext (the chart without `nodeAgent.tls`).
    pub ca_pem: Option<Vec<u8>>,
    /// DNS name in the agents' certificates, checked instead of the pod
    /// IP the gateway dials (the chart's `nodeAgent.tls.serverName`).
    pub server_name: Option<String>,
    /// The gateway's own certificate chain and key (PEM), presented to
    /// agents that ask for one (mutual TLS); `None`: none presented.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Longest wait for a TCP connection to an agent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keep-alive pings on idle agent connections, so a dead agent
/// pod's connection is found and replaced rather than hanging a call.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// Most channels kept.
const MAX_CHANNELS: usize = 4096;

/// The channels, by agent address and computer.
pub struct Upstreams {
    tls: AgentTls,
    channels: Mutex<HashMap<(String, String), Channel>>,
}

impl Upstreams {
    /// No channel yet; each is made on first use with `tls`.
    pub fn new(tls: AgentTls) -> Upstreams {
        Upstreams {
            tls,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// The channel for `computer` to the agent at `endpoint` (`host:port`,
    /// as `status.endpoint` holds it). Errors: an address or TLS setting
    /// the transport refuses, as text.
    pub fn channel(&self, endpoint: &str, computer: &str) -> Result<Channel, String> {
        let key = (endpoint.to_string(), computer.to_string());
        if let Some(c) = self.channels.lock().get(&key) {
            return Ok(c.clone());
        }
        let scheme = if self.tls.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        let mut e = Endpoint::from_shared(format!("{scheme}://{endpoint}"))
            .map_err(|e| format!("agent address {endpoint:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if let Some(ca) = &self.tls.ca_pem {
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(name) = &self.tls.server_name {
                tls = tls.domain_name(name.clone());
            }
            if let Some((cert, key)) = &self.tls.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            e = e
                .tls_config(tls)
                .map_err(|e| format!("TLS to agent {endpoint}: {e}"))?;
        }
        let channel = e.connect_lazy();
        let mut channels = self.channels.lock();
        // Computers that moved or went away, and replaced agent pods, leave
        // idle entries, dropped all at once (each reconnects on its next
        // use) before they add up.
        if channels.len() >= MAX_CHANNELS {
            channels.clear();
        }
        Ok(channels.entry(key).or_insert(channel).clone())
    }
}
