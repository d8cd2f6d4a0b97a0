//! One HTTP/1.1 exchange (one redirect hop) under the egress policy.
//!
//! The host is resolved once ([`crate::resolve`]), every address is
//! checked, and the connection goes to one of the checked addresses; the
//! socket is ours, so nothing underneath can look the name up again or go
//! through a proxy from the environment. Redirects are the caller's: each
//! hop is a new [`send`] and so a new check ([`super::follow`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use url::Url;

use super::error::HttpError;
use super::raw_head::{RawHead, Tap, title_case};
use super::tls;
use crate::policy::Policy;
use crate::resolve::{Target, resolve};

/// One request, as the caller wants it sent.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `POST`, ... (any token curl's `-X` accepts).
    pub method: Method,
    /// Absolute `http` or `https` URL.
    pub url: Url,
    /// Headers in the order given. A `Host` header here replaces the one
    /// made from the URL.
    pub headers: Vec<(String, String)>,
    /// Body; empty for none.
    pub body: Bytes,
    /// Skip TLS certificate verification (curl `-k`). The policy still
    /// decides where the connection goes.
    pub insecure: bool,
}

/// Bounds of one exchange.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// For TCP connect plus TLS handshake, per hop.
    pub connect_timeout: Duration,
    /// When the whole transfer must be over, body included.
    pub deadline: Instant,
    /// Largest response body accepted, bytes.
    pub max_body_bytes: u64,
}

/// A response whose body is read as it arrives with [`Response::chunk`].
/// Dropping it closes the connection.
pub struct Response {
    /// The status code (this one hop: redirects are not followed here).
    pub status: StatusCode,
    /// The HTTP version the server answered with.
    pub version: Version,
    /// The response's header fields, as received.
    pub headers: HeaderMap,
    /// The address the connection went to.
    pub remote: SocketAddr,
    /// The URL this response answers.
    pub url: Url,
    /// The head as received, when it could be captured.
    raw: Option<RawHead>,
    body: Incoming,
    received: u64,
    limits: Limits,
    started: Instant,
    _connection: AbortOnDrop,
}

impl Response {
    /// The reason phrase as the server sent it (`Not Found`), or the
    /// standard one for the status when it sent none.
    pub fn reason(&self) -> &str {
        match &self.raw {
            Some(raw) if !raw.reason.is_empty() => &raw.reason,
            _ => self.status.canonical_reason().unwrap_or(""),
        }
    }

