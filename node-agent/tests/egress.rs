//! A computer's egress policy end to end: set at CreateComputer, stored in
//! computer.json, applied to the shell's curl and JavaScript's fetch of a
//! real `node-agent local` process, against an HTTP server on 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentcomputer_proto::v1 as pb;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

/// Answers every request with `hello from <path>`; counts connections.
async fn serve() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("?").to_string();
                let body = format!("hello from {path}\n");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    (addr, count)
}

fn allow_loopback() -> pb::Egress {
    pb::Egress {
        mode: pb::EgressMode::AllowList as i32,
        cidrs: vec![pb::EgressCidr {
            cidr: "127.0.0.1/32".into(),
            ports: vec![],
        }],
        ..Default::default()
    }
}

async fn create_with(c: &mut Client, name: &str, egress: Option<pb::Egress>) -> pb::Computer {
    c.create_computer(pb::CreateComputerRequest {
        name: name.into(),
        egress,
        ..Default::default()
    })
    .await
    .expect("create")
    .into_inner()
}

const FETCH: &str = r#"export default async ({url}) => {
    try { const r = await fetch(url); return {status: r.status, text: await r.text()}; }
    catch (e) { return {error: e.message, code: e.code}; }
}"#;

#[tokio::test]
async fn the_policy_set_at_create_governs_curl_and_fetch() {
    let (addr, connections) = serve().await;
    let url = format!("http://{addr}/x");
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;

    let open = create_with(&mut c, "open", Some(allow_loopback())).await;
    assert_eq!(open.egress, Some(allow_loopback()));
    let sealed = create_with(&mut c, "sealed", None).await;
    assert_eq!(
        sealed.egress.map(|e| e.mode),
        Some(pb::EgressMode::DenyAll as i32)
    );

    let r = sh(&mut c, "open", &format!("curl -sS {url}")).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello from /x\n"), "{r:?}");
    let r = sh(&mut c, "sealed", &format!("curl -sS {url}")).await;
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("egress denied by policy"), "{r:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 1);

    let input = format!(r#"{{"url":"{url}"}}"#);
    let r = run(&mut c, js_req("open", FETCH, &input)).await;
    assert_eq!(
        r.result, r#"{"status":200,"text":"hello from /x\n"}"#,
        "{r:?}"
    );
    let r = run(&mut c, js_req("sealed", FETCH, &input)).await;
    assert!(r.result.contains(r#""code":"EGRESS_DENIED""#), "{r:?}");
    assert!(r.result.contains("egress denied by policy"), "{r:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 2);

    // Stored in computer.json: it survives a restart.
    agent.stop().await;
    let settings =
        std::fs::read_to_string(dir.path().join("computers/open/computer.json")).unwrap();
    assert!(settings.contains(r#""mode": "allow-list""#), "{settings}");
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    let r = sh(&mut c, "open", &format!("curl -s {url}")).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello from /x\n"), "{r:?}");
    let got = c
        .get_computer(pb::GetComputerRequest {
            name: "open".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.egress, Some(allow_loopback()));
}

#[tokio::test]
async fn invalid_policies_are_refused_at_create() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    let bad = [
        pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            hosts: vec!["pypi.org".into()],
            ..Default::default()
        },
        pb::Egress {
            mode: pb::EgressMode::AllowList as i32,
            cidrs: vec![pb::EgressCidr {
                cidr: "10.0.0.0/40".into(),
                ports: vec![],
            }],
            ..Default::default()
        },
        pb::Egress {
            mode: pb::EgressMode::AllowList as i32,
            hosts: vec!["Not A Host".into()],
            ..Default::default()
        },
    ];
    for egress in bad {
        let err = c
            .create_computer(pb::CreateComputerRequest {
                name: "x".into(),
                egress: Some(egress.clone()),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{egress:?}");
    }
    // Nothing was made.
    let list = c
        .list_computers(pb::ListComputersRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.computers.is_empty());
}
