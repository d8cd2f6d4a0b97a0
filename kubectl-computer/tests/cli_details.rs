//! The real binary's refusals and help text for `create` and `exec`, and
//! the vocabulary of `list` against a local agent.

use std::process::{Command, Output, Stdio};

mod common;

fn cli(agent: &common::Agent, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fails(out: Output) -> String {
    assert!(!out.status.success(), "succeeded: {out:?}");
    text(&out.stderr)
}

#[test]
fn create_refuses_a_zero_quota() {
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    for zero in ["0", "0Gi", "0B"] {
        let err = fails(cli(&agent, &["create", "z", "--quota", zero]));
        assert!(
            err.contains("holds nothing: give a size above 0")
                && err.contains("leave --quota out for the default, 10Gi"),
            "{zero}: {err}"
        );
    }
    // Nothing was created.
    let list = text(&cli(&agent, &["list"]).stdout);
    assert!(!list.contains("\nz "), "{list}");
}

#[test]
fn exec_timeout_speaks_seconds_and_refuses_zero() {
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    assert!(
        cli(&agent, &["create", "t", "--quota", "1Mi"])
            .status
            .success()
    );
    let err = fails(cli(&agent, &["exec", "t", "--timeout", "0", "--", "true"]));
    assert!(err.contains("0 seconds is no time to run"), "{err}");
    let err = fails(cli(&agent, &["exec", "t", "--timeout=-1", "--", "true"]));
    assert!(err.contains("give seconds above 0"), "{err}");
    let err = fails(cli(
        &agent,
        &["exec", "t", "--timeout", "5000", "--", "true"],
    ));
    assert!(
        err.contains("5000 seconds is above the maximum, 3600 seconds (1 hour)"),
        "{err}"
    );
    assert!(!err.contains("timeout_ms") && !err.contains(" ms"), "{err}");
    let err = fails(cli(
        &agent,
        &["exec", "t", "--timeout", "soon", "--", "true"],
    ));
    assert!(err.contains("expected seconds"), "{err}");
    // A fraction of a second is a time limit.
    let out = cli(&agent, &["exec", "t", "--timeout", "0.5", "--", "echo ok"]);
    assert_eq!(text(&out.stdout), "ok\n", "{out:?}");
    let out = cli(&agent, &["exec", "t", "--timeout", "0.2", "--", "sleep 5"]);
    assert!(!out.status.success());
}

#[test]
fn exec_usage_and_help_show_what_is_needed_once() {
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    // Options given (a flag, a token from the environment) are not shown
    // as if required.
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .args(["--endpoint", &agent.url, "exec", "--cwd", "src", "demo"])
        .env("AGENTCOMPUTER_TOKEN", "x")
        .output()
        .unwrap();
    let err = fails(out);
    assert!(
        err.contains("Usage: kubectl computer exec [OPTIONS] <NAME> -- <SCRIPT>...\n"),
        "{err}"
    );
    for word in ["--endpoint", "--cwd", "--token"] {
        let usage = err.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(!usage.contains(word), "{usage}");
    }
    // --cwd has one default in the help.
    for flag in ["-h", "--help"] {
        let help = text(&cli(&agent, &["exec", flag]).stdout);
        let cwd: String = help
            .split("--cwd")
            .nth(1)
            .unwrap()
            .split("\n      -")
            .next()
            .unwrap()
            .into();
        assert_eq!(cwd.matches("[default:").count(), 1, "{flag}: {cwd}");
        assert!(cwd.contains("[default: /workspace]"), "{flag}: {cwd}");
    }
}

#[test]
fn list_speaks_the_cluster_phases() {
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    assert!(
        cli(&agent, &["create", "p", "--quota", "1Mi"])
            .status
            .success()
    );
    let out = text(&cli(&agent, &["list"]).stdout);
    let line = out.lines().find(|l| l.starts_with("p ")).unwrap();
    assert!(line.contains(" Ready "), "{out}");
    assert!(!out.contains("open") && !out.contains("idle"), "{out}");
}
