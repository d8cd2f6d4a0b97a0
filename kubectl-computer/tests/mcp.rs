//! `kubectl-computer mcp` driven by the official Python MCP client (the
//! `mcp` package from PyPI, in a cached virtual environment that
//! scripts/mcp-python.sh makes): over stdio, and over streamable HTTP with
//! and without the bearer token, against a node agent served in-process
//! on an ephemeral loopback port with a temporary data directory (as
//! tests/cli.rs does). The Python side (tests/mcp/client.py) checks every
//! tool; this side checks the files it left through the CLI.
//!
//! Needs python3 with its venv module and access to PyPI on the first run;
//! without them the tests fail saying what is missing (CI installs them).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

mod common;

/// The CLI's view of an in-process agent.
struct Server(common::Agent);

impl std::ops::Deref for Server {
    type Target = common::Agent;
    fn deref(&self) -> &common::Agent {
        &self.0
    }
}

impl Server {
    fn start(data: &Path) -> Server {
        Server(common::Agent::start(data, None, true))
    }

    /// The CLI, set to reach this agent and find its token in its data
    /// directory.
    fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
        cmd.env("AGENTCOMPUTER_ENDPOINT", &self.url)
            .env("AGENTCOMPUTER_DATA_DIR", &self.data)
            .env_remove("AGENTCOMPUTER_TOKEN")
            .env_remove("AGENTCOMPUTER_TOKEN_FILE")
            .env_remove("AGENTCOMPUTER_CA_CERT");
        cmd
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        ok(&out, &format!("kubectl-computer {args:?}"))
    }
}

fn ok(out: &Output, what: &str) -> String {
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

fn python() -> &'static Path {
    common::mcp_python()
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py")
}

/// Runs client.py with `args`; asserts it passed and returns its count of
/// checks.
fn run_client(server: &Server, args: &[&str]) -> u32 {
    let out = Command::new(python())
        .arg(client_script())
        .args(args)
        // For the stdio server client.py starts.
        .env("AGENTCOMPUTER_ENDPOINT", &server.url)
        .env("AGENTCOMPUTER_DATA_DIR", &server.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = ok(&out, &format!("client.py {args:?}"));
    let last = stdout.lines().last().unwrap_or_default();
    let count = last
        .strip_prefix(&format!("ok: {} ", args[0]))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("client.py did not finish: {stdout}"));
    assert!(count > 100, "client.py made only {count} checks");
    count
}

/// The files the client left, seen through the CLI (not through MCP).
fn assert_left_behind(server: &Server, transport: &str) {
    let notes = server.cli(&["cat", "demo", &format!("mcp-{transport}/notes.md")]);
    assert_eq!(
        notes,
        "# Notes\nstatus: final\nowner: ada\nnext: ship it\nstatus line two: draft\n"
    );
    let listing = server.cli(&["ls", "demo", &format!("mcp-{transport}")]);
    assert_eq!(listing, "notes.md\n");
}

#[test]
fn stdio_transport_with_the_python_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.cli(&["create", "demo"]);
    let binary = env!("CARGO_BIN_EXE_kubectl-computer");
    run_client(&server, &["stdio", binary, "demo"]);
    assert_left_behind(&server, "stdio");
}