    /// Header lines as `curl -i` shows them: in arrival order, names spelled
    /// as the server sent them (`Content-Length`, `x-request-id`). When the
    /// head could not be kept (over 64 KiB), the names of
    /// [`Response::headers`] in Title-Case instead.
    pub fn header_lines(&self) -> Vec<(String, Vec<u8>)> {
        match &self.raw {
            Some(raw) => raw.headers.clone(),
            None => self
                .headers
                .iter()
                .map(|(n, v)| (title_case(n.as_str()), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    /// The next piece of the body; `None` at its end. Errors: the cap
    /// ([`HttpError::TooLarge`]), the deadline, a broken connection.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        loop {
            let frame = tokio::time::timeout_at(self.limits.deadline.into(), self.body.frame())
                .await
                .map_err(|_| HttpError::Timeout(self.started.elapsed()))?;
            let frame = match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(HttpError::Receive(e.to_string())),
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            self.received += data.len() as u64;
            if self.received > self.limits.max_body_bytes {
                return Err(HttpError::TooLarge(self.limits.max_body_bytes));
            }
            if !data.is_empty() {
                return Ok(Some(data));
            }
        }
    }

    /// The whole body, within the cap.
    pub async fn bytes(mut self) -> Result<Vec<u8>, HttpError> {
        let mut all = Vec::new();
        while let Some(piece) = self.chunk().await? {
            all.extend_from_slice(&piece);
        }
        Ok(all)
    }

    /// Body bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }
}

/// Sends `req` (no redirect following) and returns once the response
/// head has arrived. Errors: see [`HttpError`]; a destination the policy
/// refuses fails before any connection is made.
pub async fn send(policy: &Policy, req: &Request, limits: Limits) -> Result<Response, HttpError> {
    let started = Instant::now();
    match tokio::time::timeout_at(
        limits.deadline.into(),
        exchange(policy, req, limits, started),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(HttpError::Timeout(started.elapsed())),
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

async fn exchange(
    policy: &Policy,
    req: &Request,
    limits: Limits,
    started: Instant,
) -> Result<Response, HttpError> {
    let url = &req.url;
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(HttpError::UnsupportedScheme(other.to_string())),
    };
    let host = url
        .host()
        .ok_or_else(|| HttpError::BadUrl(format!("no host in {url}")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let target = match host {
        url::Host::Domain(name) => Target::Name(name),
        url::Host::Ipv4(ip) => Target::Ip(ip.into()),
        url::Host::Ipv6(ip) => Target::Ip(ip.into()),
    };
    let addrs = resolve(policy, target, port).await?;
    let shown_host = url.host_str().unwrap_or_default().to_string();

    let handshake = async {
        let (tcp, remote) = connect(&addrs, &shown_host, port).await?;
        let io: Box<dyn Io> = if https {
            let name = match target {
                Target::Name(n) => ServerName::try_from(n.to_string())
                    .map_err(|_| HttpError::BadUrl(format!("bad host name {n}")))?,
                Target::Ip(ip) => ServerName::IpAddress(ip.into()),
            };
            let connector = tokio_rustls::TlsConnector::from(tls::config(req.insecure));
            Box::new(connector.connect(name, tcp).await.map_err(tls_error)?)
        } else {
            Box::new(tcp)
        };
        Ok::<_, HttpError>((io, remote))
    };
    let (io, remote) = tokio::time::timeout(limits.connect_timeout, handshake)
        .await
        .map_err(|_| HttpError::Timeout(started.elapsed()))??;

    let (io, captured) = Tap::new(io);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| HttpError::Receive(e.to_string()))?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let guard = AbortOnDrop(driver.abort_handle());

    let head = sender
        .send_request(build(req)?)
        .await
        .map_err(hyper_error)?;
    let (parts, body) = head.into_parts();
    if req.method != Method::HEAD
        && let Some(len) = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && len > limits.max_body_bytes
    {
        return Err(HttpError::TooLarge(limits.max_body_bytes));
    }
    Ok(Response {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        remote,
        url: url.clone(),
        // hyper has read the whole head by now, through the tap.
        raw: captured.take(),
        body,
        received: 0,
        limits,
        started,
        _connection: guard,
    })
}

/// Tries the checked addresses in order.
async fn connect(
    addrs: &[SocketAddr],
    host: &str,
    port: u16,
) -> Result<(TcpStream, SocketAddr), HttpError> {
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, *addr));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(HttpError::Connect {
        host: host.to_string(),
        port,
        reason: last,
    })
}

fn build(req: &Request) -> Result<http::Request<Full<Bytes>>, HttpError> {
    let url = &req.url;
    let target = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let mut out = http::Request::builder()
        .method(req.method.clone())
        .uri(target)
        .body(Full::new(req.body.clone()))
        .map_err(|e| HttpError::BadUrl(e.to_string()))?;
    let headers = out.headers_mut();
    let mut host = url.host_str().unwrap_or_default().to_string();
    if let Some(port) = url.port() {
        host = format!("{host}:{port}");
    }
    let bad = |what: &str| HttpError::BadHeader(what.to_string());
    headers.insert(HOST, HeaderValue::from_str(&host).map_err(|_| bad(&host))?);
    let mut replaced_host = false;
    for (name, value) in &req.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad(name))?;
        let value = HeaderValue::from_str(value).map_err(|_| bad(value))?;
        if name == HOST && !replaced_host {
            headers.remove(HOST);
            replaced_host = true;
        }
        headers.append(name, value);
    }
    let sends_body = matches!(req.method, Method::POST | Method::PUT | Method::PATCH);
    if req.body.is_empty() && sends_body && !headers.contains_key(CONTENT_LENGTH) {
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    }
    Ok(out)
}

fn tls_error(e: std::io::Error) -> HttpError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => HttpError::Certificate(format!("{why:?}")),
        Some(other) => HttpError::Tls(other.to_string()),
        None => HttpError::Tls(e.to_string()),
    }
}

fn hyper_error(e: hyper::Error) -> HttpError {
    if e.is_incomplete_message() {
        HttpError::EmptyReply
    } else if e.is_parse() {
        HttpError::Protocol(e.to_string())
    } else {
        HttpError::Receive(e.to_string())
    }
}

/// Stops the connection task when the response goes away, so a cancelled
/// or abandoned transfer leaves no socket behind.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
