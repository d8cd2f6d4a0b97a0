//! The door of cluster mode's API port: every sandbox pod of the node may
//! reach it (its runner attaches there), so what one source may hold is
//! bounded ([`crate::gate`] with per-source bounds: in a cluster a pod's
//! address is its identity), and a connection must show a computer's
//! current token within the deadline, its TLS handshake included.
//!
//! Port-forwarded clients (`kubectl computer`) all arrive from `127.0.0.1`
//! inside the agent's pod and so share one source's bounds.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::credentials::ClusterAuthorizer;
use crate::auth::bearer_token;
use crate::gate::{
    DEFAULT_CONNECTIONS_PER_SOURCE, DEFAULT_UNAUTHENTICATED_PER_SOURCE, GateConfig, GatedListener,
};

/// Bounds of the API port in cluster mode.
#[derive(Debug, Clone, Copy)]
pub struct ApiGate {
    /// Most connections open at once from one source address.
    pub connections_per_source: usize,
    /// Most of those not yet authenticated.
    pub unauthenticated_per_source: usize,
    /// Time from accept to the first call carrying a known token.
    pub auth_deadline: Duration,
}

impl Default for ApiGate {
    /// 64 connections per source, 8 of them unauthenticated, 10 s to
    /// authenticate.
    fn default() -> ApiGate {
        ApiGate {
            connections_per_source: DEFAULT_CONNECTIONS_PER_SOURCE,
            unauthenticated_per_source: DEFAULT_UNAUTHENTICATED_PER_SOURCE,
            auth_deadline: GateConfig::default().auth_deadline,
        }
    }
}

impl ApiGate {
    /// The gate's bounds within `descriptors` (the API port's share of
    /// the agent's descriptors, [`crate::descriptors`]).
    pub fn config(&self, descriptors: usize) -> GateConfig {
        GateConfig {
            auth_deadline: self.auth_deadline,
            ..GateConfig::within(descriptors)
        }
        .with_sources(self.connections_per_source, self.unauthenticated_per_source)
    }

    /// `listener` behind this gate, within `descriptors`.
    pub fn listener(&self, listener: TcpListener, descriptors: usize) -> GatedListener {
        GatedListener::new(listener, self.config(descriptors), "api")
    }
}

/// Marks a connection authenticated once a call on it carries the current
/// token of some computer on this node; refuses nothing itself (every
/// call is checked again by [`ClusterAuthorizer`]).
#[derive(Clone)]
pub struct AuthenticatedConnections(pub Arc<ClusterAuthorizer>);

impl tonic::service::Interceptor for AuthenticatedConnections {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if bearer_token(req.metadata()).is_some_and(|t| self.0.knows(t)) {
            if let Some(ticket) = crate::gate::ticket_of(req.extensions()) {
                ticket.authenticated();
            }
        }
        Ok(req)
    }
}
