//! One client connection: read the request head, identify the caller,
//! decide, connect to a checked address, then relay bytes.

use std::net::SocketAddr;
use std::sync::Arc;

use agentcomputer_egress::{DenyReason, ResolveError, resolve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{info, warn};

use crate::Proxy;
use crate::identify::Caller;
use crate::target::{Dest, parse_absolute, parse_authority};

/// Headers that concern the hop to the proxy, never sent upstream.
const HOP_HEADERS: &[&str] = &[
    "proxy-authorization",
    "proxy-connection",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// Serves one client connection to its end.
pub(crate) async fn serve(proxy: &Proxy, mut client: TcpStream, peer: SocketAddr) {
    let _ = client.set_nodelay(true);
    let s = &proxy.settings;
    let head = match tokio::time::timeout(s.head_timeout, read_head(&mut client, s.max_head_bytes))
        .await
    {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => return,
        Ok(Err(why)) => {
            proxy.metrics.count("denied", "bad-request");
            let _ = reply(&mut client, 400, "Bad Request", &why).await;
            return;
        }
        Err(_) => return,
    };
    let (buf, head_len) = head;
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = matches!(
        req.parse(&buf[..head_len]),
        Ok(httparse::Status::Complete(_))
    );
    let (Some(method), Some(target), true) = (req.method, req.path, parsed) else {
        proxy.metrics.count("denied", "bad-request");
        let _ = reply(
            &mut client,
            400,
            "Bad Request",
            "malformed HTTP request head",
        )
        .await;
        return;
    };
    let auth = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))
        .map(|h| h.value);
    let source = peer.ip().to_canonical();
    if let Some(left) = proxy.throttle.throttled(source) {
        // The credential is not looked at: that is what bounds guessing.
        proxy.metrics.count("denied", "throttled");
        proxy.throttle.refused_throttled(source, left);
        let head = format!(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            left.as_secs().max(1)
        );
        let _ = client.write_all(head.as_bytes()).await;
        return;
    }
    let Some(caller) = proxy.identify.identify(peer, auth) else {
        proxy.metrics.count("denied", "unauthenticated");
        let what = match auth {
            Some(_) => "unknown or revoked credential",
            None => "no credential",
        };
        proxy.throttle.failed(source, what);
        let _ = client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"agentcomputer\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let _counted = match &proxy.computers {
        None => None,
        Some(limits) => match limits.admit(&Arc::from(caller.computer.as_str())) {
            Ok(a) => Some(a),
            Err(_) => {
                proxy.metrics.count("denied", "too-many-connections");
                info!(computer = %caller.computer, "egress proxy: refused: the computer holds its limit of proxy connections");
                let text = format!(
                    "this computer holds its limit of {} proxy connections",
                    limits.per_key()
                );
                let _ = reply(&mut client, 429, "Too Many Requests", &text).await;
                return;
            }
        },
    };
    let rest = &buf[head_len..];
    if method.eq_ignore_ascii_case("CONNECT") {
        let dest = match parse_authority(target) {
            Ok(d) => d,
            Err(e) => return bad_request(proxy, &mut client, &caller, &e.to_string()).await,
        };
        let Some(mut upstream) = open(proxy, &mut client, &caller, &dest, "CONNECT").await else {
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        if !rest.is_empty() && upstream.write_all(rest).await.is_err() {
            return;
        }
        if !crate::relay::relay(&mut client, &mut upstream, proxy.settings.idle_timeout).await {
            info!(computer = %caller.computer, "egress proxy: idle connection closed");
        }
        return;
    }
    let (dest, origin) = match parse_absolute(target) {
        Ok(t) => t,
        Err(e) => return bad_request(proxy, &mut client, &caller, &e.to_string()).await,
    };
    let mut upstream_head = format!("{method} {origin} HTTP/1.1\r\n").into_bytes();
    // The policy judged the URL's host, so that is the host asked for: a
    // proxy ignores the client's Host and sends the URL's (RFC 9112
    // §3.2.2); otherwise `Host: other` would reach another virtual host
    // on an allowed address.
    upstream_head.extend_from_slice(format!("host: {}\r\n", host_header(&dest)).as_bytes());
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host")
            || HOP_HEADERS
                .iter()
                .any(|hop| h.name.eq_ignore_ascii_case(hop))
        {
            continue;
        }
        upstream_head.extend_from_slice(h.name.as_bytes());
        upstream_head.extend_from_slice(b": ");
        upstream_head.extend_from_slice(h.value);
        upstream_head.extend_from_slice(b"\r\n");
    }
    // One request per upstream connection: the next request on this client
    // connection would otherwise reach this destination unchecked.
    upstream_head.extend_from_slice(b"connection: close\r\n\r\n");
    upstream_head.extend_from_slice(rest);
    let Some(mut upstream) = open(proxy, &mut client, &caller, &dest, method).await else {
        return;
    };
    if upstream.write_all(&upstream_head).await.is_err() {
        return;
    }
    if !crate::relay::relay(&mut client, &mut upstream, proxy.settings.idle_timeout).await {
        info!(computer = %caller.computer, "egress proxy: idle connection closed");
    }
}

