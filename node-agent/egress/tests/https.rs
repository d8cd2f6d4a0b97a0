//! HTTPS through the policy-checked client, against a TLS server on
//! 127.0.0.1 with a self-signed certificate (`tests/fixtures`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::http::{HttpError, Limits, Request, send};
use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS server answering `secure\n` to every request.
async fn tls_server() -> SocketAddr {
    let cert = CertificateDer::from(include_bytes!("fixtures/loopback-cert.der").to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        include_bytes!("fixtures/loopback-key.der").to_vec(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply =
                    b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nsecure\n";
                let _ = tls.write_all(reply).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

fn policy(cidr: &str) -> Policy {
    Policy::new(EgressConfig {
        mode: Mode::AllowList,
        cidrs: vec![CidrConfig::parse_flag(cidr).unwrap()],
        ..EgressConfig::default()
    })
    .unwrap()
}

fn get(url: &str, insecure: bool) -> Request {
    Request {
        method: http::Method::GET,
        url: url.parse().unwrap(),
        headers: vec![],
        body: Default::default(),
        insecure,
    }
}

fn limits() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(5),
        deadline: Instant::now() + Duration::from_secs(10),
        max_body_bytes: 1 << 20,
    }
}

#[tokio::test]
async fn certificates_are_verified_unless_insecure() {
    let addr = tls_server().await;
    let url = format!("https://{addr}/");
    let p = policy("127.0.0.1");

    let err = send(&p, &get(&url, false), limits()).await.err().unwrap();
    assert!(matches!(err, HttpError::Certificate(_)), "{err}");
    assert_eq!(err.curl_code(), 60);

    let resp = send(&p, &get(&url, true), limits()).await.unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.bytes().await.unwrap(), b"secure\n");
}

#[tokio::test]
async fn the_policy_applies_before_the_handshake() {
    let addr = tls_server().await;
    let url = format!("https://{addr}/");
    let err = send(&policy("127.0.0.2"), &get(&url, true), limits())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, HttpError::Denied(_)), "{err}");
}
