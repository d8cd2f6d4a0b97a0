//! Shell speed benchmark: typical agent scripts, each run through the shell
//! runtime in-process, the same runtime through the node agent's gRPC API,
//! just-bash in a warm node process, and GNU bash spawned per run.
//!
//! ```text
//! bash bench/shell/run.sh [--reps 5] [--only tree,jq]
//! ```
//!
//! Input files are written into each target's filesystem before the clock
//! starts (and again before every run of a script that changes them). Every
//! target runs each script once to warm up, then the repetitions go round
//! the targets in turn, so a change in machine load hits all of them alike.
//! Prints a table of medians and writes `target/shell-bench.json`.

/// The node agent's allocator, so the in-process target runs the runtime
/// as the agent ships it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod data;
mod report;
mod scenarios;
mod targets;

use anyhow::{Context, Result};
use clap::Parser;
use report::{Agreement, ScenarioResult, TargetResult, head, median, ms};
use serde_json::json;
use std::path::PathBuf;
use std::time::SystemTime;
use targets::{Ran, Target};

#[derive(Parser)]
#[command(about = "Times agent scripts in the shell runtime, just-bash and GNU bash")]
struct Args {
    /// Timed repetitions per script and target (after the warm-up runs).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Untimed warm-up runs per script and target.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Comma-separated scenario keys (tree, sed, jq, loop, sort); all if unset.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Comma-separated targets (ours, ours-grpc, just-bash, bash); all if unset.
    #[arg(long, value_delimiter = ',')]
    targets: Vec<String>,
    /// Directory holding `node_modules/just-bash`.
    #[arg(long, default_value = "target/shell-spec")]
    node_dir: PathBuf,
    /// The node agent binary for the gRPC target.
    #[arg(long, default_value = "target/release/node-agent")]
    agent: PathBuf,
    /// Where the engine databases, the agent's data and bash's files go
    /// (a local disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    work_dir: PathBuf,
    /// JSON report path.
    #[arg(long, default_value = "target/shell-bench.json")]
    out: PathBuf,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    let wanted = |t: &str| args.targets.is_empty() || args.targets.iter().any(|x| x == t);
    let work = tempfile::Builder::new()
        .prefix("shell-bench-")
        .tempdir_in(&args.work_dir)
        .with_context(|| format!("temp dir in {}", args.work_dir.display()))?;
    let load_start = loadavg();

    let mut targets = Vec::new();
    if wanted("ours") {
        let dir = work.path().join("ours");
        std::fs::create_dir_all(&dir)?;
        targets.push(Target::InProc(targets::inproc::InProc::new(dir)));
    }
    if wanted("ours-grpc") {
        let dir = work.path().join("agent");
        std::fs::create_dir_all(&dir)?;
        targets.push(Target::Grpc(
            targets::grpc::Grpc::start(&args.agent, &dir).await?,
        ));
    }
    if wanted("just-bash") {
        targets.push(Target::JustBash(targets::justbash::JustBash::start(
            &args.node_dir,
        )?));
    }
    if wanted("bash") {
        let dir = work.path().join("bash");
        std::fs::create_dir_all(&dir)?;
        targets.push(Target::Bash(targets::gnubash::GnuBash::new(dir)));
    }
    let names: Vec<&str> = targets.iter().map(Target::name).collect();

    let mut results = Vec::new();
    for sc in scenarios::all() {
        if !args.only.is_empty() && !args.only.iter().any(|k| k == sc.key) {
            continue;
        }
        eprintln!("== {}: {}", sc.key, sc.script);
        results.push(run_scenario(&mut targets, &sc, &args).await?);
    }

    println!();
    println!("{}", report::table(&results, &names));
    for r in &results {
        for t in &r.targets {
            if t.agreement == Agreement::Differs || t.status != 0 {
                println!(
                    "WARNING {} on {}: status {}, output differs from bash: {}\n  stdout: {:?}\n  stderr: {:?}",
                    t.target,
                    r.key,
                    t.status,
                    t.agreement == Agreement::Differs,
                    t.stdout_head.chars().take(300).collect::<String>(),
                    t.stderr_head.chars().take(300).collect::<String>()
                );
            }
        }
    }
    let load_end = loadavg();
    println!("load average: {load_start} at start, {load_end} at end");

