//! The gateway's HTTP server (axum over hyper) and its proxy to the node
//! agents (hyper-util's pooled HTTP/1.1 client).
//!
//! Answers:
//! * `GET`/`HEAD` of a link (see [`super::link_uid`]): proxied to the node
//!   agent of the computer's node with the same path and query and the
//!   client's headers (`Range`, `If-Range`…), less hop-by-hop headers
//!   (RFC 9110 section 7.6.1). The agent's status, headers and body come
//!   back unchanged and streamed: the gateway holds no file in memory. A
//!   body the agent ends early (the file changed while sent) ends the
//!   client's connection early too.
//! * `403 invalid or revoked link` for a malformed link or an unknown uid
//!   (the agent's own answer, so a link reveals nothing);
//! * `405` with `Allow: GET, HEAD` for other methods on a link;
//! * `503` with `Retry-After` while the caches have not synced, when no
//!   Ready node agent runs on the computer's node, and when
//!   [`GatewayConfig::max_requests`] proxied requests are running;
//! * `502` when the agent cannot be reached within
//!   [`GatewayConfig::connect_timeout`] or fails, `504` when its response
//!   head takes longer than [`GatewayConfig::response_timeout`];
//! * `/healthz` (200 while the process serves), `/readyz` (200 once both
//!   watch caches have synced, 503 before);
//! * `404` for every other path.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{Caches, Route, link_uid};

/// The node agent's answer to a malformed, tampered, revoked or unknown
/// link (node-agent `share::http::INVALID`).
pub const INVALID: &str = "invalid or revoked link";

/// Settings of the gateway.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Path of the agents' share URL (`/`, or `/prefix/` when an Ingress
    /// forwards links below a prefix unchanged).
    pub base_path: String,
    /// Port of the node agents' share server (their `--share-listen`).
    pub share_port: u16,
    /// Longest wait for a TCP connection to a node agent.
    pub connect_timeout: Duration,
    /// Longest wait for a node agent's response head once connected
    /// (the body then streams as long as the client takes it).
    pub response_timeout: Duration,
    /// Proxied requests running at once at most (a download counts until
    /// its body ends); past that `503`.
    pub max_requests: usize,
    /// Seconds in `Retry-After` when no Ready node agent serves the
    /// computer's node.
    pub retry_after_seconds: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            base_path: "/".into(),
            share_port: 7434,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            max_requests: 256,
            retry_after_seconds: 5,
        }
    }
}

/// The gateway's state: caches, client, limits.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    config: GatewayConfig,
    caches: Caches,
    ready: AtomicBool,
    slots: Arc<Semaphore>,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Gateway {
    /// A gateway over `caches`, not ready until [`Gateway::set_ready`].
    pub fn new(config: GatewayConfig, caches: Caches) -> Gateway {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Gateway {
            inner: Arc::new(Inner {
                slots: Arc::new(Semaphore::new(config.max_requests)),
                config,
                caches,
                ready: AtomicBool::new(false),
                client,
            }),
        }
    }

    /// Marks the caches synced: links are routed from now on.
    pub fn set_ready(&self) {
        self.inner.ready.store(true, Ordering::Release);
    }

    fn ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }
}

/// The gateway's routes.
pub fn router(gateway: Gateway) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(handle)
        .with_state(gateway)
}

/// Serves `gateway` on `listener` until `shutdown` completes (requests
/// running then are finished first).
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(gateway))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn readyz(State(g): State<Gateway>) -> (StatusCode, &'static str) {
    if g.ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced")
    }
}

fn plain(status: StatusCode, reason: &str) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from(format!("{reason}\n")))
        .expect("static headers are valid")
}

fn retry_later(status: StatusCode, reason: &str, seconds: u32) -> Response {
    let mut r = plain(status, reason);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    r
}