/// The `Host` value for `dest`: the port only when it is not 80, the
/// default of the `http` scheme (RFC 9110 §7.2).
fn host_header(dest: &crate::target::Dest) -> String {
    if dest.port == 80 {
        dest.host.to_string()
    } else {
        dest.to_string()
    }
}

async fn bad_request(proxy: &Proxy, client: &mut TcpStream, caller: &Caller, why: &str) {
    proxy.metrics.count("denied", "bad-request");
    info!(computer = %caller.computer, why, "egress proxy: bad request");
    let _ = reply(client, 400, "Bad Request", why).await;
}

/// Decides `dest` for `caller` and connects to a checked address; on
/// refusal or failure answers the client and returns `None`.
async fn open(
    proxy: &Proxy,
    client: &mut TcpStream,
    caller: &Caller,
    dest: &Dest,
    method: &str,
) -> Option<TcpStream> {
    let computer = &caller.computer;
    let addrs = match resolve(&caller.policy, dest.target(), dest.port).await {
        Ok(addrs) => addrs,
        Err(ResolveError::Denied(denial)) => {
            let reason = match denial.reason {
                DenyReason::DenyAll => "deny-all",
                DenyReason::NotListed => "not-listed",
                DenyReason::Metadata => "metadata",
                DenyReason::Local => "local",
                DenyReason::Node => "node",
                DenyReason::Control(_) => "control",
            };
            proxy.metrics.count("denied", reason);
            info!(%computer, method, target = %dest, reason, "egress proxy: denied");
            proxy
                .denials
                .record(&caller.key, method, &dest.to_string(), &denial.to_string());
            let text = format!("egress denied by policy: {denial}");
            let _ = reply(client, 403, "Forbidden", &text).await;
            return None;
        }
        Err(e @ ResolveError::Lookup(_)) => {
            proxy.metrics.count("failed", "lookup");
            info!(%computer, method, target = %dest, "egress proxy: name did not resolve");
            let _ = reply(client, 502, "Bad Gateway", &e.to_string()).await;
            return None;
        }
    };
    let mut last_error = None;
    for addr in &addrs {
        match tokio::time::timeout(proxy.settings.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                proxy.metrics.count("allowed", "");
                info!(%computer, method, target = %dest, %addr, "egress proxy: allowed");
                return Some(stream);
            }
            Ok(Err(e)) => last_error = Some(e.to_string()),
            Err(_) => last_error = Some("connection timed out".into()),
        }
    }
    proxy.metrics.count("failed", "connect");
    let why = last_error.unwrap_or_default();
    warn!(%computer, method, target = %dest, error = %why, "egress proxy: allowed but could not connect");
    let _ = reply(
        client,
        502,
        "Bad Gateway",
        &format!("cannot connect to {dest}: {why}"),
    )
    .await;
    None
}

/// Reads until the end of the request head. Returns the bytes read (head
/// and anything after it) and the head's length; `None` when the client
/// closed before sending anything. Errors: a head over `max` bytes.
async fn read_head(client: &mut TcpStream, max: usize) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return match buf.is_empty() {
                true => Ok(None),
                false => Err("the request head ended early".into()),
            };
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some((buf, from + end + 4)));
        }
        if buf.len() > max {
            return Err(format!("the request head is longer than {max} bytes"));
        }
    }
}

/// A short text answer from the proxy itself.
async fn reply(client: &mut TcpStream, code: u16, reason: &str, text: &str) -> std::io::Result<()> {
    let body = format!("{text}\n");
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}