    let doc = json!({
        "date": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        "reps": args.reps,
        "warmup": args.warmup,
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
        },
        "versions": {
            "bashkit": bashkit_version(),
            "just_bash": targets::justbash::version(&args.node_dir),
            "node": command_line("node", &["--version"]),
            "bash": command_line("bash", &["--version"]),
        },
        "scenarios": results,
    });
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

/// Stdout, status and the check script's stdout, as one comparable blob.
fn observed(ran: &Ran, check: Option<&Ran>) -> Vec<u8> {
    let mut v = ran.stdout.clone();
    v.extend_from_slice(format!("\n[status {}]\n", ran.status).as_bytes());
    if let Some(c) = check {
        v.extend_from_slice(&c.stdout);
        v.extend_from_slice(format!("\n[check status {}]\n", c.status).as_bytes());
    }
    v
}

async fn run_scenario(
    targets: &mut [Target],
    sc: &scenarios::Scenario,
    args: &Args,
) -> Result<ScenarioResult> {
    for t in targets.iter_mut() {
        t.load(sc)
            .await
            .with_context(|| format!("{} load", t.name()))?;
    }
    // First (warm-up) run of each target: its output is the one compared.
    let mut first = Vec::new();
    for t in targets.iter_mut() {
        let mut ran = None;
        for _ in 0..args.warmup.max(1) {
            if sc.mutates {
                t.reset(sc).await?;
            }
            let r = t.run(sc.script).await?;
            // The check inspects what the first run left.
            let check = match (&ran, sc.check) {
                (None, Some(script)) => Some(t.check(script).await?),
                _ => None,
            };
            ran.get_or_insert((r, check));
        }
        first.push(ran.expect("at least one warm-up run"));
    }
    let mut samples = vec![Vec::with_capacity(args.reps); targets.len()];
    for rep in 0..args.reps {
        for (i, t) in targets.iter_mut().enumerate() {
            if sc.mutates {
                t.reset(sc).await?;
            }
            let r = t.run(sc.script).await?;
            samples[i].push(ms(r.elapsed));
        }
        eprintln!("   rep {}/{}", rep + 1, args.reps);
    }
    let reference = targets
        .iter()
        .position(|t| t.name() == "bash")
        .map(|i| observed(&first[i].0, first[i].1.as_ref()));
    let mut results = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let (ran, check) = &first[i];
        let seen = observed(ran, check.as_ref());
        let agreement = match &reference {
            Some(r) => Agreement::compare(&seen, r),
            None => Agreement::Same,
        };
        let s = &samples[i];
        results.push(TargetResult {
            target: t.name().into(),
            median_ms: median(s),
            min_ms: s.iter().copied().fold(f64::INFINITY, f64::min),
            max_ms: s.iter().copied().fold(0.0, f64::max),
            samples_ms: s.clone(),
            status: ran.status,
            agreement,
            stdout_head: head(&ran.stdout),
            stderr_head: head(&ran.stderr),
        });
        eprintln!(
            "   {:<10} median {:>9.2} ms  status {}  output {:?}",
            t.name(),
            median(s),
            ran.status,
            agreement
        );
    }
    Ok(ScenarioResult {
        key: sc.key.into(),
        script: sc.script.into(),
        input_files: sc.files.len(),
        input_bytes: sc.files.iter().map(|(_, b)| b.len()).sum(),
        targets: results,
        ours_over_just_bash: None,
        ours_over_bash: None,
        grpc_over_just_bash: None,
    }
    .with_ratios())
}

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// First line a command prints, if it runs.
fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_string)
}

/// The bashkit version this binary was built with, from the workspace's
/// `Cargo.lock`.
fn bashkit_version() -> Option<String> {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"bashkit\"" {
            return lines
                .next()?
                .strip_prefix("version = \"")?
                .strip_suffix('"')
                .map(str::to_string);
        }
    }
    None
}
