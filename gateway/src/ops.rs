//! The operations listener: `/metrics` (Prometheus text format),
//! `/healthz` (the process answers) and `/readyz` (200 once the watch
//! cache of AgentComputers has synced and until the gateway is stopping,
//! so a Service sends new calls to replicas that can route them).
//! Kept off the API listener: the metrics name computers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// What the operations listener reports.
#[derive(Clone)]
pub struct Ops {
    /// The gateway's metrics.
    pub metrics: Metrics,
    /// Whether new calls should come here.
    pub ready: Arc<AtomicBool>,
}

/// The operations routes.
pub fn router(ops: Ops) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(o): State<Ops>| async move { o.metrics.render() }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(o): State<Ops>| async move {
                if o.ready.load(Ordering::Acquire) {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }),
        )
        .with_state(ops)
}
