//! `brush-eval`: the shell runtime (`agentcomputer_shell::run`, bashkit over
//! an engine database) next to brush-core (`brush_core::Shell` with
//! brush-builtins' bash set) in one process.
//!
//! Measures, per interpreter: cold start (a new shell for every script, as
//! the runtime makes one per exec) of `echo hi` and of a 1000-step
//! arithmetic loop, as p50/p99 over `--iterations`; the heap high-water
//! mark of one `echo hi` (both) and the heap and RSS kept per idle shell
//! (brush, which can keep a shell between scripts); and probes what matters for running several computers'
//! shells in one process: cwd, environment and umask isolation, where a
//! redirection writes, and whether a runaway script stops at a timeout.
//!
//! Build and run (not part of the workspace build):
//! `cargo run -p brush-eval --features brush -- --json target/brush-eval.json`;
//! `--features bench` builds the runtime's side alone (for the binary size
//! delta). Results: `docs/shell-runtime.md`, "Interpreter choice".

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_shell::{ExecRequest, OutputChunk, run};
use anyhow::{Context, Result, ensure};
use brush_eval::{Counting, Summary};
use clap::Parser;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: Counting<mimalloc::MiMalloc> = Counting::new(mimalloc::MiMalloc);

#[derive(Parser)]
#[command(about = "Cold start and memory: the shell runtime (bashkit) vs brush-core, in-process")]
struct Args {
    /// Timed runs per interpreter and script (after the warm-up).
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Untimed runs first (lazy statics, allocator pages, thread pool).
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Shells alive at once for the memory measurement.
    #[arg(long, default_value_t = 100)]
    shells: usize,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Scripts timed on both interpreters: name, text, expected stdout. Both
/// use only builtins, so neither interpreter starts a process.
const SCRIPTS: &[(&str, &str, &str)] = &[
    ("echo hi", "echo hi", "hi\n"),
    (
        "loop 1000",
        "i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; echo $i",
        "1000\n",
    ),
];

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(bench(&args))?;
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    if let Some(p) = &args.json {
        std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
    }
    // A runaway brush script that ignored its timeout may still spin on a
    // worker thread (see the cancellation probe); end the process here.
    std::process::exit(0)
}

