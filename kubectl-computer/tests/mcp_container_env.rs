//! The MCP server's `exec` tool in the container runtime, driven by the
//! official Python MCP client (tests/mcp/preload.py): a caller's
//! `LD_PRELOAD` reaches the script's processes as the sandbox user and no
//! program running as root (the sandbox is built by root `bwrap` and
//! `setpriv`). Needs root and bubblewrap, as the container runtime does.

use std::path::Path;
use std::process::Command;

mod common;

fn sandbox_possible() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: the local container sandbox needs root");
        return false;
    }
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(name).is_file())
    };
    if !on_path("bwrap") {
        eprintln!("SKIPPED: bwrap (Debian package bubblewrap) is not installed");
        return false;
    }
    true
}

#[test]
fn a_preload_library_given_through_mcp_never_runs_as_root() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let record = host.path().join("record");
    let so = host.path().join("preload.so");
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../node-agent/tests/fixtures/preload_record.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(format!("-DRECORD=\"{}\"", record.display()))
        .arg(&src)
        .status()
        .expect("cc (build-essential) builds the preload library");
    assert!(built.success());
    // The library works: a host program loads it and records uid 0.
    assert!(
        Command::new("/bin/true")
            .env("LD_PRELOAD", &so)
            .status()
            .unwrap()
            .success()
    );
    let seen = std::fs::read_to_string(&record).unwrap();
    assert!(seen.starts_with("uid=0 "), "{seen}");
    std::fs::remove_file(&record).unwrap();

    let server = common::Agent::start(dir.path(), None, true);
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
            .env("AGENTCOMPUTER_ENDPOINT", &server.url)
            .env("AGENTCOMPUTER_DATA_DIR", &server.data)
            .env_remove("AGENTCOMPUTER_TOKEN")
            .env_remove("AGENTCOMPUTER_TOKEN_FILE")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    cli(&["create", "demo"]);
    cli(&["put", "demo", so.to_str().unwrap(), "preload.so"]);

    let out = Command::new(common::mcp_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/preload.py"))
        .arg(env!("CARGO_BIN_EXE_kubectl-computer"))
        .arg("demo")
        .arg(format!("{} /workspace/preload.so", so.display()))
        .env("AGENTCOMPUTER_ENDPOINT", &server.url)
        .env("AGENTCOMPUTER_DATA_DIR", &server.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "preload.py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !record.exists(),
        "a program outside the sandbox loaded the caller's library: {}",
        std::fs::read_to_string(&record).unwrap_or_default()
    );
    assert!(stdout.contains("uid=1000 euid=1000"), "{stdout}");
    assert!(!stdout.contains("uid=0 "), "{stdout}");
}
