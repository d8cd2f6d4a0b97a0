//! Exec latency of the in-process shell against `bash -c` spawned as a
//! process, on the same machine in the same run.
//!
//! ```text
//! cargo run --release -p agentcomputer-shell --example shell_latency [runs]
//! ```
//! Each scenario runs `runs` times (default 1000) after a warm-up; one exec
//! is measured end to end: `run()` on a fresh engine-backed computer
//! (thread, interpreter build, script, output delivered) versus
//! `bash -c` (fork/exec, script, output read). The file scenario runs
//! bash in a directory of the host filesystem.

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_shell::{ExecRequest, run};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const SCENARIOS: &[(&str, &str)] = &[
    ("pipe", "echo hi | wc -c"),
    (
        "files",
        "for i in $(seq 1 20); do echo line $i > f$i.txt; done; cat f*.txt | wc -l; rm f*.txt",
    ),
    (
        "loop",
        "n=0; for ((i=0;i<1000;i++)); do n=$((n+i)); done; echo $n",
    ),
];

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    let total: Duration = samples.iter().sum();
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        mean: total / samples.len() as u32,
    }
}

async fn shell_once(fs: &Fs, script: &str) -> (Duration, Vec<u8>) {
    let (tx, mut rx) = mpsc::channel(16);
    let req = ExecRequest {
        script: script.into(),
        ..ExecRequest::default()
    };
    let start = Instant::now();
    let collect = async {
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            if let agentcomputer_shell::OutputChunk::Stdout(b) = chunk {
                out.extend(b);
            }
        }
        out
    };
    let (outcome, out) = tokio::join!(run(fs.clone(), req, tx, CancellationToken::new()), collect);
    let elapsed = start.elapsed();
    assert_eq!(outcome.exit_code, 0, "{outcome:?}");
    (elapsed, out)
}

fn bash_once(dir: &std::path::Path, script: &str) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let out = Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .expect("spawn bash");
    let elapsed = start.elapsed();
    assert!(out.status.success());
    (elapsed, out.stdout)
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default()).expect("engine");
    let host_dir = tempfile::tempdir().expect("tempdir");

    println!("runs per scenario: {runs}");
    println!(
        "{:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "scenario",
        "shell p50",
        "shell p99",
        "shell mean",
        "bash p50",
        "bash p99",
        "bash mean",
        "p50 x"
    );
    for (name, script) in SCENARIOS {
        // Same output from both, and warm caches for both.
        let (_, ours) = shell_once(&fs, script).await;
        let (_, theirs) = bash_once(host_dir.path(), script);
        assert_eq!(
            String::from_utf8_lossy(&ours).trim(),
            String::from_utf8_lossy(&theirs).trim(),
            "{name}"
        );
        for _ in 0..runs / 20 {
            shell_once(&fs, script).await;
            bash_once(host_dir.path(), script);
        }
        let mut shell = Vec::with_capacity(runs);
        let mut bash = Vec::with_capacity(runs);
        for _ in 0..runs {
            shell.push(shell_once(&fs, script).await.0);
            bash.push(bash_once(host_dir.path(), script).0);
        }
        let (s, b) = (stats(shell), stats(bash));
        println!(
            "{:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8.2}",
            name,
            us(s.p50),
            us(s.p99),
            us(s.mean),
            us(b.p50),
            us(b.p99),
            us(b.mean),
            s.p50.as_secs_f64() / b.p50.as_secs_f64()
        );
    }
    println!("(microseconds; p50 x = shell p50 / bash p50, below 1 means the shell is faster)");
}