async fn bench(args: &Args) -> Result<Value> {
    let dir = tempfile::tempdir()?;
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default())
        .map_err(|e| anyhow::anyhow!("create engine: {e}"))?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = json!({
        "iterations": args.iterations,
        "warmup": args.warmup,
        "shells": args.shells,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_start": load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    });

    let mut runtime = serde_json::Map::new();
    for (name, script, want) in SCRIPTS {
        let first = runtime_once(&fs, script, want).await?;
        for _ in 0..args.warmup {
            runtime_once(&fs, script, want).await?;
        }
        let mut samples = Vec::with_capacity(args.iterations);
        for _ in 0..args.iterations {
            samples.push(runtime_once(&fs, script, want).await?);
        }
        runtime.insert(name.to_string(), latency(first, &samples));
    }
    runtime.insert("memory".into(), runtime_memory(&fs, args.shells).await?);
    runtime.insert("timeout".into(), runtime_timeout(&fs).await?);
    out["agentcomputer-shell"] = Value::Object(runtime);

    #[cfg(feature = "brush")]
    {
        out["brush-core"] = brush::bench(args, dir.path()).await?;
    }
    out["loadavg_end"] = json!(
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// `{first_ms, p50_ms, p99_ms, max_ms, n}` of one interpreter and script.
fn latency(first: Duration, samples: &[Duration]) -> Value {
    match Summary::of(samples) {
        Some(s) => json!({
            "first_ms": ms(first), "p50_ms": ms(s.p50), "p99_ms": ms(s.p99),
            "max_ms": ms(s.max), "n": s.n,
        }),
        None => json!({ "first_ms": ms(first), "n": 0 }),
    }
}

/// One exec of `script` on the computer `fs`, as the node agent makes it:
/// a new bashkit interpreter, output through the exec's channel. Returns
/// the time until the exec finished and its output was drained.
async fn runtime_once(fs: &Fs, script: &str, want: &str) -> Result<Duration> {
    let t = Instant::now();
    let (stdout, code, error) = runtime_exec(fs, script, Duration::from_secs(30)).await;
    let el = t.elapsed();
    ensure!(
        code == 0 && stdout == want.as_bytes(),
        "runtime: {script:?} gave {code} {:?} {error:?}",
        String::from_utf8_lossy(&stdout)
    );
    Ok(el)
}

async fn runtime_exec(fs: &Fs, script: &str, timeout: Duration) -> (Vec<u8>, i32, Option<String>) {
    let (tx, mut rx) = mpsc::channel(64);
    let req = ExecRequest {
        script: script.into(),
        timeout,
        ..ExecRequest::default()
    };
    let collect = async {
        let mut o = Vec::new();
        while let Some(c) = rx.recv().await {
            if let OutputChunk::Stdout(b) = c {
                o.extend_from_slice(&b);
            }
        }
        o
    };
    let (outcome, stdout) =
        tokio::join!(run(fs.clone(), req, tx, CancellationToken::new()), collect);
    (stdout, outcome.exit_code, outcome.error)
}

/// Heap above the idle baseline while one exec of `echo hi` runs (the
/// allocator's high-water mark; execs run one at a time here): the
/// interpreter, its parsed script and the exec's buffers. Median of `n`.
async fn runtime_memory(fs: &Fs, n: usize) -> Result<Value> {
    runtime_exec(fs, "echo warm", Duration::from_secs(10)).await;
    let mut peaks = Vec::with_capacity(n);
    for _ in 0..n {
        let base = GLOBAL.live_bytes();
        GLOBAL.reset_peak();
        let (o, code, err) = runtime_exec(fs, "echo hi", Duration::from_secs(30)).await;
        ensure!(
            code == 0 && o == b"hi\n",
            "runtime memory run: {code} {err:?}"
        );
        peaks.push(GLOBAL.peak_bytes() - base);
    }
    Ok(
        json!({ "what": "peak heap of one `echo hi` exec above the idle baseline",
               "peak_heap_kib_p50": median_kib(&mut peaks) }),
    )
}

/// Median of `v` in KiB.
fn median_kib(v: &mut [i64]) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        0.0
    } else {
        (v[v.len() / 2] as f64 / 1024.0).round()
    }
}

/// A script that never ends, with a 200 ms exec timeout: the time until
/// `run` returned and its exit code.
async fn runtime_timeout(fs: &Fs) -> Result<Value> {
    let t = Instant::now();
    let (_, code, _) = runtime_exec(fs, "while :; do :; done", Duration::from_millis(200)).await;
    Ok(json!({ "script": "while :; do :; done", "timeout_ms": 200,
               "returned_after_ms": ms(t.elapsed()), "exit_code": code }))
}

#[cfg(feature = "brush")]
mod brush {
    //! brush-core's side: a `brush_core::Shell` per script, built as
    //! brush-shell builds its own (brush-builtins' bash set, no profile or
    //! rc files) but without inheriting this process's environment.

    use super::{Args, GLOBAL, latency, median_kib, ms};
    use anyhow::{Context, Result, ensure};
    use brush_builtins::{BuiltinSet, ShellBuilderExt as _};
    use brush_core::openfiles::{self, OpenFile};
    use brush_core::{ProfileLoadBehavior, RcLoadBehavior, Shell, SourceInfo};
    use brush_eval::rss_bytes;
    use serde_json::{Value, json};
    use std::collections::HashMap;
    use std::io::Read as _;
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn per_shell(n: usize, heap: i64, rss: i64, what: &str) -> Value {
        json!({
            "what": what, "shells": n,
            "heap_per_shell_kib": (heap as f64 / n as f64 / 1024.0).round(),
            "rss_per_shell_kib": (rss as f64 / n as f64 / 1024.0).round(),
        })
    }

    /// Whether `path` exists on the host filesystem.
    fn on_host(path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok()
    }

    /// A new shell in `cwd` with fds 0-2 as given.
    async fn shell(cwd: &Path, stdout: OpenFile, stderr: OpenFile) -> Result<Shell> {
        let fds = HashMap::from([(0, openfiles::null()?), (1, stdout), (2, stderr)]);
        Shell::builder()
            .do_not_inherit_env(true)
            .profile(ProfileLoadBehavior::Skip)
            .rc(RcLoadBehavior::Skip)
            .working_dir(cwd.to_path_buf())
            .fds(fds)
            .default_builtins(BuiltinSet::BashMode)
            .build()
            .await
            .context("brush shell")
    }

    /// Runs `script` on a new shell in `cwd`: (build time, total time,
    /// stdout, stderr, exit code). Output goes through OS pipes, drained
    /// once the shell (holding their write ends) is dropped.
    async fn once(cwd: &Path, script: &str) -> Result<(Duration, Duration, Vec<u8>, Vec<u8>, u8)> {
        let t = Instant::now();
        let (mut r, w) = std::io::pipe()?;
        let (mut er, ew) = std::io::pipe()?;
        let mut sh = shell(cwd, w.into(), ew.into()).await?;
        let built = t.elapsed();
        let params = sh.default_exec_params();
        let res = sh
            .run_string(script, &SourceInfo::from("-c"), &params)
            .await
            .context("run_string")?;
        drop(params);
        drop(sh);
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        let mut err = Vec::new();
        er.read_to_end(&mut err)?;
        Ok((built, t.elapsed(), out, err, u8::from(&res.exit_code)))
    }

    async fn timed(cwd: &Path, script: &str, want: &str) -> Result<(Duration, Duration)> {
        let (b, t, out, err, code) = once(cwd, script).await?;
        ensure!(
            code == 0 && out == want.as_bytes(),
            "brush: {script:?} gave {code} {:?} {:?}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
        Ok((b, t))
    }

    pub async fn bench(args: &Args, tmp: &Path) -> Result<Value> {
        let cwd = tmp.join("brush");
        std::fs::create_dir_all(&cwd)?;
        let mut o = serde_json::Map::new();
        for (name, script, want) in super::SCRIPTS {
            let (_, first) = timed(&cwd, script, want).await?;
            for _ in 0..args.warmup {
                timed(&cwd, script, want).await?;
            }
            let mut total = Vec::with_capacity(args.iterations);
            let mut build = Vec::with_capacity(args.iterations);
            for _ in 0..args.iterations {
                let (b, t) = timed(&cwd, script, want).await?;
                build.push(b);
                total.push(t);
            }
            let mut v = latency(first, &total);
            let b = brush_eval::Summary::of(&build).context("no samples")?;
            v["build_p50_ms"] = json!(ms(b.p50));
            v["build_p99_ms"] = json!(ms(b.p99));
            o.insert(name.to_string(), v);
        }
        o.insert("memory".into(), memory(&cwd, args.shells).await?);
        o.insert("probes".into(), probes(tmp).await?);
        o.insert("timeout".into(), timeout_probe(&cwd));
        Ok(Value::Object(o))
    }

    /// The peak heap of one `echo hi` on a new shell (median of `n`, as for
    /// the runtime), then the live heap and RSS per idle shell: `n` shells
    /// built and kept after each ran `echo hi` (brush can keep a shell
    /// between scripts; that state is what a computer would hold).
    async fn memory(cwd: &Path, n: usize) -> Result<Value> {
        let mut peaks = Vec::with_capacity(n);
        for _ in 0..n {
            let base = GLOBAL.live_bytes();
            GLOBAL.reset_peak();
            timed(cwd, "echo hi", "hi\n").await?;
            peaks.push(GLOBAL.peak_bytes() - base);
        }
        let peak = median_kib(&mut peaks);
        let heap0 = GLOBAL.live_bytes();
        let rss0 = rss_bytes().unwrap_or(0);
        let mut shells = Vec::with_capacity(n);
        for _ in 0..n {
            let mut sh = shell(cwd, openfiles::null()?, openfiles::null()?).await?;
            let params = sh.default_exec_params();
            sh.run_string("echo hi", &SourceInfo::from("-c"), &params)
                .await?;
            shells.push(sh);
        }
        let heap1 = GLOBAL.live_bytes();
        let rss1 = rss_bytes().unwrap_or(0);
        drop(shells);
        let mut v = per_shell(
            n,
            heap1 - heap0,
            rss1 as i64 - rss0 as i64,
            "idle shells kept after `echo hi`",
        );
        v["peak_heap_kib_p50"] = json!(peak);
        v["peak_what"] = json!("peak heap of one `echo hi` (new shell) above the idle baseline");
        Ok(v)
    }

    /// Two shells in one process: does one's `cd`, `export`, `umask` reach
    /// the other, and where does `echo x > f` write?
    async fn probes(tmp: &Path) -> Result<Value> {
        let a = tmp.join("a");
        let b = tmp.join("b");
        std::fs::create_dir_all(a.join("sub"))?;
        std::fs::create_dir_all(&b)?;
        let out = |r: (Duration, Duration, Vec<u8>, Vec<u8>, u8)| {
            String::from_utf8_lossy(&r.2).trim().to_string()
        };
        // cwd: A changes directory, B still reports its own.
        let (ra, rb) = tokio::join!(once(&a, "cd sub; pwd"), once(&b, "pwd"));
        let cwd_isolated =
            out(ra?) == a.join("sub").display().to_string() && out(rb?) == b.display().to_string();
        // environment: A exports, B does not see it, nor does this process.
        let (ra, rb) = tokio::join!(
            once(&a, "export BRUSH_EVAL_PROBE=1; echo $BRUSH_EVAL_PROBE"),
            once(&b, "echo ${BRUSH_EVAL_PROBE-unset}")
        );
        let env_isolated = out(ra?) == "1"
            && out(rb?) == "unset"
            && std::env::var_os("BRUSH_EVAL_PROBE").is_none();
        // umask: A sets it, then a new shell B reads it.
        let before = out(once(&b, "umask").await?);
        once(&a, "umask 0077").await?;
        let after = out(once(&b, "umask").await?);
        once(&a, &format!("umask {before}")).await?;
        // redirection: relative to the shell's cwd, on the host filesystem.
        once(&a, "echo x > redirected.txt").await?;
        let redirect_on_host = on_host(&a.join("redirected.txt"));
        Ok(json!({
            "cwd_isolated": cwd_isolated,
            "env_isolated": env_isolated,
            "umask_other_shell_before": before,
            "umask_other_shell_after_umask_0077": after,
            "umask_isolated": before == after,
            "redirect_wrote_host_file": redirect_on_host,
        }))
    }

    /// `while :; do :; done` under `tokio::time::timeout(200 ms)` on its own
    /// runtime thread: the time until the timeout dropped the script, or
    /// `null` if it had not after 3 s (the script never yields, so the
    /// timer is never polled; the thread keeps spinning until exit).
    fn timeout_probe(cwd: &Path) -> Value {
        let cwd = cwd.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = Instant::now();
        std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(_) => return,
            };
            let r = rt.block_on(async {
                let mut sh = shell(&cwd, openfiles::null()?, openfiles::null()?).await?;
                let params = sh.default_exec_params();
                let source = SourceInfo::from("-c");
                let fut = sh.run_string("while :; do :; done", &source, &params);
                anyhow::Ok(
                    tokio::time::timeout(Duration::from_millis(200), fut)
                        .await
                        .is_err(),
                )
            });
            let _ = tx.send((t.elapsed(), r.ok()));
        });
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok((el, timed_out)) => json!({
                "script": "while :; do :; done", "timeout_ms": 200,
                "returned_after_ms": ms(el), "timed_out": timed_out,
            }),
            Err(_) => json!({
                "script": "while :; do :; done", "timeout_ms": 200,
                "returned_after_ms": null,
                "note": "still running after 3 s: dropping the future never happens because it never yields",
            }),
        }
    }
}
