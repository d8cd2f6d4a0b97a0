//! Limits: timeout, output cap, budgets, cancellation, streaming, and
//! isolation of a runaway script from the caller's runtime.

mod common;

use agentcomputer_shell::{
    EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_TIMEOUT, ExecRequest, OutputChunk, ShellLimits,
    run_with_limits,
};
use common::{Computer, exec};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn request(script: &str, timeout: Duration) -> ExecRequest {
    ExecRequest {
        script: script.into(),
        timeout,
        ..ExecRequest::default()
    }
}

// The caller's runtime is single-threaded on purpose: a script that spun
// on it would stall the second exec and the timer.
#[tokio::test(flavor = "current_thread")]
async fn a_runaway_loop_times_out_without_stalling_other_computers() {
    let runaway = Computer::new();
    let other = Computer::new();
    let start = Instant::now();
    let spin = exec(
        &runaway.fs,
        request("while true; do :; done", Duration::from_secs(1)),
        CancellationToken::new(),
    );
    let quick = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let done = exec(
            &other.fs,
            request("echo ok > f; cat f", Duration::from_secs(5)),
            CancellationToken::new(),
        )
        .await;
        (done, start.elapsed())
    };
    let (spun, (done, quick_at)) = tokio::join!(spin, quick);
    let total = start.elapsed();

    assert_eq!(done.ok(), "ok\n");
    assert!(
        quick_at < Duration::from_millis(900),
        "other exec took until {quick_at:?}"
    );
    assert_eq!(spun.code(), EXIT_TIMEOUT);
    assert_eq!(
        spun.outcome.error.as_deref(),
        Some("shell: script timed out after 1s")
    );
    assert!(
        spun.stderr()
            .ends_with("shell: script timed out after 1s\n")
    );
    assert!(
        total >= Duration::from_secs(1) && total < Duration::from_millis(1800),
        "runaway returned after {total:?}"
    );
}

#[tokio::test]
async fn sleep_past_the_timeout_is_stopped() {
    let c = Computer::new();
    let start = Instant::now();
    let out = c
        .exec(request(
            "echo before; sleep 10; echo after",
            Duration::from_millis(500),
        ))
        .await;
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(out.code(), EXIT_TIMEOUT);
    assert_eq!(out.stdout(), "before\n");
    assert_eq!(
        out.outcome.error.as_deref(),
        Some("shell: script timed out after 500ms")
    );
}

#[tokio::test]
async fn output_past_the_cap_is_truncated_and_stops_the_script() {
    let c = Computer::new();
    let out = c
        .exec(ExecRequest {
            script: "while true; do echo 0123456789; done; echo never > f".into(),
            timeout: Duration::from_secs(10),
            max_output_bytes: 1000,
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.code(), EXIT_OUTPUT_CAP);
    let stdout = out.stdout_bytes();
    assert_eq!(stdout.len(), 1000);
    assert!(stdout.starts_with(b"0123456789\n0123456789\n"));
    let error = out.outcome.error.clone().unwrap();
    assert_eq!(
        error,
        "shell: output exceeded 1000 bytes; output truncated and script stopped"
    );
    assert!(out.stderr().contains(&error));
    // The script did not go on after its output was cut.
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"f", true)
            .is_err()
    );
}

