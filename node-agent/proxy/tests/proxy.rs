//! The proxy over real sockets: an upstream HTTP server on loopback, a
//! policy that allows it through a loopback CIDR rule, and clients that
//! speak CONNECT and absolute-form HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use agentcomputer_proxy::{Caller, Credentials, Denials, Fixed, Metrics, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Answers `hello <request line>`; counts connections.
async fn upstream() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got).into_owned();
                let line = text.lines().next().unwrap_or("").to_string();
                let proxy_auth_leaked = text.to_ascii_lowercase().contains("proxy-authorization");
                let hosts: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
                    .map(|(_, v)| v.trim())
                    .collect();
                let body = format!(
                    "hello {line} leaked={proxy_auth_leaked} host={}\n",
                    hosts.join(",")
                );
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, count)
}

fn policy(port: u16) -> Arc<Policy> {
    Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag(&format!("127.0.0.1:{port}")).unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    )
}

async fn start(proxy: Proxy) -> (u16, CancellationToken) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(proxy.serve(l, stop.clone()));
    (port, stop)
}

async fn exchange(proxy_port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn the_policy_decides_every_request_and_each_decision_is_counted() {
    let (up, connections) = upstream().await;
    let metrics = Metrics::new();
    let registry = prometheus::Registry::new();
    metrics.register(&registry).unwrap();
    let caller = Caller {
        computer: "demo".into(),
        key: "demo".into(),
        policy: policy(up),
    };
    let denials = Denials::new();
    let (port, stop) =
        start(Proxy::new(Arc::new(Fixed(caller)), metrics.clone()).with_denials(denials.clone()))
            .await;
    let started = std::time::Instant::now();

    // Plain HTTP: forwarded in origin form, hop headers dropped.
    let got = exchange(
        port,
        &format!("GET http://127.0.0.1:{up}/a?b=1 HTTP/1.1\r\nhost: 127.0.0.1:{up}\r\nproxy-authorization: Basic eDp5\r\n\r\n"),
    )
    .await;
    assert!(
        got.contains("hello GET /a?b=1 HTTP/1.1 leaked=false"),
        "{got}"
    );
    // The Host upstream is the URL's, whatever the client sent (RFC 9112
    // §3.2.2): a client cannot reach another virtual host on an allowed
    // address.
    let got = exchange(
        port,
        &format!("GET http://127.0.0.1:{up}/ HTTP/1.1\r\nHost: forbidden.example\r\n\r\n"),
    )
    .await;
    assert!(got.contains(&format!("host=127.0.0.1:{up}\n")), "{got}");

    // CONNECT: a tunnel, then anything over it.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    s.write_all(b"GET /tunnel HTTP/1.1\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.contains("hello GET /tunnel"), "{out}");
    assert_eq!(connections.load(Ordering::SeqCst), 3);

    // Refusals: another port, metadata, IP-literal spellings of loopback
    // ports not listed, and a name that resolves to loopback.
    for (request, reason) in [
        (
            format!(
                "CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n",
                up.wrapping_add(1).max(1)
            ),
            "not-listed",
        ),
        (
            "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n".to_string(),
            "metadata",
        ),
        (
            "GET http://2130706433:1/ HTTP/1.1\r\n\r\n".to_string(),
            "not-listed",
        ),
        (
            "GET http://0x7f.1:1/ HTTP/1.1\r\n\r\n".to_string(),
            "not-listed",
        ),
        (
            "CONNECT [::ffff:127.0.0.1]:1 HTTP/1.1\r\n\r\n".to_string(),
            "not-listed",
        ),
        (
            "CONNECT localhost:1 HTTP/1.1\r\n\r\n".to_string(),
            "not-listed",
        ),
    ] {
        let before = metrics.get("denied", reason);
        let got = exchange(port, &request).await;
        assert!(
            got.starts_with("HTTP/1.1 403 Forbidden"),
            "{request}: {got}"
        );
        assert!(got.contains("egress denied by policy"), "{request}: {got}");
        assert_eq!(metrics.get("denied", reason), before + 1, "{request}");
    }
    // Each refusal is kept for the exec that made it, under the caller's
    // key, with the engine's reason.
    let kept = denials.since("demo", started);
    assert_eq!(kept.len(), 6, "{kept:?}");
    assert!(
        kept[1].starts_with("egress denied CONNECT 169.254.169.254:80: "),
        "{kept:?}"
    );
    assert!(kept.iter().all(|l| l.contains(": ")), "{kept:?}");
    // Origin-form requests are not proxied: the proxy is no web server.
    let got = exchange(port, "GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert_eq!(connections.load(Ordering::SeqCst), 3);
    assert_eq!(metrics.get("allowed", ""), 3);
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains(
            r#"agentcomputer_egress_proxy_decisions_total{decision="allowed",reason=""} 3"#
        ),
        "{text}"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_credential_listener_serves_only_issued_credentials() {
    let (up, connections) = upstream().await;
    let creds = Credentials::new();
    let metrics = Metrics::new();
    let (port, stop) = start(Proxy::new(Arc::new(creds.clone()), metrics.clone())).await;
    let request = |auth: &str| format!("GET http://127.0.0.1:{up}/ HTTP/1.1\r\n{auth}\r\n");
    let got = exchange(port, &request("")).await;
    assert!(got.starts_with("HTTP/1.1 407"), "{got}");
    assert!(got.contains("Proxy-Authenticate: Basic"), "{got}");
    let token = "0123456789abcdef".repeat(4);
    let guard = creds.issue(
        token.clone(),
        Caller {
            computer: "demo".into(),
            key: "demo".into(),
            policy: policy(up),
        },
    );
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("computer:{token}"));
    let got = exchange(
        port,
        &request(&format!("proxy-authorization: Basic {basic}\r\n")),
    )
    .await;
    assert!(got.contains("hello GET / HTTP/1.1 leaked=false"), "{got}");
    drop(guard);
    let got = exchange(
        port,
        &request(&format!("proxy-authorization: Basic {basic}\r\n")),
    )
    .await;
    assert!(
        got.starts_with("HTTP/1.1 407"),
        "revoked credential accepted: {got}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    assert_eq!(metrics.get("denied", "unauthenticated"), 2);
    stop.cancel();
}

/// Whether the proxy closed `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: std::time::Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn connections_past_the_computers_limit_are_closed_at_once() {
    let (up, _) = upstream().await;
    let metrics = Metrics::new();
    let limits = agentcomputer_proxy::ConnectionLimits::new(100, 3);
    let caller = Caller {
        computer: "demo".into(),
        key: "demo".into(),
        policy: policy(up),
    };
    let proxy =
        Proxy::new(Arc::new(Fixed(caller)), metrics.clone()).with_limits(limits.clone(), "demo");
    let (port, stop) = start(proxy).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    let mut extra = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert!(
        closed_within(&mut extra, std::time::Duration::from_secs(5)).await,
        "a fourth connection of the computer was kept"
    );
    assert_eq!(metrics.get("denied", "too-many-connections"), 1);
    assert_eq!(limits.open("demo"), 3);
    // A place freed is a place again.
    drop(held.pop());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let got = exchange(
        port,
        &format!("GET http://127.0.0.1:{up}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(got.contains("hello GET / HTTP/1.1"), "{got}");
    stop.cancel();
}

#[tokio::test]
async fn idle_tunnels_and_silent_clients_are_closed() {
    // A server that accepts and never says anything.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            kept.push(s);
        }
    });
    let caller = Caller {
        computer: "demo".into(),
        key: "demo".into(),
        policy: policy(silent_port),
    };
    let settings = agentcomputer_proxy::Settings {
        idle_timeout: std::time::Duration::from_millis(300),
        head_timeout: std::time::Duration::from_millis(300),
        ..Default::default()
    };
    let proxy = Proxy::new(Arc::new(Fixed(caller)), Metrics::new()).with_settings(settings);
    let (port, stop) = start(proxy).await;
    let mut tunnel = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tunnel
        .write_all(format!("CONNECT 127.0.0.1:{silent_port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    tunnel.read_exact(&mut head).await.unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    assert!(
        closed_within(&mut tunnel, std::time::Duration::from_secs(5)).await,
        "an idle tunnel was kept"
    );
    let mut silent_client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert!(
        closed_within(&mut silent_client, std::time::Duration::from_secs(5)).await,
        "a client that sent no request head was kept"
    );
    stop.cancel();
}
