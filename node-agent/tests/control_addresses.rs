//! Control addresses through a real `node-agent local`: the agent's own
//! ports and the addresses declared with `--control-addresses` are refused
//! to a computer's curl and fetch whatever its allow-list names (loopback,
//! the node's address), unless `--allow-control-addresses` lists them;
//! ordinary servers the allow-list names stay reachable.

mod common;

use std::net::{IpAddr, SocketAddr, TcpListener};

use agentcomputer_proto::v1 as pb;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers every request with `hello`, on `listener`.
async fn serve(listener: TcpListener) -> SocketAddr {
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let reply =
                    "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nhello\n";
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// A free TCP port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An IPv4 address of this machine other than loopback, if it has one.
fn node_ipv4() -> Option<IpAddr> {
    nix::ifaddrs::getifaddrs()
        .unwrap()
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| IpAddr::V4(a.ip())))
        .find(|ip| !ip.is_loopback())
}

/// An allow-list of these CIDRs, every port.
fn allow(cidrs: &[String]) -> pb::Egress {
    pb::Egress {
        mode: pb::EgressMode::AllowList as i32,
        cidrs: cidrs
            .iter()
            .map(|c| pb::EgressCidr {
                cidr: c.clone(),
                ports: vec![],
            })
            .collect(),
        ..Default::default()
    }
}

async fn create_with(c: &mut Client, name: &str, egress: pb::Egress) {
    c.create_computer(pb::CreateComputerRequest {
        name: name.into(),
        egress: Some(egress),
        ..Default::default()
    })
    .await
    .expect("create");
}

const FETCH: &str = r#"export default async ({url}) => {
    try { const r = await fetch(url); return {status: r.status, text: await r.text()}; }
    catch (e) { return {error: e.message, code: e.code}; }
}"#;

/// curl and fetch of `url` from `computer` are refused, the message naming
/// the destination as a control address of `what`.
async fn refused(c: &mut Client, computer: &str, url: &str, what: &str) {
    let r = sh(c, computer, &format!("curl -sS --max-time 5 {url}")).await;
    assert_eq!(r.code, 7, "curl {url} was not refused: {r:?}");
    assert!(
        r.stderr.contains("egress denied by policy")
            && r.stderr.contains(&format!("is a control address ({what})")),
        "curl {url}: {r:?}"
    );
    let r = run(c, js_req(computer, FETCH, &format!(r#"{{"url":"{url}"}}"#))).await;
    assert!(
        r.result.contains(r#""code":"EGRESS_DENIED""#)
            && r.result.contains(&format!("is a control address ({what})")),
        "fetch {url}: {r:?}"
    );
}

/// curl and fetch of `url` from `computer` get the test server's answer.
async fn reached(c: &mut Client, computer: &str, url: &str) {
    let r = sh(c, computer, &format!("curl -sS --max-time 5 {url}")).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "hello\n"),
        "curl {url}: {r:?}"
    );
    let r = run(c, js_req(computer, FETCH, &format!(r#"{{"url":"{url}"}}"#))).await;
    assert_eq!(
        r.result, r#"{"status":200,"text":"hello\n"}"#,
        "fetch {url}: {r:?}"
    );
}

/// An allow-list naming all of loopback (and the node's address) reaches
/// an ordinary server there, but never the agent's own API, share-link and
/// egress-proxy ports, on loopback or on the node's address.
#[tokio::test]
async fn an_allow_list_naming_loopback_does_not_reach_the_agents_own_ports() {
    let server = serve(TcpListener::bind("127.0.0.1:0").unwrap()).await;
    let (share, proxy) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        dir.path(),
        &[
            "--share-listen",
            &format!("127.0.0.1:{share}"),
            "--proxy-listen",
            &format!("127.0.0.1:{proxy}"),
        ],
    );
    let mut c = agent.client().await;
    let mut cidrs = vec!["127.0.0.0/8".to_string()];
    let node = node_ipv4();
    cidrs.extend(node.map(|ip| format!("{ip}/32")));
    create_with(&mut c, "wide", allow(&cidrs)).await;

    reached(&mut c, "wide", &format!("http://{server}/")).await;
    let api = agent.url.trim_start_matches("http://");
    let api_port: u16 = api.rsplit(':').next().unwrap().parse().unwrap();
    for port in [api_port, share, proxy] {
        refused(
            &mut c,
            "wide",
            &format!("http://127.0.0.1:{port}/"),
            "the node agent",
        )
        .await;
        refused(
            &mut c,
            "wide",
            &format!("http://127.9.9.9:{port}/"),
            "the node agent",
        )
        .await;
        if let Some(ip) = node {
            refused(
                &mut c,
                "wide",
                &format!("http://{ip}:{port}/"),
                "the node agent",
            )
            .await;
        }
    }
}

/// A stand-in kubelet on every address of the machine, declared with
/// `--control-addresses node:PORT`, is refused on loopback and on the
/// node's address although the allow-list names both; listed in
/// `--allow-control-addresses` for loopback, it is reached there (and
/// only there), the allow-list still deciding.
#[tokio::test]
async fn a_declared_control_address_is_refused_whatever_the_allow_list() {
    let kubelet = serve(TcpListener::bind("0.0.0.0:0").unwrap()).await;
    let port = kubelet.port();
    let declared = format!("node:{port}");
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--control-addresses", &declared]);
    let mut c = agent.client().await;
    let mut cidrs = vec!["127.0.0.0/8".to_string()];
    let node = node_ipv4();
    cidrs.extend(node.map(|ip| format!("{ip}/32")));
    create_with(&mut c, "wide", allow(&cidrs)).await;
    create_with(&mut c, "other", allow(&["10.0.0.0/8".to_string()])).await;

    let on_loopback = format!("http://127.0.0.1:{port}/");
    refused(
        &mut c,
        "wide",
        &on_loopback,
        "declared by --control-addresses",
    )
    .await;
    if let Some(ip) = node {
        let on_node = format!("http://{ip}:{port}/");
        refused(&mut c, "wide", &on_node, "declared by --control-addresses").await;
    }
    agent.stop().await;

    // Allowed back on loopback: the allow-list decides there again.
    let agent = Agent::start(
        dir.path(),
        &[
            "--control-addresses",
            &declared,
            "--allow-control-addresses",
            &format!("127.0.0.1:{port}"),
        ],
    );
    let mut c = agent.client().await;
    reached(&mut c, "wide", &on_loopback).await;
    let r = sh(&mut c, "other", &format!("curl -sS {on_loopback}")).await;
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("is a loopback address"), "{r:?}");
    if let Some(ip) = node {
        let on_node = format!("http://{ip}:{port}/");
        refused(&mut c, "wide", &on_node, "declared by --control-addresses").await;
    }
}

/// A malformed control address stops the agent at start with a message
/// naming it.
#[test]
fn a_malformed_control_address_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["local", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--control-addresses", "10.0.0.0/33:443"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("10.0.0.0/33:443") && stderr.contains("CIDR"),
        "{stderr}"
    );
}
