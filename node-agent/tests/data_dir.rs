//! One node agent per data directory: a second `node-agent` (local or
//! cluster mode) on a data directory a live agent holds refuses to start,
//! naming the holder's pid, and leaves the holder's computers and mount
//! record alone; a killed agent's lock does not block the next start.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// A kubeconfig naming an API server on a loopback port nothing serves.
const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: none
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: none
  context:
    cluster: none
    user: none
current-context: none
users:
- name: none
  user:
    token: none
";

/// Runs `node-agent ARGS` to its end (it must end: it is refused), with a
/// bound on the wait; returns (success, stderr).
fn run_refused(args: &[&str], data: &std::path::Path) -> (bool, String) {
    run_refused_with(args, data, |_| {})
}

/// [`run_refused`], letting `setup` change the command first.
fn run_refused_with(
    args: &[&str],
    data: &std::path::Path,
    setup: impl FnOnce(&mut Command),
) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_node-agent"));
    setup(&mut cmd);
    let mut child = cmd
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "warn")
        .env_remove("AGENTCOMPUTER_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node-agent");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the second node agent did not exit: it started on a held data directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_second_agent_on_one_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let r = sh(&mut c, "demo", "echo kept > f").await;
    assert_eq!(r.code, 0, "{r:?}");
    let record = dir.path().join("mounts.json");
    std::fs::write(&record, "[]\n").unwrap();
    let scratch_before: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    let pid = agent.pid().to_string();
    let (ok, err) = run_refused(
        &["local", "--listen", "127.0.0.1:0", "--proxy-listen", "off"],
        dir.path(),
    );
    assert!(!ok, "local mode started on a held data directory: {err}");
    assert!(
        err.contains(&format!("pid {pid}")) && err.contains("in use by another node agent"),
        "{err}"
    );
    // Cluster mode, once it has a Kubernetes client (a kubeconfig whose
    // server nothing serves: making the client needs no connection).
    let kubeconfig = dir.path().join("kubeconfig-for-test");
    std::fs::write(&kubeconfig, KUBECONFIG).unwrap();
    let (ok, err) = run_refused_with(
        &[
            "cluster",
            "--node-name",
            "n1",
            "--namespace",
            "agentcomputer",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
        dir.path(),
        |cmd| {
            cmd.env("KUBECONFIG", &kubeconfig)
                .env_remove("KUBERNETES_SERVICE_HOST");
        },
    );
    std::fs::remove_file(&kubeconfig).unwrap();
    assert!(!ok, "cluster mode started on a held data directory: {err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");

    // The refused agents touched nothing: the first still serves its
    // computer, and its files and mount record are as they were.
    let after: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(scratch_before, after);
    assert_eq!(std::fs::read_to_string(&record).unwrap(), "[]\n");
    let r = sh(&mut c, "demo", "cat f").await;
    assert_eq!((r.stdout.as_str(), r.code), ("kept\n", 0), "{r:?}");
    drop(c);

    // SIGKILL leaves the lock file with a dead pid: the next start takes it.
    drop(agent);
    let agent = Agent::start(dir.path(), &[]);
    let text = std::fs::read_to_string(dir.path().join("agent.lock")).unwrap();
    assert_eq!(text.trim(), agent.pid().to_string());
    let mut c = agent.client().await;
    let r = sh(&mut c, "demo", "cat f").await;
    assert_eq!((r.stdout.as_str(), r.code), ("kept\n", 0), "{r:?}");
}
