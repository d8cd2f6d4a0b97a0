//! What every request handler shares.

use crate::limits::Limits;
use crate::mcp::McpServers;
use crate::metrics::Metrics;
use crate::routes::Routes;
use crate::upstream::Upstreams;

/// The gateway: routing, channels to the agents, limits and metrics.
pub struct Gateway {
    /// Which computer a credential opens, and where it is served.
    pub routes: Routes,
    /// Channels to the node agents.
    pub upstreams: Upstreams,
    /// Calls in flight and rates.
    pub limits: Limits,
    /// What `/metrics` serves.
    pub metrics: Metrics,
    /// The remote MCP servers; `None` when MCP is off.
    pub mcp: Option<McpServers>,
}
