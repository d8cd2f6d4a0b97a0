//! Local mode's protections through a real `node-agent local` process: the
//! agent token on every call, a data directory private to the agent's user
//! (also after upgrading one that older versions left readable), and TLS.

mod common;
mod tls_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use common::{Agent, Bearer, create, sh};
use tonic::Code;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// Every directory and regular file under `data` with its mode.
fn modes(data: &Path) -> Vec<(String, u32)> {
    let mut out = vec![(".".to_string(), mode(data))];
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(data).unwrap().display().to_string();
            out.push((rel, meta.mode() & 0o7777));
            if meta.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn assert_private(data: &Path) {
    for (path, m) in modes(data) {
        let full = if path == "." {
            data.to_path_buf()
        } else {
            data.join(&path)
        };
        let want = if full.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(m, want, "{path} has mode {m:04o}");
    }
}

async fn list(c: &mut common::Client) -> Result<Vec<String>, tonic::Status> {
    Ok(c.list_computers(pb::ListComputersRequest {})
        .await?
        .into_inner()
        .computers
        .into_iter()
        .map(|c| c.name)
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_needs_the_agent_token() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let token = agent.token();
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));

    let mut good = agent.client().await;
    create(&mut good, "demo", 0).await;

    let mut none = agent.client_with(None).await;
    let err = list(&mut none).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message()
            .starts_with("this node agent needs its agent token:")
            && err.message().contains("AGENTCOMPUTER_TOKEN"),
        "{}",
        err.message()
    );
    // Calls on a computer are refused before the computer is looked at.
    let err = none
        .stat(pb::StatRequest {
            computer: "no-such".into(),
            path: "".into(),
            follow_symlinks: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    let mut wrong = agent.client_with(Some("0".repeat(64))).await;
    let err = list(&mut wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message().starts_with("wrong agent token"),
        "{}",
        err.message()
    );
    match wrong.exec(common::exec_req("demo", "echo hi > f")).await {
        Err(e) => assert_eq!(e.code(), Code::Unauthenticated),
        Ok(_) => panic!("exec without the right token ran"),
    }
    // One character short of the token.
    let mut short = agent.client_with(Some(token[..63].to_string())).await;
    assert_eq!(
        list(&mut short).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    // Nothing the refused clients asked for happened.
    let ran = sh(&mut good, "demo", "ls").await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, ""));
    assert_eq!(list(&mut good).await.unwrap(), ["demo"]);

    // The token is kept across restarts: the same client works again.
    drop(good);
    assert!(agent.stop().await.success());
    let agent = Agent::start(dir.path(), &[]);
    assert_eq!(agent.token(), token);
    let mut again = agent.client_with(Some(token)).await;
    assert_eq!(list(&mut again).await.unwrap(), ["demo"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_token_file_stops_the_agent_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "not a token\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["local", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("bad agent token file {}", file.display())),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "it announced an address");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a token\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_directory_is_private_whatever_the_umask() {
    let parent = tempfile::tempdir().unwrap();
    let data = parent.path().join("data");
    // umask 0: without explicit modes everything would be world-readable.
    let agent = Agent::start_with(&data, &[], |cmd| unsafe {
        cmd.pre_exec(|| {
            nix::sys::stat::umask(nix::sys::stat::Mode::empty());
            Ok(())
        });
    });
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let ran = sh(
        &mut c,
        "demo",
        "echo hello > a && mkdir -p d && echo x > d/b",
    )
    .await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // The database is open: its WAL and shared-memory files exist now.
    let names: Vec<String> = modes(&data).into_iter().map(|(p, _)| p).collect();
    for expected in [
        "token",
        "computers",
        "computers/demo",
        "computers/demo/fs.db",
        "computers/demo/fs.db-wal",
        "computers/demo/fs.db-shm",
        "computers/demo/computer.json",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert_private(&data);
    drop(c);
    assert!(agent.stop().await.success());
    assert_private(&data);
}

/// A data directory as versions before this one left it (0755 directories,
/// 0644 files) is made private at start, and its computers still work.
#[tokio::test(flavor = "multi_thread")]
async fn an_old_readable_data_directory_is_tightened_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    assert_eq!(sh(&mut c, "demo", "echo kept > f").await.code, 0);
    drop(c);
    assert!(agent.stop().await.success());
    std::fs::remove_file(dir.path().join("token")).unwrap();
    for (path, _) in modes(dir.path()) {
        let p = dir.path().join(path);
        let m = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    assert_eq!(mode(&dir.path().join("computers/demo/fs.db")), 0o644);

    let agent = Agent::start_with(dir.path(), &[], |cmd| {
        cmd.env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped());
    });
    assert_private(dir.path());
    let mut c = agent.client().await;
    let ran = sh(&mut c, "demo", "cat f").await;
    assert_eq!(ran.stdout, "kept\n");
    drop(c);
    // The changes were logged, path by path.
    let mut agent = agent;
    let stderr = agent.take_stderr();
    assert!(agent.stop().await.success());
    let log = std::io::read_to_string(stderr).unwrap();
    let db = dir.path().join("computers/demo/fs.db");
    assert!(
        log.lines().any(|l| l.contains("made private")
            && l.contains(&db.display().to_string())
            && l.contains("0644")
            && l.contains("0600")),
        "{log}"
    );
}

/// TLS with a certificate made for this test: a client trusting its CA
/// gets through (with the token), one without the CA fails the handshake.
#[tokio::test(flavor = "multi_thread")]
async fn serves_the_api_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ca = tls_support::test_ca("agentcomputer test CA");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let leaf = ca.issue(&["localhost"]);
    std::fs::write(&cert, &leaf.0).unwrap();
    std::fs::write(&key, &leaf.1).unwrap();
    let agent = Agent::start(
        &data,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let port = agent.url.rsplit(':').next().unwrap().to_string();
    let url = format!("https://localhost:{port}");

    let trusted = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem));
    let channel = Endpoint::from_shared(url.clone())
        .unwrap()
        .tls_config(trusted)
        .unwrap()
        .connect()
        .await
        .expect("TLS connect with the CA");
    let mut c = AgentComputerClient::with_interceptor(channel, Bearer(Some(agent.token())));
    c.create_computer(pb::CreateComputerRequest {
        name: "tls".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(list(&mut c).await.unwrap(), ["tls"]);

    // Another CA: the handshake fails, no call is made.
    let stranger = tls_support::test_ca("another CA");
    let untrusted = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&stranger.pem));
    let err = Endpoint::from_shared(url)
        .unwrap()
        .tls_config(untrusted)
        .unwrap()
        .connect()
        .await
        .expect_err("connected without trusting the certificate");
    let chain = error_chain(&err);
    assert!(chain.contains("UnknownIssuer"), "{chain}");

    // Plain HTTP/2 to the TLS port gets nowhere.
    let mut plain = agent.client().await;
    assert!(list(&mut plain).await.is_err());

    // Bad TLS files stop the agent at start with the file's name (on a
    // data directory of its own: `data` is held by the running agent).
    let other_data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["local", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(other_data.path())
        .args(["--tls-cert", key.to_str().unwrap(), "--tls-key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no certificate"), "{stderr}");
    assert!(stderr.contains(key.to_str().unwrap()), "{stderr}");
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cur = e.source();
    }
    text
}
