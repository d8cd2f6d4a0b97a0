//! Cold-exec latency of the JavaScript runtime against Node.
//!
//! `cargo run --release -p agentcomputer-js --example js_bench [runs]`
//!
//! Two workloads: a trivial module, and one that reads 100 files and
//! returns a JSON summary. Each is measured as
//! * `agentcomputer-js`: `run()` with a fresh QuickJS runtime per exec, over
//!   a real engine database (includes thread start and teardown);
//! * `node spawn`: a new `node` process per exec, files on the host disk;
//! * `node vm`: `vm.runInNewContext` in one long-lived node process (a new
//!   context per call, timed inside node).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentcomputer_fs::{Fs, Limits, Owner, ROOT_INO, WriteMode};
use agentcomputer_js::{JsRequest, OutputChunk};
use tokio_util::sync::CancellationToken;

const FILES: usize = 100;

const TRIVIAL: &str = "export default () => 1;";

const READ_100: &str = r#"
import { readdir, readFile } from 'node:fs/promises';
export default async () => {
  const names = await readdir('/workspace/data');
  let bytes = 0, lines = 0;
  for (const n of names) {
    const text = await readFile('/workspace/data/' + n, 'utf8');
    bytes += text.length;
    lines += text.split('\n').length - 1;
  }
  return { files: names.length, bytes, lines };
};
"#;

fn file_text(i: usize) -> String {
    (0..20)
        .map(|l| format!("file {i} line {l}: some text to read\n"))
        .collect()
}

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
    n: usize,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let n = v.len();
    let pick = |q: f64| v[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
    Stats {
        p50: pick(0.50),
        p99: pick(0.99),
        mean: v.iter().sum::<Duration>() / n as u32,
        n,
    }
}

async fn bench_ours(fs: &Fs, source: &str, runs: usize) -> (Stats, serde_json::Value) {
    let mut times = Vec::with_capacity(runs);
    let mut last = serde_json::Value::Null;
    for _ in 0..runs {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<OutputChunk>(16);
        let req = JsRequest {
            source: source.to_string(),
            ..JsRequest::default()
        };
        let t = Instant::now();
        let out = agentcomputer_js::run(fs.clone(), req, tx, CancellationToken::new()).await;
        times.push(t.elapsed());
        while rx.try_recv().is_ok() {}
        assert_eq!(out.exit_code, 0, "{:?}", out.error);
        last = out.result.unwrap_or_default();
    }
    (stats(times), last)
}

fn bench_node_spawn(script: &Path, runs: usize) -> Option<(Stats, String)> {
    let mut times = Vec::with_capacity(runs);
    let mut last = String::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = Command::new("node").arg(script).output().ok()?;
        times.push(t.elapsed());
        if !out.status.success() {
            return None;
        }
        last = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    Some((stats(times), last))
}

/// Runs `code` through `vm.runInNewContext` `runs` times inside one node
/// process; node reports per-call nanoseconds.
fn bench_node_vm(dir: &Path, code: &str, runs: usize) -> Option<Stats> {
    let driver = format!(
        r#"
const vm = require('vm');
const fs = require('fs');
const code = {code:?};
const sandbox = () => ({{ readdirSync: fs.readdirSync, readFileSync: fs.readFileSync, DATA: {data:?} }});
const out = [];
for (let i = 0; i < {runs}; i++) {{
  const t = process.hrtime.bigint();
  const r = vm.runInNewContext(code, sandbox());
  JSON.stringify(r);
  out.push(Number(process.hrtime.bigint() - t));
}}
console.log(JSON.stringify(out));
"#,
        data = dir.join("data").to_string_lossy(),
    );
    let out = Command::new("node").arg("-e").arg(driver).output().ok()?;
    if !out.status.success() {
        eprintln!("node vm failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let ns: Vec<u64> = serde_json::from_slice(&out.stdout).ok()?;
    Some(stats(ns.into_iter().map(Duration::from_nanos).collect()))
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn row(workload: &str, runtime: &str, s: &Stats) {
    println!(
        "| {workload:<14} | {runtime:<28} | {:>6} | {:>10} | {:>10} | {:>10} |",
        s.n,
        us(s.p50),
        us(s.p99),
        us(s.mean)
    );
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let node_runs = (runs / 10).clamp(20, 200);
    let dir = tempfile::tempdir().expect("temp dir");
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default()).expect("engine");
    let host_data = dir.path().join("data");
    std::fs::create_dir(&host_data).expect("host data dir");
    let data = fs
        .mkdir(ROOT_INO, b"data", 0o755, Owner::ROOT)
        .expect("mkdir");
    for i in 0..FILES {
        let name = format!("f{i:03}.txt");
        let text = file_text(i);
        fs.write_all(
            data.ino,
            name.as_bytes(),
            text.as_bytes(),
            WriteMode::Truncate,
            0o644,
            Owner::ROOT,
        )
        .expect("write");
        std::fs::write(host_data.join(&name), &text).expect("host write");
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let first = Instant::now();
    agentcomputer_js::warm_up();
    let warm = first.elapsed();

    let (trivial, r1) = rt.block_on(bench_ours(&fs, TRIVIAL, runs));
    let (read, r2) = rt.block_on(bench_ours(&fs, READ_100, runs));

    let trivial_js = dir.path().join("trivial.js");
    std::fs::write(&trivial_js, "console.log(JSON.stringify(1));\n").expect("script");
    let read_js = dir.path().join("read100.js");
    std::fs::write(
        &read_js,
        format!(
            "const fs = require('fs/promises');\n(async () => {{\n  const d = {:?};\n  const names = await fs.readdir(d);\n  let bytes = 0, lines = 0;\n  for (const n of names) {{ const t = await fs.readFile(d + '/' + n, 'utf8'); bytes += t.length; lines += t.split('\\n').length - 1; }}\n  console.log(JSON.stringify({{ files: names.length, bytes, lines }}));\n}})();\n",
            host_data.to_string_lossy()
        ),
    )
    .expect("script");
    let spawn_trivial = bench_node_spawn(&trivial_js, node_runs);
    let spawn_read = bench_node_spawn(&read_js, node_runs);
    let vm_trivial = bench_node_vm(dir.path(), "1", runs);
    let vm_read = bench_node_vm(
        dir.path(),
        "(() => { const names = readdirSync(DATA); let bytes = 0, lines = 0; for (const n of names) { const t = readFileSync(DATA + '/' + n, 'utf8'); bytes += t.length; lines += t.split('\\n').length - 1; } return { files: names.length, bytes, lines }; })()",
        runs,
    );

    println!("built-in modules compiled once in {}", us(warm));
    println!("results: trivial={r1} read100={r2}");
    if let Some((_, n)) = &spawn_read {
        println!("node spawn read100 printed {n}");
    }
    println!();
    println!(
        "| workload       | runtime                      |   runs |        p50 |        p99 |       mean |"
    );
    println!(
        "|----------------|------------------------------|-------:|-----------:|-----------:|-----------:|"
    );
    row("trivial", "agentcomputer-js (cold)", &trivial);
    if let Some((s, _)) = &spawn_trivial {
        row("trivial", "node spawn", s);
    }
    if let Some(s) = &vm_trivial {
        row("trivial", "node vm.runInNewContext", s);
    }
    row("read 100 files", "agentcomputer-js (cold)", &read);
    if let Some((s, _)) = &spawn_read {
        row("read 100 files", "node spawn", s);
    }
    if let Some(s) = &vm_read {
        row("read 100 files", "node vm.runInNewContext", s);
    }
}
