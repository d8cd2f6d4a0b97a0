//! RUNTIME_AUTO through a real `node-agent local` process: a script whose
//! commands the shell runtime has runs in-process, one naming a real
//! binary runs in the container, and the exit event says which and why.

mod common;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

fn auto_req(computer: &str, script: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: computer.into(),
        runtime: pb::Runtime::Auto as i32,
        script: script.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn auto_runs_built_in_scripts_in_process_and_real_binaries_in_the_container() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "auto", 0).await;
    sh(
        &mut c,
        "auto",
        "mkdir src; echo '# TODO x' > src/a.py; touch b c",
    )
    .await;

    let ls = run(&mut c, auto_req("auto", "ls | wc -l")).await;
    assert_eq!((ls.code, ls.stdout.trim()), (0, "3"), "{ls:?}");
    assert_eq!(ls.runtime, "shell", "{ls:?}");
    assert_eq!(
        ls.runtime_reason, "every command is built into the shell runtime",
        "{ls:?}"
    );

    let py = run(&mut c, auto_req("auto", "python3 -c \"print(6*7)\"")).await;
    assert_eq!((py.code, py.stdout.as_str()), (0, "42\n"), "{py:?}");
    assert_eq!(py.runtime, "container", "{py:?}");
    assert_eq!(
        py.runtime_reason, "python3 is not a shell runtime command",
        "{py:?}"
    );

    // Both see the same files; a computed command name goes to the
    // container, where bash resolves it.
    let dynamic = run(&mut c, auto_req("auto", "cmd=grep; $cmd -rc TODO src")).await;
    assert_eq!(dynamic.stdout, "src/a.py:1\n", "{dynamic:?}");
    assert_eq!(dynamic.runtime, "container");
    assert!(
        dynamic.runtime_reason.contains("computed at run time"),
        "{dynamic:?}"
    );

    // A named runtime says which ran and gives no reason.
    let plain = sh(&mut c, "auto", "true").await;
    assert_eq!(
        (plain.runtime.as_str(), plain.runtime_reason.as_str()),
        ("shell", "")
    );
    let boxed = run(&mut c, box_req("auto", "true")).await;
    assert_eq!(boxed.runtime, "container");
    agent.stop().await;
}

/// An agent that cannot build sandboxes refuses an auto script naming a
/// command the shell lacks, naming the command, and runs the rest
/// in-process.
#[tokio::test]
async fn without_a_container_auto_names_the_missing_command() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: starting an agent as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    nix::unistd::chown(&data, Some(65534.into()), Some(65534.into())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = Agent::start_as(&data, &[], 65534);
    let mut c = agent.client().await;
    create(&mut c, "plain", 0).await;

    let err = c
        .exec(auto_req("plain", "echo start > f; npm test"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .contains("npm: command not found in the shell runtime"),
        "{err:?}"
    );
    assert!(err.message().contains("nothing was run"), "{err:?}");
    assert!(err.message().contains("not running as root"), "{err:?}");
    // Nothing ran: the first command's file is not there.
    let check = sh(&mut c, "plain", "test -e f; echo $?").await;
    assert_eq!(check.stdout, "1\n");

    let ls = run(&mut c, auto_req("plain", "ls | wc -l")).await;
    assert_eq!((ls.stdout.as_str(), ls.runtime.as_str()), ("0\n", "shell"));

    // Commands that could only not be named run in the shell runtime.
    let eval = run(&mut c, auto_req("plain", "eval 'echo from-eval'")).await;
    assert_eq!(eval.stdout, "from-eval\n", "{eval:?}");
    assert_eq!(eval.runtime, "shell");
    assert!(
        eval.runtime_reason.contains("no container runtime"),
        "{eval:?}"
    );

    // Asked for the shell runtime, the same command is bash's 127 with
    // the hint.
    let shell = sh(&mut c, "plain", "npm test").await;
    assert_eq!(shell.code, 127);
    assert!(shell.stderr.contains("--runtime auto"), "{shell:?}");
    agent.stop().await;
}