/// A running `mcp --listen` server, killed on drop.
struct Listening {
    child: Child,
    url: String,
    /// The token it printed, if it made one.
    token: Option<String>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kubectl-computer mcp demo --listen 127.0.0.1:0 EXTRA...` and
/// reads the endpoint (and a generated token) from its stderr.
fn listen(server: &Server, extra: &[&str]) -> Listening {
    listen_on(server, "127.0.0.1:0", extra)
}

/// [`listen`] on address `addr`.
fn listen_on(server: &Server, addr: &str, extra: &[&str]) -> Listening {
    let mut child = server
        .command()
        .args(["mcp", "demo", "--listen", addr])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut url = None;
    let mut token = None;
    let mut seen = Vec::new();
    while let Some(Ok(line)) = lines.next() {
        seen.push(line.clone());
        if let Some(u) = line.strip_prefix("MCP endpoint: ") {
            url = Some(u.to_string());
            if !extra.is_empty() {
                break; // a token file: no token line follows
            }
        } else if let Some(t) = line.strip_prefix("MCP bearer token (shown once): ") {
            token = Some(t.to_string());
            break;
        }
    }
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    let url = url.unwrap_or_else(|| panic!("no endpoint printed; stderr: {seen:?}"));
    Listening { child, url, token }
}

#[test]
fn http_transport_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.cli(&["create", "demo"]);

    // A generated token, printed once.
    let http = listen(&server, &[]);
    let token = http.token.clone().expect("no token printed");
    assert_eq!(token.len(), 64, "{token}");
    assert!(http.url.starts_with("http://127.0.0.1:") && http.url.ends_with("/mcp"));
    run_client(&server, &["http", &http.url, &token]);
    assert_left_behind(&server, "http");
    drop(http);

    // A token from a file: the same client passes with it; nothing printed.
    let file = dir.path().join("mcp-token");
    std::fs::write(&file, "file-token-0123456789\n").unwrap();
    let http = listen(&server, &["--mcp-token-file", file.to_str().unwrap()]);
    assert_eq!(http.token, None);
    run_client(&server, &["http", &http.url, "file-token-0123456789"]);
    drop(http);

    // Any loopback address it is told to use is a name its clients may
    // give in `Host` (the DNS-rebinding check refused 127.1.2.3 before).
    let http = listen_on(&server, "127.1.2.3:0", &[]);
    assert!(http.url.starts_with("http://127.1.2.3:"), "{}", http.url);
    let token = http.token.clone().expect("no token printed");
    run_client(&server, &["http", &http.url, &token]);
}

#[test]
fn http_listener_stays_on_loopback_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.cli(&["create", "demo"]);
    let out = server
        .command()
        .args(["mcp", "demo", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--allow-remote"),
        "{err}"
    );
    // An unknown computer fails before serving, in one line.
    let out = server.command().args(["mcp", "nope"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("not found"), "{err}");
}

/// Over stdio, every line gets an answer, even those the MCP SDK cannot
/// decode: a batch, a lone surrogate, invalid UTF-8, garbage and a line
/// over the 16 MiB limit, each with its id when it can be recovered
/// (JSON-RPC 2.0: -32700 parse error, -32600 invalid request). The server
/// then still serves.
#[test]
fn stdio_answers_lines_the_sdk_cannot_decode() {
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    server.cli(&["create", "demo"]);
    let mut child = server
        .command()
        .args(["mcp", "demo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line:?}"));
            if tx.send(value).is_err() {
                break;
            }
        }
    });
    let mut send = |line: &[u8]| {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let next = || {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("no answer within 30 s")
    };

    send(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#);
    assert_eq!(next()["id"], 1);
    send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    send(br#"[{"jsonrpc":"2.0","id":7,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/x"}]"#);
    let batch = next();
    assert_eq!(batch.as_array().map(Vec::len), Some(1), "{batch}");
    assert_eq!(batch[0]["id"], 7);
    assert_eq!(batch[0]["error"]["code"], -32600);

    send(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read","arguments":{"path":"\ud800"}}}"#);
    let a = next();
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (8.into(), (-32700).into()),
        "{a}"
    );

    send(b"{\"jsonrpc\":\"2.0\",\"id\":\"nine\",\"method\":\"tools/call\",\"params\":{\"name\":\"read\",\"arguments\":{\"path\":\"\xff\"}}}");
    let a = next();
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        ("nine".into(), (-32700).into()),
        "{a}"
    );

    send(b"this is not json");
    let a = next();
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (serde_json::Value::Null, (-32700).into()),
        "{a}"
    );

    let mut huge = br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"write","arguments":{"path":"x","content":""#.to_vec();
    huge.resize(17 << 20, b'a');
    huge.extend_from_slice(b"\"}}}");
    send(&huge);
    let a = next();
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (10.into(), (-32600).into()),
        "{a}"
    );

    // Still serving.
    send(br#"{"jsonrpc":"2.0","id":11,"method":"tools/list"}"#);
    let a = next();
    assert_eq!(a["id"], 11);
    assert!(
        a["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() == 12),
        "{a}"
    );

    // End of input ends the server cleanly.
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
