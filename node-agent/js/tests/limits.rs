//! Every limit ends only its own exec, with a clear error, and leaves the
//! process and other execs unaffected.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn an_infinite_loop_times_out() {
    let c = computer();
    let mut req = request("for (;;) {}");
    req.timeout = Duration::from_millis(300);
    let t = Instant::now();
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: timed out after 0.3s");
    assert_eq!(r.outcome.exit_code, agentcomputer_js::EXIT_TIMEOUT);
    assert!(r.stderr.contains("timed out after 0.3s"));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[tokio::test]
async fn a_timeout_cannot_be_caught() {
    let c = computer();
    let mut req = request("try { for (;;) {} } catch (e) { console.log('caught', e) } for (;;) {}");
    req.timeout = Duration::from_millis(200);
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: timed out after 0.2s");
    assert_eq!(r.stdout, "");
}

#[tokio::test]
async fn waiting_on_timers_past_the_deadline_times_out() {
    let c = computer();
    let mut req = request("setInterval(() => {}, 50);");
    req.timeout = Duration::from_millis(250);
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: timed out after 0.25s");
    let mut req = request("await new Promise(r => setTimeout(r, 60_000));");
    req.timeout = Duration::from_millis(200);
    let t = Instant::now();
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: timed out after 0.2s");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_memory_bomb_hits_the_memory_limit() {
    let c = computer();
    let mut req = request("const keep = []; for (;;) keep.push(new Array(100000).fill(1.5));");
    req.memory_limit_bytes = 32 << 20;
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: memory limit of 32 MiB exceeded");
    let mut req = request("let s = 'x'; for (;;) s = s + s;");
    req.memory_limit_bytes = 16 << 20;
    let r = run_req(&c.fs, req).await;
    // Ropes make doubling cheap, so QuickJS's string length cap may come first.
    let e = r.err();
    assert!(
        e == "javascript: memory limit of 16 MiB exceeded" || e == "InternalError: string too long",
        "{e}"
    );
    // The next exec on the same computer is fine.
    assert_eq!(
        run(&c.fs, "export default () => 'alive'").await.ok(),
        &json!("alive")
    );
}

#[tokio::test]
async fn deep_recursion_hits_the_stack_limit() {
    let c = computer();
    let mut req = request("function f(n) { return f(n + 1) + 1; } f(0);");
    req.stack_limit_bytes = 256 * 1024;
    let r = run_req(&c.fs, req).await;
    assert_eq!(
        r.err(),
        "javascript: stack limit of 256 KiB exceeded (RangeError: Maximum call stack size exceeded)"
    );
    // A larger stack allows deeper recursion, which a smaller one refuses.
    let src = "function f(n) { return n === 0 ? 0 : 1 + f(n - 1); } export default () => f(5000);";
    let mut req = request(src);
    req.stack_limit_bytes = 16 << 20;
    assert_eq!(run_req(&c.fs, req).await.ok(), &json!(5000));
    let mut req = request(src);
    req.stack_limit_bytes = 128 * 1024;
    assert!(run_req(&c.fs, req).await.err().contains("stack limit"));
}

