//! Streamed stdin many times larger than the exec's memory budget, fed to
//! scripts whose first command does not stream its stdin: the run gives
//! the right answer or a clear memory-limit refusal, and the process's
//! peak resident memory (VmHWM, reset before each run) grows by far less
//! than the input. One test, so no other test of this binary allocates
//! while it measures. Real engine databases.

mod common;

use agentcomputer_shell::{ExecRequest, ShellLimits, StdinStream};
use common::{Computer, Run};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The exec's memory budget here (8 MiB).
const BUDGET: u64 = 8 << 20;

/// The streamed input (128 MiB: sixteen budgets).
const INPUT: u64 = 128 << 20;

/// Bytes per streamed chunk, as ExecStream delivers them.
const CHUNK: usize = 64 * 1024;

/// The most the process's peak may grow during one run: a quarter of the
/// input. Holding the input once (as bashkit did, and then copying it)
/// passes it; streaming through the engine stays far below.
const PEAK_GROWTH: u64 = INPUT / 4;

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field}"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

/// Resets the process's peak resident memory to its current value.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
}

/// A tar archive of one file `name` of `len` zero bytes, in `CHUNK`s made
/// as they are sent (the test never holds it).
fn tar_of_zeros(name: &str, len: u64) -> impl Iterator<Item = Vec<u8>> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_size(len);
    h.set_mtime(1_700_000_000);
    h.set_cksum();
    let header = h.as_bytes().to_vec();
    // Data padded to 512 bytes, then two zero blocks: all zeros.
    let zeros = len.div_ceil(512) * 512 + 1024;
    let full = zeros / CHUNK as u64;
    let last = (zeros % CHUNK as u64) as usize;
    std::iter::once(header)
        .chain((0..full).map(|_| vec![0u8; CHUNK]))
        .chain((last > 0).then(|| vec![0u8; last]))
}

/// `len` bytes of `x`, in `CHUNK`s made as they are sent.
fn bytes(len: u64) -> impl Iterator<Item = Vec<u8>> {
    (0..len / CHUNK as u64).map(|_| vec![b'x'; CHUNK])
}

/// Runs `script` on `chunks` streamed as ExecStream does, under
/// [`BUDGET`]; the run, how long it took and how much the process's peak
/// resident memory grew during it.
async fn measured(
    c: &Computer,
    script: &str,
    chunks: impl Iterator<Item = Vec<u8>> + Send + 'static,
) -> (Run, Duration, u64) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let sender = tokio::spawn(async move {
        for chunk in chunks {
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let req = ExecRequest {
        script: script.into(),
        stdin_stream: StdinStream::new(rx),
        timeout: Duration::from_secs(300),
        ..ExecRequest::default()
    };
    let limits = ShellLimits {
        memory_bytes: BUDGET,
        ..ShellLimits::default()
    };
    reset_peak();
    let before = status_bytes("VmRSS:");
    let began = Instant::now();
    let run = common::exec_with_limits(&c.fs, req, CancellationToken::new(), limits).await;
    let took = began.elapsed();
    let growth = status_bytes("VmHWM:").saturating_sub(before);
    sender.abort();
    eprintln!(
        "{script:?}: exit {}, {took:?}, peak grew {} MiB",
        run.code(),
        growth >> 20
    );
    (run, took, growth)
}

#[tokio::test(flavor = "current_thread")]
async fn streamed_input_past_the_budget_stays_bounded_when_the_first_command_does_not_stream() {
    let c = Computer::new();

    // The first command leaves stdin alone: `tar` streams the archive as
    // after `cd d`.
    let (run, _, growth) = measured(
        &c,
        "mkdir -p d && tar x -C d && stat -c %s d/big.bin",
        tar_of_zeros("big.bin", INPUT),
    )
    .await;
    assert_eq!(run.ok(), format!("{INPUT}\n"));
    assert!(growth < PEAK_GROWTH, "peak grew {growth} bytes");

    // Commands that take the rest of stdin whole (a function call, `xargs`)
    // are refused at the budget, naming it, as soon as what they gathered
    // passes it.
    for script in ["f() { :; }; f; wc -c", "xargs echo | wc -c"] {
        let (run, took, growth) = measured(&c, script, bytes(INPUT)).await;
        assert_eq!(run.code(), agentcomputer_shell::EXIT_LIMIT, "{script}");
        let limit = format!("memory limit of {BUDGET} bytes exceeded");
        assert!(run.stderr().contains(&limit), "{script}: {}", run.stderr());
        assert!(growth < PEAK_GROWTH, "{script}: peak grew {growth} bytes");
        assert!(took < Duration::from_secs(60), "{script}: {took:?}");
    }

    // `read` takes a line at a time: a loop over twice the budget passes.
    let lines = || {
        (0..2 * BUDGET / CHUNK as u64).map(|_| {
            let mut chunk = vec![b'y'; CHUNK];
            for at in (4095..CHUNK).step_by(4096) {
                chunk[at] = b'\n';
            }
            chunk
        })
    };
    let script = "n=0; while read -r l; do n=$((n+1)); done; echo $n";
    let (run, _, growth) = measured(&c, script, lines()).await;
    assert_eq!(run.ok(), format!("{}\n", 2 * BUDGET / 4096));
    assert!(growth < PEAK_GROWTH, "peak grew {growth} bytes");

    // bashkit's `grep` streams, also after the command it feeds ended.
    let (run, _, growth) = measured(&c, "grep -c zzz | head -n1", lines()).await;
    assert_eq!(run.stdout(), "0\n");
    assert!(growth < PEAK_GROWTH, "peak grew {growth} bytes");
}