async fn handle(State(g): State<Gateway>, req: Request) -> Response {
    let cfg = &g.inner.config;
    let uid = match link_uid(&cfg.base_path, req.uri().path()) {
        None => return plain(StatusCode::NOT_FOUND, "not found"),
        Some(None) => return plain(StatusCode::FORBIDDEN, INVALID),
        Some(Some(uid)) => uid.to_string(),
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if !g.ready() {
        return retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "gateway starting; retry later",
            1,
        );
    }
    let ip = match g.inner.caches.route(&uid) {
        Route::Agent(ip) => ip,
        Route::UnknownComputer => return plain(StatusCode::FORBIDDEN, INVALID),
        Route::NoAgent { node } => {
            tracing::info!(%uid, %node, "no Ready node agent for a link");
            return retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "the computer's node agent is not ready; retry later",
                cfg.retry_after_seconds,
            );
        }
    };
    let Ok(permit) = g.inner.slots.clone().try_acquire_owned() else {
        return retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many downloads; retry later",
            1,
        );
    };
    let upstream = match upstream_request(&req, ip, cfg.share_port) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot form the upstream request");
            return plain(StatusCode::FORBIDDEN, INVALID);
        }
    };
    let answer = tokio::time::timeout(cfg.response_timeout, g.inner.client.request(upstream));
    let resp = match answer.await {
        Err(_) => {
            tracing::warn!(%uid, %ip, "node agent answered too slowly");
            return retry_later(
                StatusCode::GATEWAY_TIMEOUT,
                "the node agent did not answer in time",
                cfg.retry_after_seconds,
            );
        }
        Ok(Err(e)) => {
            tracing::warn!(%uid, %ip, error = %e, "cannot reach the node agent");
            return retry_later(
                StatusCode::BAD_GATEWAY,
                "cannot reach the computer's node agent",
                cfg.retry_after_seconds,
            );
        }
        Ok(Ok(resp)) => resp,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // The slot is held until the body is done (or the client goes).
    let body = body.map_frame(move |frame| {
        let _held = &permit;
        frame
    });
    Response::from_parts(parts, Body::new(body))
}

/// The request to the agent at `ip:port`: same method, path and query,
/// the client's end-to-end headers, no body (links are GET/HEAD).
fn upstream_request(
    req: &Request,
    ip: IpAddr,
    port: u16,
) -> Result<http::Request<Empty<Bytes>>, http::Error> {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let uri = format!("http://{}{path}", SocketAddr::new(ip, port));
    let mut out = http::Request::builder()
        .method(req.method().clone())
        .uri(uri)
        .body(Empty::new())?;
    let mut headers = req.headers().clone();
    strip_hop_by_hop(&mut headers);
    // The client sets Host from the URI.
    headers.remove(header::HOST);
    *out.headers_mut() = headers;
    Ok(out)
}

/// Removes the hop-by-hop headers (RFC 9110 section 7.6.1: `Connection`
/// and the fields it names, `Proxy-Connection`, `Keep-Alive`, `TE`,
/// `Transfer-Encoding`, `Upgrade`) and `Trailer`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::RANGE, HeaderValue::from_static("bytes=0-9"));
        h.insert(header::IF_RANGE, HeaderValue::from_static("\"x\""));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["range", "if-range"]);
    }

    #[test]
    fn upstream_keeps_path_query_and_range() {
        let req = Request::builder()
            .method(Method::HEAD)
            .uri("/share/v1/u/a%20b.txt?expires=5&sig=x")
            .header(header::HOST, "files.example.com")
            .header(header::RANGE, "bytes=-5")
            .body(Body::empty())
            .unwrap();
        let up = upstream_request(&req, "fd00::1".parse().unwrap(), 7434).unwrap();
        assert_eq!(up.method(), Method::HEAD);
        assert_eq!(
            up.uri().to_string(),
            "http://[fd00::1]:7434/share/v1/u/a%20b.txt?expires=5&sig=x"
        );
        assert_eq!(up.headers()[header::RANGE], "bytes=-5");
        assert!(up.headers().get(header::HOST).is_none());
    }
}