#[tokio::test]
async fn the_cap_counts_stdout_and_stderr_together() {
    let c = Computer::new();
    let out = c
        .exec(ExecRequest {
            script: "for i in $(seq 1 100); do echo out; echo err >&2; done".into(),
            timeout: Duration::from_secs(10),
            max_output_bytes: 40,
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.code(), EXIT_OUTPUT_CAP);
    let script_bytes: usize = out
        .chunks
        .iter()
        .map(|c| match c {
            OutputChunk::Stdout(b) | OutputChunk::Stderr(b) => b.len(),
        })
        .sum::<usize>()
        - (out.outcome.error.as_ref().unwrap().len() + 1);
    assert_eq!(script_bytes, 40);
}

#[tokio::test]
async fn loop_and_command_budgets_stop_with_a_clear_message() {
    let c = Computer::new();
    let limits = ShellLimits {
        max_loop_iterations: 100,
        ..ShellLimits::default()
    };
    let (tx, mut rx) = mpsc::channel(16);
    let outcome = run_with_limits(
        c.fs.clone(),
        request(
            "i=0; while true; do i=$((i+1)); done",
            Duration::from_secs(10),
        ),
        tx,
        CancellationToken::new(),
        limits,
    )
    .await;
    while rx.recv().await.is_some() {}
    assert_eq!(outcome.exit_code, 1);
    assert_eq!(
        outcome.error.as_deref(),
        Some("shell: script stopped: maximum loop iterations exceeded (100)")
    );
}

#[tokio::test]
async fn deep_recursion_is_stopped() {
    let c = Computer::new();
    let out = c.sh("f() { f; }; f").await;
    assert_eq!(out.code(), 1);
    let error = out.outcome.error.clone().unwrap();
    assert!(error.contains("maximum function depth exceeded"), "{error}");
}

#[tokio::test]
async fn shallow_recursion_works() {
    let c = Computer::new();
    let out = c
        .sh("fact() { if [ $1 -le 1 ]; then echo 1; else echo $(( $1 * $(fact $(($1-1))) )); fi; }; fact 10")
        .await;
    assert_eq!(out.ok(), "3628800\n");
}

#[tokio::test]
async fn cancellation_stops_a_running_script() {
    let c = Computer::new();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let start = Instant::now();
    let out = exec(
        &c.fs,
        request("echo started; sleep 30", Duration::from_secs(60)),
        cancel,
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.code(), EXIT_CANCELLED);
    assert_eq!(out.stdout(), "started\n");
    assert_eq!(
        out.outcome.error.as_deref(),
        Some("shell: script cancelled")
    );
}

#[tokio::test]
async fn dropping_the_receiver_cancels() {
    let c = Computer::new();
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let start = Instant::now();
    let outcome = agentcomputer_shell::run(
        c.fs.clone(),
        request("while true; do echo spam; done", Duration::from_secs(30)),
        tx,
        CancellationToken::new(),
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(outcome.exit_code, EXIT_CANCELLED);
}

#[tokio::test]
async fn output_streams_before_the_script_ends() {
    let c = Computer::new();
    let (tx, mut rx) = mpsc::channel(16);
    let start = Instant::now();
    let runner = tokio::spawn({
        let fs = c.fs.clone();
        async move {
            agentcomputer_shell::run(
                fs,
                request("echo first; sleep 1; echo second", Duration::from_secs(10)),
                tx,
                CancellationToken::new(),
            )
            .await
        }
    });
    let first = rx.recv().await.unwrap();
    let first_at = start.elapsed();
    assert_eq!(first, OutputChunk::Stdout(b"first\n".to_vec()));
    assert!(
        first_at < Duration::from_millis(700),
        "first chunk at {first_at:?}"
    );
    assert_eq!(
        rx.recv().await.unwrap(),
        OutputChunk::Stdout(b"second\n".to_vec())
    );
    let outcome = runner.await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(outcome.exit_code, 0);
}

#[tokio::test]
async fn deep_nesting_fits_the_exec_thread_stack() {
    let c = Computer::new();
    let subst = format!("{}echo deep{}", "echo $(".repeat(30), ")".repeat(30));
    let subshells = format!("{}echo nested{}", "( ".repeat(30), " )".repeat(30));
    let recursion =
        "f() { if [ $1 -lt 15 ]; then ( f $(( $1 + 1 )) ); else echo bottom $1; fi; }; f 0";
    let out = c.sh(&format!("{subst}\n{subshells}\n{recursion}")).await;
    assert_eq!(out.ok(), "deep\nnested\nbottom 15\n");
}

#[tokio::test]
async fn nesting_past_the_budgets_is_refused_not_crashed() {
    let c = Computer::new();
    let subst = format!("{}echo deep{}", "echo $(".repeat(40), ")".repeat(40));
    let out = c.sh(&subst).await;
    assert_eq!(out.code(), 1);
    assert_eq!(
        out.outcome.error.as_deref(),
        Some("shell: script stopped: maximum command substitution depth exceeded")
    );
}

#[tokio::test]
async fn dropping_the_run_future_stops_the_script() {
    let c = Computer::new();
    let (tx, mut rx) = mpsc::channel(16);
    let script = "while true; do echo tick >> ticks; sleep 0.05; done";
    let fut = agentcomputer_shell::run(
        c.fs.clone(),
        request(script, Duration::from_secs(30)),
        tx,
        CancellationToken::new(),
    );
    // Run it for a while, then drop it unfinished.
    let _ = tokio::time::timeout(Duration::from_millis(300), fut).await;
    // The output channel ends: nothing holds a sender any more.
    let ended = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
    assert_eq!(ended, Ok(None));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_stop = c.read("ticks").len();
    assert!(after_stop > 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.read("ticks").len(), after_stop, "the script kept running");
}

#[tokio::test]
async fn stderr_through_the_ordered_sink_stops_at_the_cap() {
    let c = Computer::new();
    for script in [
        "yes >&2; echo never > f",
        "echo a; ls nosuch; cat /dev/zero >&2",
    ] {
        let started = std::time::Instant::now();
        let out = c
            .exec(ExecRequest {
                script: script.into(),
                timeout: Duration::from_secs(10),
                max_output_bytes: 1000,
                ..ExecRequest::default()
            })
            .await;
        assert_eq!(out.code(), EXIT_OUTPUT_CAP, "{script}: {:?}", out.outcome);
        assert!(started.elapsed() < Duration::from_secs(5), "{script}");
        let bytes: usize = out
            .chunks
            .iter()
            .map(|c| match c {
                OutputChunk::Stdout(b) | OutputChunk::Stderr(b) => b.len(),
            })
            .sum();
        // The cap, plus the runtime's own closing line.
        let closing = out.outcome.error.as_ref().map_or(0, |e| e.len() + 1);
        assert_eq!(bytes, 1000 + closing, "{script}");
    }
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"f", false)
            .is_err()
    );
}
