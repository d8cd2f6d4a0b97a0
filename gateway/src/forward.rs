//! Forwarding one gRPC call of the `agentcomputer.v1.AgentComputer`
//! service to the node agent serving the caller's computer.
//!
//! The call goes through as HTTP/2, untouched: headers (the credential
//! included, which the agent checks again), every request and response
//! message as it comes, in both directions at once (`ExecStream`'s
//! stdin while output streams back), and the trailers that carry the
//! status. A client that goes away resets its stream here, which drops
//! the forwarded call, which resets the agent's stream: the agent sees
//! the cancellation as from a direct client.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tower::{Service, ServiceExt};
use tracing::info;

use crate::limits::Admitted;
use crate::metrics::code_name;
use crate::routes::NoRoute;
use crate::state::Gateway;

/// Path prefix of the forwarded service's methods.
pub const SERVICE_PREFIX: &str = "/agentcomputer.v1.AgentComputer/";

/// The peer address of a connection, put in each request's extensions by
/// the listener (for access logs).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// The bearer token of `headers`' `authorization` (RFC 6750 section
/// 2.1), if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .filter(|t| !t.is_empty())
}

/// Forwards `req` (a call of [`SERVICE_PREFIX`]), or answers it with the
/// gateway's own refusal: `UNAUTHENTICATED` without a computer's current
/// token, `NOT_FOUND` with a deleted computer's last token
/// ([`crate::deleted`]), `UNAVAILABLE` when its computer has no serving agent now or the
/// agent cannot be reached, `RESOURCE_EXHAUSTED` past a limit
/// ([`crate::limits`]).
pub async fn forward(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    let start = Instant::now();
    let method = req
        .uri()
        .path()
        .strip_prefix(SERVICE_PREFIX)
        .unwrap_or("")
        .to_string();
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let token = bearer(req.headers()).map(str::to_string);
    let route = match gw.routes.route_settled(token.as_deref()).await {
        Ok(r) => r,
        Err(e) => {
            let status = match e {
                NoRoute::Missing | NoRoute::Unknown => {
                    tonic::Status::unauthenticated(e.to_string())
                }
                NoRoute::NotServed { .. } => tonic::Status::unavailable(e.to_string()),
                NoRoute::Deleted { .. } => tonic::Status::not_found(e.to_string()),
            };
            return gw.refuse(&method, None, peer, start, status);
        }
    };
    let computer = route.computer();
    let fingerprint = crate::routes::fingerprint(token.as_deref().unwrap_or(""));
    let admitted = match gw.limits.admit(&computer, &fingerprint) {
        Ok(a) => a,
        Err(e) => {
            let status = tonic::Status::resource_exhausted(e.to_string());
            return gw.refuse(&method, Some(&computer), peer, start, status);
        }
    };
    let mut channel = match gw.upstreams.channel(&route.endpoint, &computer) {
        Ok(c) => c,
        Err(e) => {
            let status = tonic::Status::unavailable(e);
            return gw.refuse(&method, Some(&computer), peer, start, status);
        }
    };
    let (parts, body) = req.into_parts();
    let mut forwarded = http::Request::from_parts(parts, tonic::body::Body::new(body));
    // The channel sets scheme and authority to the agent's; the path, the
    // credential and every gRPC header go as they came.
    forwarded.headers_mut().remove(http::header::HOST);
    let end = CallEnd {
        gw: gw.clone(),
        method,
        computer: Some(computer),
        peer,
        start,
        code: None,
        _admitted: Some(admitted),
    };
    gw.metrics.in_flight.inc();
    let answer = match channel.ready().await {
        Ok(c) => c.call(forwarded).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            // A trailers-only answer carries its status in the headers.
            let code = status_of(&parts.headers);
            let mut end = end;
            end.code = code;
            // The call is over for the client once it has the status: its
            // places in the limits are free before it can send the next.
            let end = match code {
                Some(_) => {
                    drop(end);
                    None
                }
                None => Some(end),
            };
            Response::from_parts(parts, Body::new(Observed { inner: body, end }))
        }
        Err(e) => {
            let status = tonic::Status::unavailable(format!(
                "cannot reach the node agent serving {}: {e}",
                end.computer.as_deref().unwrap_or("")
            ));
            let mut end = end;
            end.code = Some(status.code());
            drop(end);
            status.into_http()
        }
    }
}

/// The status a header map's `grpc-status` carries, if any.
fn status_of(headers: &HeaderMap) -> Option<tonic::Code> {
    let v = headers.get("grpc-status")?.to_str().ok()?;
    Some(tonic::Code::from_i32(v.parse().ok()?))
}

/// What is recorded when a forwarded call ends (its response body is done
/// or dropped): metrics and one access log line, without the credential.
/// Holds the call's places in the limits until then.
struct CallEnd {
    gw: Arc<Gateway>,
    method: String,
    computer: Option<String>,
    peer: Option<SocketAddr>,
    start: Instant,
    /// The status seen; `None` at drop means the stream was cut before
    /// its trailers (the client went away, or the agent's connection).
    code: Option<tonic::Code>,
    _admitted: Option<Admitted>,
}

impl Drop for CallEnd {
    fn drop(&mut self) {
        let code = self.code.unwrap_or(tonic::Code::Cancelled);
        let seconds = self.start.elapsed().as_secs_f64();
        self.gw
            .metrics
            .ended(&self.method, self.computer.as_deref(), code, seconds);
        self.gw.metrics.in_flight.dec();
        info!(
            target: "access",
            method = %self.method,
            computer = self.computer.as_deref().unwrap_or("-"),
            code = code_name(code),
            seconds,
            peer = ?self.peer,
            "call"
        );
    }
}

/// The agent's response body, passed through frame by frame, watching for
/// the trailers' status (the call ends there, or when the body ends or is
/// dropped).
struct Observed {
    inner: tonic::body::Body,
    end: Option<CallEnd>,
}

impl http_body::Body for Observed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                // The trailers end the call: it is recorded, and its places
                // in the limits freed, before the client can see them.
                if let Some(code) = frame.trailers_ref().and_then(status_of)
                    && let Some(mut end) = self.end.take()
                {
                    end.code = Some(code);
                }
            }
            Poll::Ready(Some(Err(status))) => {
                if let Some(end) = &mut self.end {
                    end.code = Some(status.code());
                }
                self.end.take();
            }
            Poll::Ready(None) => {
                self.end.take();
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Gateway {
    /// The gateway's own answer to a call it does not forward, recorded
    /// like a forwarded call's end.
    pub(crate) fn refuse(
        self: &Arc<Self>,
        method: &str,
        computer: Option<&str>,
        peer: Option<SocketAddr>,
        start: Instant,
        status: tonic::Status,
    ) -> Response {
        self.metrics.in_flight.inc();
        drop(CallEnd {
            gw: self.clone(),
            method: method.to_string(),
            computer: computer.map(str::to_string),
            peer,
            start,
            code: Some(status.code()),
            _admitted: None,
        });
        status.into_http()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }
}
