//! One shared proxy listener, many computers: what one computer (or one
//! source address) holds is bounded, and another computer's requests are
//! still served. Real sockets on loopback: an upstream that keeps its
//! connections open, clients from several loopback source addresses.

use std::sync::Arc;
use std::time::Duration;

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use agentcomputer_proxy::{Caller, ConnectionLimits, CredentialGuard, Credentials, Metrics, Proxy};
use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

/// An upstream that echoes what it is sent and keeps every connection.
async fn echo_upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn issue(creds: &Credentials, computer: &str, up: u16) -> (String, CredentialGuard) {
    let token = format!("{computer}-{}", "t".repeat(40));
    let policy = Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag(&format!("127.0.0.1:{up}")).unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    );
    let guard = creds.issue(
        token.clone(),
        Caller {
            computer: computer.into(),
            key: computer.into(),
            policy,
        },
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("computer:{token}"));
    (format!("Basic {basic}"), guard)
}

async fn connect_from(from: &str, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// Opens a CONNECT tunnel to the upstream from `from`; the status line,
/// and the stream when the tunnel is up.
async fn tunnel(
    from: &str,
    port: u16,
    up: u16,
    auth: &str,
) -> (String, Option<BufReader<TcpStream>>) {
    let mut s = connect_from(from, port).await;
    let head = format!(
        "CONNECT 127.0.0.1:{up} HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nProxy-Authorization: {auth}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut status))
        .await
        .expect("no answer from the proxy")
        .unwrap();
    if !status.contains(" 200") {
        return (status.trim().to_string(), None);
    }
    let mut blank = String::new();
    r.read_line(&mut blank).await.unwrap();
    (status.trim().to_string(), Some(r))
}

/// Whether a tunnel still carries bytes both ways.
async fn echoes(r: &mut BufReader<TcpStream>) -> bool {
    if r.get_mut().write_all(b"ping\n").await.is_err() {
        return false;
    }
    let mut line = String::new();
    matches!(
        tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line)).await,
        Ok(Ok(5))
    ) && line == "ping\n"
}

#[tokio::test]
async fn one_computer_holds_at_most_its_share_of_a_shared_listener() {
    let up = echo_upstream().await;
    let creds = Credentials::new();
    let (a, _ga) = issue(&creds, "a", up);
    let (b, _gb) = issue(&creds, "b", up);
    let metrics = Metrics::new();
    let computers = ConnectionLimits::new(usize::MAX, 3);
    let proxy = Proxy::new(Arc::new(creds.clone()), metrics.clone())
        .with_computer_limits(computers.clone());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(proxy.serve(l, stop.clone()));

    // Computer a, from two addresses: three tunnels, then 429.
    let mut held = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.2"] {
        let (status, stream) = tunnel(from, port, up, &a).await;
        held.push(stream.unwrap_or_else(|| panic!("tunnel of a: {status}")));
    }
    let (status, _) = tunnel("127.0.0.3", port, up, &a).await;
    assert!(status.contains(" 429"), "a fourth tunnel of a: {status}");
    assert_eq!(metrics.get("denied", "too-many-connections"), 1);
    assert_eq!(computers.open("a"), 3);
    // Computer b, from an address a used too, is served.
    let (status, stream) = tunnel("127.0.0.2", port, up, &b).await;
    let mut tb = stream.unwrap_or_else(|| panic!("b refused while a is at its limit: {status}"));
    assert!(echoes(&mut tb).await);
    for t in &mut held {
        assert!(echoes(t).await, "a tunnel of a was broken");
    }
    // A tunnel of a that ends gives a its place back.
    drop(held.pop());
    let mut again = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let (_, Some(s)) = tunnel("127.0.0.3", port, up, &a).await {
            again = Some(s);
            break;
        }
    }
    assert!(echoes(&mut again.expect("a's freed place was not given back")).await);
    stop.cancel();
}

#[tokio::test]
async fn one_source_address_holds_at_most_its_share_of_connections() {
    let up = echo_upstream().await;
    let creds = Credentials::new();
    let (b, _gb) = issue(&creds, "b", up);
    let metrics = Metrics::new();
    let proxy = Proxy::new(Arc::new(creds.clone()), metrics.clone())
        .with_source_limits(ConnectionLimits::new(usize::MAX, 8));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(proxy.serve(l, stop.clone()));

    // 40 idle connections from one address: 8 are kept (until the head
    // timeout), the rest closed at once.
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(connect_from("127.0.0.2", port).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut open = 0;
    for s in &mut flood {
        let mut b = [0u8; 1];
        let closed = matches!(
            tokio::time::timeout(Duration::from_millis(50), s.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        );
        if !closed {
            open += 1;
        }
    }
    assert_eq!(open, 8, "idle connections one address holds");
    assert_eq!(metrics.get("denied", "too-many-connections"), 32);
    // Another address is served meanwhile.
    let (status, stream) = tunnel("127.0.0.3", port, up, &b).await;
    assert!(
        echoes(&mut stream.unwrap_or_else(|| panic!("another address refused: {status}"))).await
    );
    stop.cancel();
}
