//! Moving data in and out of a computer with the real `kubectl-computer`
//! binary against a node agent served in-process: standard input of an
//! exec (and the warning when it is not sent), and directory trees with
//! `put -r` and `get -r`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

/// The CLI, set to reach `agent` and find its token.
fn cli(agent: &common::Agent) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the CLI with `args` and no standard input (`/dev/null`).
fn run(agent: &common::Agent, args: &[&str]) -> Output {
    cli(agent)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs the CLI with `args`, writing `input` into a pipe on its stdin.
fn run_piped(agent: &common::Agent, args: &[&str], input: &[u8]) -> Output {
    let mut child = cli(agent)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A writer thread: the CLI may not read all of it (no -i).
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
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

fn start(dir: &Path) -> common::Agent {
    let agent = common::Agent::start(&dir.join("data"), None, false);
    ok(run(&agent, &["create", "demo"]));
    agent
}

const WARNING: &str = "warning: standard input is not sent without -i (--stdin)";

#[test]
fn piped_input_without_i_draws_a_warning_and_with_i_reaches_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());

    let out = run_piped(&agent, &["exec", "demo", "--", "sort"], b"b\na\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert!(text(&out.stderr).contains(WARNING), "{}", text(&out.stderr));

    let out = run_piped(&agent, &["exec", "-i", "demo", "--", "sort"], b"b\na\n");
    assert_eq!(ok(out.clone()), "a\nb\n");
    assert!(!text(&out.stderr).contains("warning"), "{}", text(&out.stderr));

    // /dev/null is no input anyone meant to send.
    let out = run(&agent, &["exec", "demo", "--", "echo hi"]);
    assert_eq!(ok(out.clone()), "hi\n");
    assert_eq!(text(&out.stderr), "");

    // A file on stdin is input too.
    let file = dir.path().join("in.txt");
    std::fs::write(&file, "x\n").unwrap();
    let out = cli(&agent)
        .args(["exec", "demo", "--", "true"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains(WARNING), "{}", text(&out.stderr));
}
