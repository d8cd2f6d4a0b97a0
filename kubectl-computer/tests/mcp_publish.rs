//! The MCP `publish` tool, driven by the official Python MCP client
//! (tests/mcp/publish.py) against `kubectl-computer mcp`, an in-process node
//! agent and a real git server (`git http-backend` on loopback) that wants
//! credentials. Over stdio the server is allowed one variable and pushes
//! with it; other variables, credentials in the URL and a remote the
//! egress policy refuses are refused. Over HTTP without an allow-list (as
//! the API gateway's remote MCP runs) every `credentials_env` is refused.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

mod common;

#[path = "../../node-agent/git/tests/common/http.rs"]
#[allow(dead_code, unreachable_pub)]
mod http;

/// "ada:s3cret-token" in HTTP basic form.
const BASIC: &str = "Basic YWRhOnMzY3JldC10b2tlbg==";

fn cli(agent: &common::Agent) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .env_remove("KUBECONFIG")
        .env("PUBLISH_TOKEN", "ada:s3cret-token")
        .env("OTHER_SECRET", "other-s3cret-value");
    cmd
}

fn ok(out: Output, what: &str) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "{what}: status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/publish.py")
}

/// Runs publish.py with `args` and the agent's and secrets' variables;
/// returns its stdout after checking it finished.
fn run_script(agent: &common::Agent, args: &[&str]) -> String {
    let out = Command::new(common::mcp_python())
        .arg(script())
        .args(args)
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env("PUBLISH_TOKEN", "ada:s3cret-token")
        .env("OTHER_SECRET", "other-s3cret-value")
        .output()
        .unwrap();
    let stdout = ok(out, &format!("publish.py {args:?}"));
    let last = stdout.lines().last().unwrap_or_default();
    let count: u32 = last
        .strip_prefix(&format!("ok: {} ", args[0]))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("publish.py did not finish: {stdout}"));
    assert!(count > 10, "publish.py made only {count} checks");
    stdout
}

fn line<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} line: {stdout}"))
}

#[test]
fn publish_over_stdio_reads_only_the_allowed_variable() {
    let root = tempfile::tempdir().unwrap();
    let bare = http::bare_repo(root.path(), "site", 0);
    let backend = http::Backend::start_requiring(root.path(), Some(BASIC));
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    let allow = format!("127.0.0.1/32:{}", backend.port);
    ok(
        cli(&agent)
            .args(["create", "demo", "--allow-cidr", &allow])
            .output()
            .unwrap(),
        "create",
    );
    let denied = format!(
        "http://127.0.0.1:{}/site.git",
        backend.port.wrapping_add(1).max(1)
    );
    let binary = env!("CARGO_BIN_EXE_kubectl-computer");
    let stdout = run_script(
        &agent,
        &[
            "stdio",
            binary,
            "demo",
            &backend.url("site.git"),
            &denied,
            "--allow-credentials-env",
            "PUBLISH_TOKEN",
        ],
    );
    assert_eq!(
        http::git(&bare, &["rev-parse", "main"]).trim(),
        line(&stdout, "commit: ")
    );
    assert_eq!(
        http::git(&bare, &["rev-parse", "next"]).trim(),
        line(&stdout, "next: ")
    );
    assert_eq!(
        http::git(&bare, &["log", "--format=%s", "next"]),
        "more\nfrom mcp\n"
    );
    http::git(&bare, &["fsck", "--strict", "--no-dangling"]);

    // The computer holds no trace of the secret.
    let found = cli(&agent)
        .args(["exec", "demo", "--", "grep -r s3cret / ; echo status=$?"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&found.stdout), "status=1\n");
    agent.stop();
}

/// A running `mcp --listen` server, killed on drop.
struct Listening {
    child: Child,
    url: String,
    token: String,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn publish_without_an_allow_list_refuses_every_variable() {
    let root = tempfile::tempdir().unwrap();
    http::bare_repo(root.path(), "web", 0);
    let backend = http::Backend::start_requiring(root.path(), Some(BASIC));
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    let allow = format!("127.0.0.1/32:{}", backend.port);
    ok(
        cli(&agent)
            .args(["create", "demo", "--allow-cidr", &allow])
            .output()
            .unwrap(),
        "create",
    );
    // PUBLISH_TOKEN is in the server's environment; no flag allows it.
    let mut child = cli(&agent)
        .args(["mcp", "demo", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut url, mut token) = (None, None);
    while let Some(Ok(l)) = lines.next() {
        if let Some(u) = l.strip_prefix("MCP endpoint: ") {
            url = Some(u.to_string());
        } else if let Some(t) = l.strip_prefix("MCP bearer token (shown once): ") {
            token = Some(t.to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let server = Listening {
        child,
        url: url.expect("no endpoint printed"),
        token: token.expect("no token printed"),
    };
    run_script(
        &agent,
        &["http", &server.url, &server.token, &backend.url("web.git")],
    );
    drop(server);
    agent.stop();
}
