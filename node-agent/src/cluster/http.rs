//! The agent's HTTP endpoint (axum) on `--metrics-addr`: `/metrics`
//! (Prometheus text format), `/healthz` (the process answers) and `/readyz`
//! (watches synced, capacity published, gRPC serving; 503 naming what is
//! missing otherwise).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Node;

/// Serves the endpoints on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(node);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

async fn metrics(State(node): State<Arc<Node>>) -> impl IntoResponse {
    // Counts read at scrape time, so they are exact when scraped.
    let open = node.registry.open_count();
    match node.registry.names().await {
        Ok(names) => {
            node.metrics
                .set_computers(open, names.len().saturating_sub(open));
            // Handed-over connections of sandbox mounts, plus host mounts.
            let handed: usize = names
                .iter()
                .map(|n| node.registry.connection_count(n))
                .sum();
            node.metrics
                .set_fuse_connections(handed + node.registry.mounts().len());
        }
        Err(e) => tracing::warn!(error = %e, "cannot count computers"),
    }
    if let Some(totals) = node.registry.backup_totals() {
        let reports = node.registry.backup_reports();
        node.metrics.set_backup(
            super::metrics::backup_gauges(&reports, std::time::Instant::now()),
            totals,
        );
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        node.metrics.encode(),
    )
}

async fn readyz(State(node): State<Arc<Node>>) -> impl IntoResponse {
    let missing = node.readiness.missing();
    if missing.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join(", ")),
        )
    }
}
