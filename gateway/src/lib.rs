//! The front door of an Agent Computer installation (docs/gateway.md): one
//! address where every computer's gRPC API is served, routed by the
//! caller's own credential to the node agent serving its computer, and
//! where each computer is a remote MCP server (`/mcp/NAMESPACE/NAME`).
//!
//! Stateless: routes come from a watch cache of AgentComputers
//! (`status.credentialHash`, `status.endpoint`), so any number of replicas
//! serve the same calls, and a computer that moves is followed at its
//! next call.

pub mod deleted;
pub mod forward;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod ops;
pub mod routes;
pub mod serve;
pub mod state;
pub mod upstream;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, post};

pub use state::Gateway;

/// The API listener's routes: the forwarded gRPC service and the MCP
/// endpoints. Anything else is 404 (gRPC clients read it as UNIMPLEMENTED).
pub fn api_router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route(
            "/agentcomputer.v1.AgentComputer/{method}",
            post(forward::forward),
        )
        .route("/mcp/{namespace}/{name}", any(mcp::serve))
        .with_state(gw)
}
