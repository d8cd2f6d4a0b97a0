//! One computer cannot hurt the others: the resource model of
//! docs/isolation.md tried against a real `node-agent local` process whose
//! address space is limited (so an unbounded allocation would abort it, as
//! it did before), with its peak resident memory read from /proc.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, Ran, create, exec_req, js_req, run, sh};

/// The address-space limit of the agent: 4 GiB, well above what it
/// reserves for thread stacks, far below a terabyte.
const ADDRESS_SPACE: u64 = 4 << 30;
/// The exec memory budget (the agent's default).
const BUDGET: u64 = 256 << 20;

/// `VmHWM` (peak resident set) of process `pid`, bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM value");
    kib * 1024
}

async fn timed(c: &mut Client, req: pb::ExecRequest) -> (Ran, Duration) {
    let start = Instant::now();
    let ran = run(c, req).await;
    (ran, start.elapsed())
}

fn with_timeout(mut req: pb::ExecRequest, timeout: Duration) -> pb::ExecRequest {
    req.timeout_ms = timeout.as_millis() as u64;
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_turn_sparse_files_into_agent_memory() {
    let data = tempfile::tempdir().unwrap();
    let mut agent = Agent::start_with_address_space(data.path(), &[], ADDRESS_SPACE);
    let mut c = agent.client().await;
    create(&mut c, "victim", 10 << 20).await;
    create(&mut c, "other", 10 << 20).await;
    // Warm both runtimes up, then take the base.
    assert_eq!(sh(&mut c, "other", "echo ok").await.stdout, "ok\n");
    // A sparse file's logical size is capped (at the quota, at least 1 GiB:
    // docs/engine.md); the largest one allowed still far exceeds the exec's
    // memory budget, so an unbounded buffer would show in VmHWM below.
    let js = run(&mut c, js_req("victim", "const fs = require('fs'); fs.writeFileSync('f', ''); let capped = false; try { fs.truncateSync('f', 1e12); } catch (e) { capped = e.code === 'EFBIG'; } if (!capped) throw new Error('a 1e12-byte sparse file was allowed'); fs.writeFileSync('z64', ''); fs.truncateSync('f', 2 ** 30); fs.truncateSync('z64', 64 * 1024 * 1024); export default () => fs.statSync('f').size", "")).await;
    assert_eq!(js.result, "1073741824", "{js:?}");
    let base = peak_rss(agent.pid());

    // Whole-input commands: a clear error at once.
    let (ran, took) = timed(
        &mut c,
        with_timeout(exec_req("victim", "sort f"), Duration::from_secs(3)),
    )
    .await;
    assert_ne!(ran.code, 0);
    assert!(
        ran.stderr
            .contains("memory limit of 268435456 bytes exceeded"),
        "{ran:?}"
    );
    assert!(took < Duration::from_secs(2), "sort took {took:?}");
    let (ran, _) = timed(
        &mut c,
        js_req("victim", "require('fs').readFileSync('f')", ""),
    )
    .await;
    assert_ne!(ran.code, 0);
    assert!(ran.error.contains("EFBIG"), "{ran:?}");

    // Streaming commands and copies: bounded memory; what takes longer
    // than its timeout ends within the timeout plus 1 s.
    let (ran, _) = timed(&mut c, exec_req("victim", "wc -c f; cp f g; wc -c g")).await;
    assert_eq!(ran.stdout, "1073741824 f\n1073741824 g\n", "{ran:?}");
    let (ran, _) = timed(&mut c, js_req("victim", "const fs = require('fs'); fs.copyFileSync('f', 'h'); export default () => fs.statSync('h').size", "")).await;
    assert_eq!(ran.result, "1073741824", "{ran:?}");
    // Writing the zeros out is bounded by the quota.
    let (ran, _) = timed(
        &mut c,
        with_timeout(exec_req("victim", "cat f > copy"), Duration::from_secs(30)),
    )
    .await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stderr.contains("No space left on device"), "{ran:?}");
    for script in [
        "md5sum f",
        "base64 f | wc -c",
        "cat f | wc -c",
        "tail -n 1 f | tee copy2",
    ] {
        let timeout = Duration::from_secs(3);
        let (ran, took) = timed(&mut c, with_timeout(exec_req("victim", script), timeout)).await;
        eprintln!("{script}: answered after {took:?} (timeout {timeout:?})");
        assert_eq!(ran.code, 124, "{script}: {ran:?}");
        assert!(
            took < timeout + Duration::from_secs(1),
            "{script} ended after {took:?}"
        );
    }
    // `cat z64 ×8 | wc -c`: 512 MiB through the pipeline.
    let (ran, took) = timed(
        &mut c,
        with_timeout(
            exec_req("victim", "cat z64 z64 z64 z64 z64 z64 z64 z64 | wc -c"),
            Duration::from_secs(120),
        ),
    )
    .await;
    eprintln!("cat z64 x8 | wc -c: {took:?}");
    assert_eq!(ran.stdout, "536870912\n", "{ran:?}");

    // While the victim's exec reads a terabyte, the other computer answers.
    let mut c2 = agent.client().await;
    let busy = tokio::spawn(async move {
        run(
            &mut c2,
            with_timeout(exec_req("victim", "sha256sum f"), Duration::from_secs(5)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, took) = timed(&mut c, exec_req("other", "echo ok")).await;
    assert_eq!(ok.stdout, "ok\n");
    eprintln!("the other computer's echo ok during sha256sum of a 1 GiB sparse file: {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "the other computer answered after {took:?}"
    );
    assert_eq!(busy.await.unwrap().code, 124);

    let peak = peak_rss(agent.pid());
    eprintln!(
        "agent peak RSS: base {} MiB, after the reproductions {} MiB (budget {} MiB)",
        base >> 20,
        peak >> 20,
        BUDGET >> 20
    );
    assert!(
        peak < base + BUDGET,
        "peak {peak} over base {base} + budget {BUDGET}"
    );
    assert!(agent.alive(), "the agent died");
    assert_eq!(sh(&mut c, "other", "echo ok").await.stdout, "ok\n");
    // Nothing the stopped `tail -n 1 f | tee copy2` started shows up
    // afterwards.
    let size = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.stat(pb::StatRequest {
                computer: "victim".into(),
                path: "copy2".into(),
                follow_symlinks: true,
            })
            .await
            .map(|r| r.into_inner().size)
        }
    };
    let first = size(&mut c).await.ok();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        size(&mut c).await.ok(),
        first,
        "the stopped exec kept writing"
    );
}

