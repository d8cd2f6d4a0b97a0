//! Each computer as a remote MCP server: `/mcp/NAMESPACE/NAME`, streamable
//! HTTP, the bearer token being the computer's own credential, with the
//! tools `kubectl computer mcp` serves (the `agentcomputer-mcp` library).
//!
//! The tools call the API through the gateway itself (its loopback
//! listener), so their calls are routed, limited and counted like any
//! client's and follow the computer when it moves. One MCP service per
//! credential holds that credential's sessions.

use std::collections::HashMap;
use std::sync::Arc;

use agentcomputer_mcp::client::{Bearer, over};
use agentcomputer_mcp::{Agent, Tools};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use parking_lot::Mutex;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tower::ServiceExt;

use crate::forward::bearer;
use crate::routes::{NoRoute, fingerprint};
use crate::state::Gateway;

/// The answer for a computer the credential does not open, the same as
/// for one that does not exist.
const NOT_YOURS: &str = "no such computer for this credential";

/// Path prefix of the MCP endpoints.
pub const PREFIX: &str = "/mcp/";

type McpService = StreamableHttpService<Tools, LocalSessionManager>;

/// Most credentials with a kept MCP service; past it all are dropped (their
/// clients' next request gets 404 for the session and starts a new one).
const MAX_SERVICES: usize = 4096;

/// The MCP services, by credential fingerprint.
pub struct McpServers {
    /// A channel to the gateway's own loopback listener.
    loopback: Channel,
    services: Mutex<HashMap<String, McpService>>,
    stop: CancellationToken,
}

impl McpServers {
    /// Services whose tools call the API through `loopback`; their sessions
    /// end when `stop` is cancelled.
    pub fn new(loopback: Channel, stop: CancellationToken) -> McpServers {
        McpServers {
            loopback,
            services: Mutex::new(HashMap::new()),
            stop,
        }
    }
}

/// `NAMESPACE` and `NAME` of `/mcp/NAMESPACE/NAME`.
fn computer_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(PREFIX)?.trim_end_matches('/');
    let (ns, name) = rest.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
}

/// Most bytes of a refused request's body read before answering: an MCP
/// request is a small JSON-RPC message.
const DRAIN_LIMIT: usize = 1 << 20;

/// The refusal of `req`, after reading its body (up to [`DRAIN_LIMIT`]):
/// an HTTP/1.1 server that answers before the body is read closes the
/// connection, and a client that reuses it for its next request (as
/// httpx does) sees the connection drop without an answer.
async fn refuse(req: Request, status: StatusCode, message: &str) -> Response {
    let _ = axum::body::to_bytes(req.into_body(), DRAIN_LIMIT).await;
    let mut r = (status, format!("{message}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

/// Serves one MCP request for the computer its path names. 401 (with
/// `WWW-Authenticate: Bearer`) without a computer's current token; 404
/// when the token's computer is not the one named (the same answer as for
/// a computer that does not exist) or was deleted (then saying so); 503 when it has no serving agent now.
pub async fn serve(State(gw): State<Arc<Gateway>>, mut req: Request) -> Response {
    let Some((ns, name)) = computer_of(req.uri().path()) else {
        return refuse(req, StatusCode::NOT_FOUND, "expected /mcp/NAMESPACE/NAME").await;
    };
    let (ns, name) = (ns.to_string(), name.to_string());
    let Some(token) = bearer(req.headers()).map(str::to_string) else {
        return refuse(req, StatusCode::UNAUTHORIZED, &NoRoute::Missing.to_string()).await;
    };
    let route = match gw.routes.route_settled(Some(&token)).await {
        Ok(r) => r,
        Err(e @ (NoRoute::Missing | NoRoute::Unknown)) => {
            return refuse(req, StatusCode::UNAUTHORIZED, &e.to_string()).await;
        }
        Err(NoRoute::NotServed { computer }) if computer == format!("{ns}/{name}") => {
            let message = NoRoute::NotServed { computer }.to_string();
            return refuse(req, StatusCode::SERVICE_UNAVAILABLE, &message).await;
        }
        Err(NoRoute::Deleted { computer }) if computer == format!("{ns}/{name}") => {
            let message = NoRoute::Deleted { computer }.to_string();
            return refuse(req, StatusCode::NOT_FOUND, &message).await;
        }
        Err(NoRoute::NotServed { .. } | NoRoute::Deleted { .. }) => {
            return refuse(req, StatusCode::NOT_FOUND, NOT_YOURS).await;
        }
    };
    if route.namespace != ns || route.name != name {
        return refuse(req, StatusCode::NOT_FOUND, NOT_YOURS).await;
    }
    let Some(servers) = &gw.mcp else {
        return refuse(
            req,
            StatusCode::NOT_FOUND,
            "MCP is not served by this gateway",
        )
        .await;
    };
    let key = fingerprint(&token);
    let cached = servers.services.lock().get(&key).cloned();
    let service = match cached {
        Some(s) => s,
        None => {
            let bearer = match Bearer::new(&token, "the request") {
                Ok(b) => b,
                Err(e) => return refuse(req, StatusCode::UNAUTHORIZED, &e.message).await,
            };
            let agent = Agent::new(
                over(servers.loopback.clone(), bearer),
                route.computer(),
                route.computer(),
                route.runtimes.clone(),
            );
            let made =
                agentcomputer_mcp::http::service(Arc::new(agent), None, servers.stop.child_token());
            let mut services = servers.services.lock();
            if services.len() >= MAX_SERVICES {
                services.clear();
            }
            services.entry(key).or_insert(made).clone()
        }
    };
    // The MCP service answers at its own root.
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    *req.uri_mut() = format!("/{query}").parse().unwrap_or_default();
    match service.oneshot(req).await {
        Ok(r) => r.map(Body::new),
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_one_computer() {
        assert_eq!(computer_of("/mcp/ns/c"), Some(("ns", "c")));
        assert_eq!(computer_of("/mcp/ns/c/"), Some(("ns", "c")));
        assert_eq!(computer_of("/mcp/ns"), None);
        assert_eq!(computer_of("/mcp//c"), None);
        assert_eq!(computer_of("/mcp/ns/c/x"), None);
        assert_eq!(computer_of("/other/ns/c"), None);
    }
}
