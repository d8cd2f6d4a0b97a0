//! `kubectl computer ui` in a real headless browser: Debian's chromium
//! driven by playwright-core (tests/ui/drive.mjs, pinned in its
//! package-lock.json) against the real CLI binary and a local agent. The
//! page runs a task in the shell and container columns side by side, each
//! showing its output while it runs, then its exit code and duration; the
//! file the task made is in the tree and previews; a module runs in the
//! JavaScript column. The screenshot is kept at
//! `target/ui-screenshot.png`. Also: the page's API refuses a request
//! without its token, and one under a foreign Host, and a run whose
//! request is abandoned ends at the agent even while it prints nothing.
//!
//! Needs root and bubblewrap (the container runtime), node and npm, and
//! chromium (`.ci/run` installs them).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

mod common;

fn missing_tools() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("the local container sandbox needs root".into());
    }
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(name).is_file())
    };
    for (tool, package) in [
        ("bwrap", "bubblewrap"),
        ("node", "nodejs"),
        ("npm", "npm"),
        ("chromium", "chromium"),
    ] {
        if !on_path(tool) {
            return Some(format!(
                "{tool} (Debian package {package}) is not installed"
            ));
        }
    }
    None
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `ui` process; killed when dropped.
struct Ui {
    child: Child,
    url: String,
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_ui(agent: &common::Agent, name: &str) -> Ui {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .args(["ui", name])
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("open ")
        .unwrap_or_else(|| panic!("ui printed {line:?}"))
        .to_string();
    Ui { child, url }
}

/// One HTTP/1.1 request to `addr`; the status code and the body.
fn request(addr: &str, host: &str, path: &str, header: Option<(&str, &str)>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let extra = header
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

#[test]
fn the_page_runs_a_task_in_each_runtime_side_by_side() {
    if let Some(why) = missing_tools() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    let created = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .args(["create", "demo"])
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let ui = start_ui(&agent, "demo");

    // The API's doors: the token, and the page's own Host only.
    let addr = ui
        .url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('/'))
        .unwrap()
        .0
        .to_string();
    let token = ui.url.rsplit_once("token=").unwrap().1.to_string();
    let (code, body) = request(&addr, &addr, "/api/tree?computer=demo", None);
    assert_eq!(code, 401, "{body}");
    let (code, _) = request(
        &addr,
        &addr,
        "/api/tree?computer=demo",
        Some(("x-ui-token", "0000")),
    );
    assert_eq!(code, 401);
    let (code, body) = request(
        &addr,
        &addr,
        "/api/tree?computer=demo",
        Some(("x-ui-token", &token)),
    );
    assert_eq!(code, 200, "{body}");
    let (code, _) = request(
        &addr,
        "attacker.example",
        "/api/tree?computer=demo",
        Some(("x-ui-token", &token)),
    );
    assert_eq!(code, 421);

    // A run the page stops waiting for ends at the agent, even one that
    // prints nothing meanwhile.
    {
        let body =
            r#"{"computer":"demo","runtime":"shell","script":"sleep 3; echo late > silent.txt"}"#;
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /api/run HTTP/1.1\r\nHost: {addr}\r\nx-ui-token: {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        drop(s);
        std::thread::sleep(std::time::Duration::from_secs(4));
        let (code, _) = request(
            &addr,
            &addr,
            "/api/file?computer=demo&path=silent.txt",
            Some(("x-ui-token", &token)),
        );
        assert_eq!(code, 404, "the abandoned run went on and wrote silent.txt");
    }

    let modules = Command::new("bash")
        .arg(repo().join("scripts/ui-browser.sh"))
        .output()
        .unwrap();
    assert!(
        modules.status.success(),
        "scripts/ui-browser.sh: {}",
        String::from_utf8_lossy(&modules.stderr)
    );
    let modules = String::from_utf8(modules.stdout)
        .unwrap()
        .trim()
        .to_string();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    std::fs::create_dir_all(&target).unwrap();
    let screenshot = target.join("ui-screenshot.png");
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/drive.mjs"))
        .arg(&ui.url)
        .arg(&screenshot)
        .env("UI_NODE_MODULES", &modules)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "drive.mjs: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(seen["errors"], serde_json::json!([]), "errors in the page");
    for rt in ["shell", "container"] {
        assert_eq!(
            seen["live"][rt], true,
            "{rt}: the first line came only with the end"
        );
        let col = seen["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["runtime"] == rt)
            .unwrap_or_else(|| panic!("no {rt} column: {seen}"));
        assert_eq!(col["exit"], "3", "{rt}: {col}");
        // Each stream in its own order (the container's two pipes may
        // interleave either way).
        assert!(
            col["stdout"] == "first line\nsecond line\n" && col["stderr"] == "a warning\n",
            "{rt}: {col}"
        );
        let ms = col["ms"].as_f64().unwrap();
        assert!(
            (2000.0..60_000.0).contains(&ms),
            "{rt}: {ms} ms for a 2 s task"
        );
        assert_eq!(
            col["status"].as_str().unwrap(),
            format!("exit 3 · {ms} ms"),
            "{rt}"
        );
    }
    assert!(
        seen["tree"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "report.txt"),
        "{seen}"
    );
    assert_eq!(seen["preview"], "made by the task\n");
    assert_eq!(seen["js"]["exit"], "0");
    assert_eq!(seen["js"]["output"], "{\"answer\":42}\n");
    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
    drop(ui);
    agent.stop();
}