#[tokio::test]
async fn output_past_the_cap_ends_the_exec() {
    let c = computer();
    let mut req = request("for (let i = 0; ; i++) console.log('line', i);");
    req.max_output_bytes = 1000;
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: output limit of 1000 bytes exceeded");
    assert_eq!(r.outcome.exit_code, agentcomputer_js::EXIT_OUTPUT_CAP);
    let stdout_bytes: usize = r
        .chunks
        .iter()
        .map(|c| match c {
            agentcomputer_js::OutputChunk::Stdout(b) => b.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(stdout_bytes, 1000);
    assert!(r.stderr.contains("output limit of 1000 bytes exceeded"));
}

#[tokio::test]
async fn cancellation_stops_a_running_exec() {
    let c = computer();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let t = Instant::now();
    let r = run_with(&c.fs, request("for (;;) {}"), Default::default(), cancel).await;
    assert_eq!(r.err(), "javascript: cancelled");
    assert_eq!(r.outcome.exit_code, agentcomputer_js::EXIT_CANCELLED);
    assert!(t.elapsed() < Duration::from_secs(5));
    // Also while waiting on a timer.
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let r = run_with(
        &c.fs,
        request("await new Promise(r => setTimeout(r, 60_000))"),
        Default::default(),
        cancel,
    )
    .await;
    assert_eq!(r.err(), "javascript: cancelled");
}

#[tokio::test]
async fn a_dropped_output_receiver_cancels() {
    let c = computer();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    drop(rx);
    let out = agentcomputer_js::run(
        c.fs.clone(),
        request("for (;;) console.log('x')"),
        tx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(out.error.as_deref(), Some("javascript: cancelled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_exec_does_not_stall_others() {
    let c = computer();
    let mut spin = request("for (;;) {}");
    spin.timeout = Duration::from_secs(10);
    let fs = c.fs.clone();
    let spinning = tokio::spawn(async move { run_req(&fs, spin).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    for i in 0..20 {
        let r = run(&c.fs, &format!("export default () => {i} * 2")).await;
        assert_eq!(r.ok(), &json!(i * 2));
    }
    // Had the spinner blocked them, they would finish only after its 10 s.
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!(
        spinning.await.unwrap().err(),
        "javascript: timed out after 10s"
    );
}

#[tokio::test]
async fn too_many_timers_is_an_error() {
    let c = computer();
    let r = run(
        &c.fs,
        "for (let i = 0; i < 200000; i++) setTimeout(() => {}, 1e9);",
    )
    .await;
    assert!(r.err().contains("too many pending timers"), "{}", r.err());
}

#[tokio::test]
async fn buffers_from_the_host_count_against_the_memory_limit() {
    let c = computer();
    c.fs.write_all(
        agentcomputer_fs::ROOT_INO,
        b"big.bin",
        &vec![7u8; 1 << 20],
        agentcomputer_fs::WriteMode::Truncate,
        0o644,
        agentcomputer_fs::Owner::ROOT,
    )
    .unwrap();
    let mut req = request(
        "import fs from 'node:fs'; const keep = []; for (;;) keep.push(fs.readFileSync('big.bin'));",
    );
    req.memory_limit_bytes = 32 << 20;
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "javascript: memory limit of 32 MiB exceeded");
    // A file larger than the whole heap is refused before it is read.
    let mut req = request("import fs from 'node:fs'; fs.readFileSync('big.bin');");
    req.memory_limit_bytes = 512 * 1024;
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.err(), "Error: EFBIG: file too large, read 'big.bin'");
}

#[tokio::test]
async fn a_microtask_spin_times_out() {
    let c = computer();
    let mut req = request("for (;;) await null;");
    req.timeout = Duration::from_millis(200);
    assert_eq!(
        run_req(&c.fs, req).await.err(),
        "javascript: timed out after 0.2s"
    );
    let mut req = request("const spin = () => Promise.resolve().then(spin); spin();");
    req.timeout = Duration::from_millis(200);
    assert_eq!(
        run_req(&c.fs, req).await.err(),
        "javascript: timed out after 0.2s"
    );
}

#[tokio::test]
async fn a_host_call_that_ignores_the_deadline_is_answered_for() {
    let c = computer();
    let slow = |_req: agentcomputer_js::FetchRequest| -> Result<agentcomputer_js::FetchResponse, agentcomputer_js::FetchError> {
        std::thread::sleep(Duration::from_secs(4));
        Err(agentcomputer_js::FetchError::Failed("too late".into()))
    };
    let options = agentcomputer_js::RunOptions {
        fetcher: std::sync::Arc::new(slow),
        ..Default::default()
    };
    let mut req = request("await fetch('https://slow.test/')");
    req.timeout = Duration::from_millis(200);
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let t = Instant::now();
    let out =
        agentcomputer_js::run_with(c.fs.clone(), req, tx, CancellationToken::new(), options).await;
    // The answer comes after the deadline plus the grace, not when the
    // stuck call returns.
    assert_eq!(
        out.error.as_deref(),
        Some("javascript: timed out after 0.2s")
    );
    assert!(
        t.elapsed() < Duration::from_millis(3500),
        "{:?}",
        t.elapsed()
    );
}
