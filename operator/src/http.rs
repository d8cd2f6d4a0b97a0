//! HTTP endpoints: `/metrics` (Prometheus text format), `/healthz` (the
//! process serves), `/readyz` (200 once this replica is leader or a standby
//! that reached the API server, 503 before).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentcomputer_crds::AgentComputer;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use kube::runtime::reflector::Store;
use tokio::sync::RwLock;

use crate::metrics::Metrics;

/// State behind the endpoints.
#[derive(Clone)]
pub struct Health {
    /// Metrics to render.
    pub metrics: Arc<Metrics>,
    /// Set when the replica is ready (see module docs).
    pub ready: Arc<AtomicBool>,
    /// The controller's cache once it runs, for the per-phase gauge.
    pub computers: Arc<RwLock<Option<Store<AgentComputer>>>>,
}

impl Health {
    /// Not-ready state with no cache yet.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            ready: Arc::new(AtomicBool::new(false)),
            computers: Arc::new(RwLock::new(None)),
        }
    }
}

/// The router serving the three endpoints.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(h): State<Health>) -> String {
    if let Some(store) = h.computers.read().await.as_ref() {
        h.metrics.count_phases(store);
    }
    h.metrics.render()
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Serves the router on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, health: Health) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics /healthz /readyz");
    axum::serve(listener, router(health)).await
}
