//! `publish`: a directory of a computer is committed and pushed to a real
//! git server (`git http-backend` on loopback) through the computer's
//! egress policy, with credentials that never reach the computer.

use std::path::Path;
use std::process::{Command, Output};

mod common;

#[path = "../../node-agent/git/tests/common/http.rs"]
#[allow(dead_code, unreachable_pub)]
mod http;

fn cli(agent: &common::Agent, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap()
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

fn server_log(bare: &Path) -> String {
    http::git(bare, &["log", "--format=%s", "main"])
}

#[test]
fn publish_commits_and_pushes_through_the_policy_and_keeps_no_credentials() {
    let root = tempfile::tempdir().unwrap();
    let bare = http::bare_repo(root.path(), "site", 0);
    // "ada:s3cret-token" in HTTP basic form.
    let backend =
        http::Backend::start_requiring(root.path(), Some("Basic YWRhOnMzY3JldC10b2tlbg=="));
    let data = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    let allow = format!("127.0.0.1/32:{}", backend.port);
    ok(cli(
        &agent,
        &["create", "demo", "--allow-cidr", &allow],
        &[],
    ));
    ok(cli(
        &agent,
        &[
            "exec",
            "demo",
            "--",
            "mkdir site && echo hello > site/index.html",
        ],
        &[],
    ));
    let remote = backend.url("site.git");
    let secret = [("PUBLISH_TOKEN", "ada:s3cret-token")];

    // Without credentials the server refuses, and git's reason is shown;
    // the commit is made and kept, and the next publish pushes it.
    let out = cli(
        &agent,
        &[
            "publish",
            "demo",
            "site",
            "--remote",
            &remote,
            "-m",
            "first page",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("could not read Username"),
        "{}",
        text(&out.stderr)
    );

    let out = ok(cli(
        &agent,
        &[
            "publish",
            "demo",
            "site",
            "--remote",
            &remote,
            "--credentials-env",
            "PUBLISH_TOKEN",
        ],
        &secret,
    ));
    let (branch, commit) = out.trim().split_once(' ').unwrap();
    assert_eq!(branch, "main");
    assert_eq!(commit.len(), 40, "{out}");
    assert_eq!(server_log(&bare), "first page\n");
    http::git(&bare, &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(http::git(&bare, &["rev-parse", "main"]).trim(), commit);

    // Nothing changed: the same commit, pushed again, nothing new made.
    let again = ok(cli(
        &agent,
        &[
            "publish",
            "demo",
            "/site",
            "--remote",
            &remote,
            "--credentials-env",
            "PUBLISH_TOKEN",
        ],
        &secret,
    ));
    assert_eq!(again, out);

    // A change: a second commit on top, from a credentials file.
    ok(cli(
        &agent,
        &["exec", "demo", "--", "echo more >> site/index.html"],
        &[],
    ));
    let file = root.path().join("creds");
    std::fs::write(&file, "ada:s3cret-token\n").unwrap();
    ok(cli(
        &agent,
        &[
            "publish",
            "demo",
            "site",
            "--remote",
            &remote,
            "-m",
            "second",
            "--credentials-file",
            file.to_str().unwrap(),
        ],
        &[],
    ));
    assert_eq!(server_log(&bare), "second\nfirst page\n");

    // The computer holds no trace of the secret: not in its files, not in
    // the repository's config.
    let found = cli(
        &agent,
        &["exec", "demo", "--", "grep -r s3cret / ; echo status=$?"],
        &[],
    );
    assert_eq!(text(&found.stdout), "status=1\n", "{}", text(&found.stderr));
    let config = ok(cli(&agent, &["cat", "demo", "site/.git/config"], &[]));
    assert!(
        !config.contains("ada") && !config.contains("remote"),
        "{config}"
    );

    // A remote the policy does not allow is refused with the policy's reason.
    let elsewhere = format!(
        "http://127.0.0.1:{}/site.git",
        backend.port.wrapping_add(1).max(1)
    );
    let out = cli(
        &agent,
        &["publish", "demo", "site", "--remote", &elsewhere],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("egress"),
        "{}",
        text(&out.stderr)
    );

    // Credentials in the URL are refused before anything happens.
    let out = cli(
        &agent,
        &[
            "publish",
            "demo",
            "site",
            "--remote",
            "http://ada:x@127.0.0.1:1/r.git",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("credentials do not belong in the URL"),
        "{}",
        text(&out.stderr)
    );
    agent.stop();
}
