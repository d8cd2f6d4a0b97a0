//! `git clone`/`commit`/`push` in the shell over HTTP, under the
//! computer's egress policy: a real `git http-backend` on 127.0.0.1, one
//! port allowed, another refused with the policy's reason.

mod common;
#[allow(dead_code)]
#[path = "../../git/tests/common/http.rs"]
mod git_http;

use std::sync::Arc;
use std::time::Duration;

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use agentcomputer_shell::ExecRequest;
use common::Computer;
use git_http::{Backend, bare_repo, git};

/// Allows 127.0.0.1, port `port` only.
fn only_port(port: u16) -> Arc<Policy> {
    Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag(&format!("127.0.0.1/32:{port}")).unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    )
}

fn request(script: &str, egress: Arc<Policy>) -> ExecRequest {
    ExecRequest {
        script: script.into(),
        timeout: Duration::from_secs(60),
        egress,
        ..ExecRequest::default()
    }
}

#[tokio::test]
async fn clone_commit_push_through_the_egress_policy() {
    let host = tempfile::tempdir().unwrap();
    let served = host.path().join("served");
    let bare = bare_repo(&served, "repo", 2);
    let allowed = Backend::start(&served);
    let refused = Backend::start(&served);
    let policy = only_port(allowed.port);
    let c = Computer::new();

    let url = allowed.url("repo.git");
    let run = c
        .exec(request(
            &format!(
                "git clone {url} && cd repo && echo hello > new.txt && git add new.txt && git commit -q -m 'from the shell' && git push"
            ),
            Arc::clone(&policy),
        ))
        .await;
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    assert!(
        run.stderr().starts_with("Cloning into 'repo'...\n"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains(&format!("To {url}\n")),
        "{}",
        run.stderr()
    );
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s"]),
        "from the shell\n"
    );
    git(&bare, &["fsck", "--strict", "--no-progress"]);

    // Another port on the same address: refused by the policy.
    let other = refused.url("repo.git");
    let run = c
        .exec(request(
            &format!("cd repo && git push {other} main"),
            Arc::clone(&policy),
        ))
        .await;
    assert_eq!(run.code(), 128, "{}{}", run.stdout(), run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.starts_with(&format!(
            "fatal: unable to access '{other}/': egress denied by policy"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_clone_from_a_silent_server_ends_with_the_exec_timeout() {
    // Accepts connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let c = Computer::new();
    let started = std::time::Instant::now();
    let run = c
        .exec(ExecRequest {
            script: format!("git clone http://127.0.0.1:{port}/repo.git; echo after"),
            timeout: Duration::from_secs(2),
            egress: only_port(port),
            ..ExecRequest::default()
        })
        .await;
    let took = started.elapsed();
    assert_eq!(
        run.code(),
        agentcomputer_shell::EXIT_TIMEOUT,
        "{}",
        run.stderr()
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(!run.stdout().contains("after"));
    // Nothing of the clone stays behind.
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"repo", true)
            .is_err(),
        "a stopped clone left its directory"
    );
    drop(silent);
}
