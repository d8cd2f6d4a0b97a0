//! The real `kubectl-computer` binary taking snapshots, restoring and
//! copying computers of a node agent served in-process whose continuous
//! backup goes to a `file://` log under its data directory.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agentcomputer_node_agent::backup::{BackupTarget, BackupUrl};

mod common;
use agentcomputer_node_agent::{LocalConfig, serve};

/// An in-process agent backing up to `<data>/log`; stopped on drop.
struct Agent {
    url: String,
    data: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Agent {
    fn start(data: &Path) -> Agent {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        agentcomputer_node_agent::local::prepare(data).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = LocalConfig {
            data_dir: data.to_path_buf(),
            idle_timeout: Duration::from_secs(300),
            tls: None,
            proxy_listen: None,
            streams: Default::default(),
            admission: agentcomputer_node_agent::admission::AdmissionConfig::for_node(),
            fuse_holder: None,
            share: Some(
                agentcomputer_node_agent::local::LocalShare::bind("127.0.0.1:0".parse().unwrap())
                    .unwrap(),
            ),
            backup: Some(std::sync::Arc::new(
                BackupTarget::open(&BackupUrl::Dir(data.join("log"))).unwrap(),
            )),
        };
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                serve(listener, config, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Agent {
            url: format!("http://{addr}"),
            data: data.to_path_buf(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
            .env("AGENTCOMPUTER_ENDPOINT", &self.url)
            .env("AGENTCOMPUTER_DATA_DIR", &self.data)
            .env_remove("AGENTCOMPUTER_TOKEN")
            .env_remove("AGENTCOMPUTER_TOKEN_FILE")
            .env_remove("AGENTCOMPUTER_CA_CERT")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Asserts exit status 1 and returns stderr.
fn fails(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// Paths, modes and contents of a computer's files, as the CLI shows them.
fn state(agent: &Agent, name: &str) -> Vec<String> {
    let listing = ok(agent.cli(&["exec", name, "--", "find . | sort"]));
    let mut out = Vec::new();
    for path in listing.lines().filter(|p| *p != ".") {
        let path = path.trim_start_matches("./");
        let stat = ok(agent.cli(&["stat", name, path]));
        let mode = stat
            .lines()
            .find(|l| l.starts_with("Access: ("))
            .unwrap_or_default()
            .to_string();
        let body = if stat.contains("regular") {
            text(&agent.cli(&["cat", name, path]).stdout)
        } else {
            String::new()
        };
        out.push(format!("{path} {mode} {body:?}"));
    }
    out
}

#[test]
fn snapshot_rm_restore_and_copies_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path());
    ok(agent.cli(&["create", "demo", "--quota", "64Mi"]));
    ok(agent.cli(&[
        "exec",
        "demo",
        "--",
        "mkdir -p src/lib && echo 'fn main() {}' > src/main.rs && printf 'data %s\\n' 1 2 3 > src/lib/data.txt && printf '#!/bin/sh\\n' > run.sh && chmod 751 run.sh && chmod 700 src/lib",
    ]));
    let before = state(&agent, "demo");
    assert_eq!(before.len(), 5, "{before:?}");
    assert!(
        before.iter().any(|l| l.starts_with("run.sh Access: (0751")),
        "{before:?}"
    );

    let took = ok(agent.cli(&["snapshot", "demo", "s1"]));
    assert!(took.starts_with("snapshot s1 of demo taken in "), "{took}");
    ok(agent.cli(&["exec", "demo", "--", "rm -rf ./*"]));
    assert_eq!(ok(agent.cli(&["exec", "demo", "--", "ls -A"])), "");

    let restored = ok(agent.cli(&["restore", "demo", "--to", "s1"]));
    assert!(
        restored.contains("demo restored to snapshot s1"),
        "{restored}"
    );
    assert!(
        restored.contains("undo with: restore demo --to before-restore-"),
        "{restored}"
    );
    assert_eq!(state(&agent, "demo"), before);

    let listed = ok(agent.cli(&["snapshots", "demo"]));
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("OWN"),
        "{listed}"
    );
    assert!(lines[1].starts_with("s1 "), "{listed}");
    assert!(lines[2].starts_with("before-restore-"), "{listed}");
    assert!(lines[3].starts_with("2 of 64 snapshots"), "{listed}");

    // Copies: from the snapshot, a fork, and a file made by `backup`.
    ok(agent.cli(&["exec", "demo", "--", "echo later > later.txt"]));
    let made = ok(agent.cli(&["create", "copy", "--from", "snapshot/s1"]));
    assert!(
        made.contains("computer copy created (quota 64 MiB"),
        "{made}"
    );
    assert_eq!(state(&agent, "copy"), before);
    ok(agent.cli(&["fork", "demo", "forked"]));
    assert_eq!(
        text(&agent.cli(&["cat", "forked", "later.txt"]).stdout),
        "later\n"
    );
    let file = dir.path().join("demo.db");
    ok(agent.cli(&["backup", "demo", file.to_str().unwrap()]));
    let from_file = format!("file:{}", file.display());
    ok(agent.cli(&["create", "imported", "--from", &from_file]));
    assert_eq!(
        text(&agent.cli(&["cat", "imported", "later.txt"]).stdout),
        "later\n"
    );
    // Each changes on its own.
    ok(agent.cli(&["exec", "copy", "--", "echo mine > src/main.rs"]));
    assert_eq!(
        text(&agent.cli(&["cat", "demo", "src/main.rs"]).stdout),
        "fn main() {}\n"
    );

    // Clear errors.
    let err = fails(agent.cli(&["restore", "demo", "--to", "nope"]));
    assert!(
        err.starts_with("error: snapshot \"nope\" not found"),
        "{err}"
    );
    let err = fails(agent.cli(&["snapshot", "missing"]));
    assert!(err.contains("computer \"missing\" not found"), "{err}");
    let err = fails(agent.cli(&["create", "copy", "--from", "snapshot/s1"]));
    assert!(err.contains("computer \"copy\" already exists"), "{err}");
    let err = fails(agent.cli(&["create", "x", "--from", "s1"]));
    assert!(
        err.contains("give snapshot/NAME, computer/NAME or file:PATH"),
        "{err}"
    );
    let err = fails(agent.cli(&["create", "x", "--from", "file:/nonexistent/demo.db"]));
    assert!(err.contains("/nonexistent/demo.db"), "{err}");
    let err = fails(agent.cli(&["snapshot", "demo", "s1"]));
    assert!(err.contains("snapshot \"s1\" already exists"), "{err}");

    // A point in time: the state before `later.txt` was written.
    let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    std::thread::sleep(Duration::from_millis(50));
    ok(agent.cli(&["exec", "demo", "--", "echo even-later > even-later.txt"]));
    let restored = ok(agent.cli(&["restore", "demo", "--time", &at]));
    assert!(
        restored.contains("demo restored to backup position "),
        "{restored}"
    );
    assert_eq!(
        ok(agent.cli(&["exec", "demo", "--", "ls"])),
        "later.txt\nrun.sh\nsrc\n"
    );
    // Before the retention window (7 days by default): refused, naming it.
    let err = fails(agent.cli(&["restore", "demo", "--time", "2001-01-01T00:00:00Z"]));
    assert!(
        err.contains("to 2001-01-01T00:00:00.000Z: that is outside its retention window of 7days"),
        "{err}"
    );
    // Within it but before the computer's log began: no position then.
    let err = fails(agent.cli(&["restore", "demo", "--time", "2h"]));
    assert!(
        err.contains("has no backup position at or before "),
        "{err}"
    );
    let bad = agent.cli(&["restore", "demo", "--time", "yesterday-ish"]);
    assert_eq!(bad.status.code(), Some(2), "a bad command line");
    assert!(
        text(&bad.stderr).contains("neither an RFC 3339 time"),
        "{}",
        text(&bad.stderr)
    );

    let deleted = ok(agent.cli(&["delete-snapshot", "demo", "s1"]));
    assert!(
        deleted.starts_with("snapshot s1 of demo deleted"),
        "{deleted}"
    );
    let err = fails(agent.cli(&["delete-snapshot", "demo", "s1"]));
    assert!(err.contains("snapshot \"s1\" not found"), "{err}");
}

/// The MCP server's `snapshot` and `restore` tools, driven by the official
/// Python MCP client (tests/mcp/client.py) over stdio: with a backup store a
/// checkpoint brings a file back, and a restore can be undone.
#[test]
fn mcp_snapshot_and_restore_tools() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path());
    ok(agent.cli(&["create", "demo"]));
    let out = Command::new(common::mcp_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py"))
        .args(["stdio", env!("CARGO_BIN_EXE_kubectl-computer"), "demo"])
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = ok(out);
    assert!(
        stdout
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with("ok: stdio "),
        "{stdout}"
    );
    // The tool's snapshot and the restore's undo snapshot are the agent's.
    let listed = ok(agent.cli(&["snapshots", "demo"]));
    assert!(listed.contains("\nbefore-restore-"), "{listed}");
    assert!(listed.contains("\ndemo-"), "{listed}");
}