#[tokio::test]
async fn grep_is_linear_on_a_long_line() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "g", 1 << 30).await;
    let mut line = vec![b'a'; 64 << 20];
    line.extend_from_slice(b"needle");
    common::write(&mut c, "g", "long", pb::WriteMode::Truncate, &line)
        .await
        .unwrap();
    let start = Instant::now();
    let mut stream = c
        .grep(pb::GrepRequest {
            computer: "g".into(),
            path: "long".into(),
            pattern: "needle$".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut matches = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        matches.push(m);
    }
    let took = start.elapsed();
    eprintln!("grep over one 64 MiB line: {took:?}");
    // Lines are matched on their first 16 MiB: the needle past it is not
    // seen, and the scan ends in linear time.
    assert!(matches.is_empty());
    assert!(took < Duration::from_secs(10), "grep took {took:?}");
    // A match within the first 16 MiB of a long line is found.
    let mut line = b"needle".to_vec();
    line.extend(vec![b'a'; 40 << 20]);
    common::write(&mut c, "g", "long2", pb::WriteMode::Truncate, &line)
        .await
        .unwrap();
    let mut stream = c
        .grep(pb::GrepRequest {
            computer: "g".into(),
            path: "long2".into(),
            pattern: "^needle".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let m = stream.message().await.unwrap().expect("a match");
    assert_eq!(m.line_number, 1);
}
