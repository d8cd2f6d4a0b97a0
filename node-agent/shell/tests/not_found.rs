//! Commands the shell runtime does not have: bash's status and one message
//! for all of them, naming the runtimes that run real binaries.

mod common;

use agentcomputer_shell::{EXIT_NOT_FOUND, auto, not_found_message};
use common::Computer;

#[tokio::test]
async fn every_missing_command_gets_one_message_and_127() {
    let c = Computer::new();
    for name in [
        "python3",
        "node",
        "pip",
        "npm",
        "make",
        "gcc",
        "cargo",
        "grpe",
        "no-such-tool",
    ] {
        let run = c.sh(&format!("{name} --version")).await;
        assert_eq!(run.code(), EXIT_NOT_FOUND, "{name}: {}", run.stderr());
        assert_eq!(
            run.stderr(),
            format!("{}\n", not_found_message(name)),
            "{name}"
        );
        assert!(
            run.stderr()
                .starts_with(&format!("bash: {name}: command not found ("))
        );
        assert!(run.stderr().contains("--runtime container"), "{name}");
        assert!(run.stderr().contains("--runtime auto"), "{name}");
        assert_eq!(run.outcome.error, None, "{name}: the script ran and ended");
    }
}

#[tokio::test]
async fn the_script_goes_on_and_redirections_apply_as_in_bash() {
    let c = Computer::new();
    let run = c.sh("python3 x.py; echo after $?").await;
    assert_eq!(run.code(), 0);
    assert_eq!(run.stdout(), "after 127\n");
    let silent = c.sh("node -v 2>/dev/null; echo $?").await;
    assert_eq!(silent.stdout(), "127\n");
    assert_eq!(silent.stderr(), "");
    let piped = c.sh("gcc a.c 2>&1 | wc -l").await;
    assert_eq!(piped.stdout().trim(), "1");
    // Inside a function, a substitution and a pipeline alike.
    let nested = c
        .sh("f() { svn status; }; x=$(f); f | cat; echo done")
        .await;
    assert_eq!(
        nested.stderr(),
        format!("{0}\n{0}\n", not_found_message("svn"))
    );
    assert_eq!(nested.stdout(), "done\n");
    // A file run by its path keeps bash's own answer.
    let path = c.sh("./configure").await;
    assert_eq!(path.code(), 127);
    assert!(
        path.stderr().contains("No such file or directory"),
        "{}",
        path.stderr()
    );
}

#[tokio::test]
async fn what_auto_sends_to_the_container_is_what_the_shell_lacks() {
    let c = Computer::new();
    for script in ["python3 -c 'print(6*7)'", "npm test", "make", "svn log"] {
        let decision = auto::decide(script);
        assert_eq!(decision.route, auto::Route::Container, "{script}");
        let name = decision.missing.expect("a missing command");
        let run = c.sh(script).await;
        assert_eq!(run.code(), EXIT_NOT_FOUND, "{script}");
        assert_eq!(run.stderr(), format!("{}\n", not_found_message(&name)));
    }
    let decision = auto::decide("grep -rn TODO . | wc -l");
    assert_eq!(decision.route, auto::Route::Shell);
    let run = c.sh("grep -rn TODO . | wc -l").await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
}
