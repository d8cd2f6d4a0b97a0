//! `node-agent local` next to whatever else holds the default ports of its
//! optional listeners: 7434 (share links) and 3128 (the egress proxy,
//! Squid's default). Taken defaults give way to free ports, named in a
//! warning and used by share links; a taken port given explicitly stays an
//! error.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::Stdio;

use common::{Agent, create, write};

/// Holds `port` on loopback for the test, unless something else already
/// does (then it is taken either way).
fn occupy(port: u16) -> Option<TcpListener> {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => Some(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        Err(e) => panic!("bind 127.0.0.1:{port}: {e}"),
    }
}

/// The value of `key=` in the first line of `lines` that contains `marker`.
fn field(lines: &[String], marker: &str, key: &str) -> Option<String> {
    let line = lines.iter().find(|l| l.contains(marker))?;
    let start = line.find(&format!("{key}="))? + key.len() + 1;
    Some(line[start..].split_whitespace().next()?.to_string())
}

#[tokio::test]
async fn taken_default_ports_give_way_to_free_ones_that_are_reported_and_used() {
    let _share = occupy(7434);
    let _proxy = occupy(3128);
    let data = tempfile::tempdir().unwrap();
    let mut agent = Agent::start_with_default_ports(data.path(), &[], |cmd| {
        cmd.env("RUST_LOG", "info").stderr(Stdio::piped());
    });
    assert!(agent.alive(), "the agent started");
    // Read the log until both listeners are announced.
    let mut stderr = BufReader::new(agent.take_stderr());
    let mut lines = Vec::new();
    while field(&lines, "share links serving", "base_url").is_none()
        || field(&lines, "egress proxy serving", "addr").is_none()
    {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the log ended before both listeners were announced: {lines:#?}"
        );
        lines.push(line);
    }
    let share_addr = field(&lines, "share links serving", "addr").unwrap();
    let base_url = field(&lines, "share links serving", "base_url").unwrap();
    let proxy_addr = field(&lines, "egress proxy serving", "addr").unwrap();
    assert_ne!(share_addr, "127.0.0.1:7434");
    assert_ne!(proxy_addr, "127.0.0.1:3128");
    assert_eq!(base_url, format!("http://{share_addr}/"));
    let warned = |port: &str, addr: &str, flag: &str| {
        lines.iter().any(|l| {
            l.contains("WARN")
                && l.contains(&format!("port {port} is taken"))
                && l.contains(addr)
                && l.contains(flag)
        })
    };
    assert!(warned("7434", &share_addr, "--share-listen"), "{lines:#?}");
    assert!(warned("3128", &proxy_addr, "--proxy-listen"), "{lines:#?}");
    // Both listeners answer where they said they are.
    std::net::TcpStream::connect(&proxy_addr).expect("the proxy's port accepts");
    // Share links point at the port the server actually holds.
    let mut c = agent.client().await;
    create(&mut c, "ports", 1 << 20).await;
    write(
        &mut c,
        "ports",
        "f.txt",
        agentcomputer_proto::v1::WriteMode::Truncate,
        b"shared\n",
    )
    .await
    .unwrap();
    let url = c
        .share(agentcomputer_proto::v1::ShareRequest {
            computer: "ports".into(),
            path: "f.txt".into(),
            expires_in_seconds: 60,
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    assert!(url.starts_with(&base_url), "{url} is under {base_url}");
    let got = std::process::Command::new("curl")
        .args(["-sf", &url])
        .output()
        .expect("run curl");
    assert_eq!(got.stdout, b"shared\n", "{got:?}");
    agent.stop().await;
}

#[tokio::test]
async fn a_taken_port_given_explicitly_is_an_error_naming_it() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    for flag in ["--share-listen", "--proxy-listen"] {
        let data = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_node-agent"))
            .args(["local", "--listen", "127.0.0.1:0", flag, &addr])
            .arg("--data-dir")
            .arg(data.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "{flag} {addr}: started anyway");
        assert!(
            err.contains(&format!("cannot listen on {addr}")) && err.contains(flag),
            "{flag}: {err}"
        );
    }
}

/// With `--share-url`, something in front forwards to the default share
/// address: a taken 7434 stops the agent rather than moving the links'
/// server to another port.
#[tokio::test]
async fn a_taken_default_share_port_is_an_error_when_a_share_url_points_at_it() {
    let _held = occupy(7434);
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["local", "--listen", "127.0.0.1:0", "--proxy-listen", "off"])
        .args(["--share-url", "https://files.example.invalid/"])
        .arg("--data-dir")
        .arg(data.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "started anyway: {err}");
    assert!(
        err.contains("cannot listen on 127.0.0.1:7434") && err.contains("--share-listen"),
        "{err}"
    );
}
