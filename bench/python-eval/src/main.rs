//! `python3` in the shell runtime, measured over a real engine database in
//! this process: start-up time, a file/json/re/pathlib/csv script whose
//! files cross between Python and the shell through the engine, common
//! modules, memory per run, timeouts, memory bombs and network access.
//!
//! Build with exactly one interpreter:
//!
//! ```text
//! cargo run -p python-eval --features cpython -- [--runs N] [--only SECTION,...]
//! cargo run -p python-eval --features python  -- [--runs N] [--only SECTION,...]
//! ```
//!
//! Sections: `startup`, `script`, `modules`, `limits`, `network`. Results
//! are printed as Markdown. `bench/python-eval/run.sh` builds both and runs
//! them, also under a 4 GiB address-space limit as the agent's isolation
//! tests run the agent. Numbers and the decision: docs/shell-runtime.md,
//! section "python3".

mod measure;
mod scenarios;

use anyhow::{Context, Result, bail};

/// Which interpreter this binary was built with.
pub const VARIANT: &str = if cfg!(feature = "cpython") {
    "cpython (CPython 3.14 on wasmtime/Pulley)"
} else if cfg!(feature = "python") {
    "python (monty 0.0.19)"
} else {
    "none (python3 is command not found)"
};

const SECTIONS: &[&str] = &["startup", "script", "modules", "limits", "network"];

struct Args {
    runs: usize,
    only: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        runs: 100,
        only: SECTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => {
                let n = it.next().context("--runs needs a number")?;
                args.runs = n.parse().with_context(|| format!("--runs {n}"))?;
                if args.runs == 0 {
                    bail!("--runs must be at least 1");
                }
            }
            "--only" => {
                let list = it.next().context("--only needs a list of sections")?;
                args.only = list.split(',').map(str::to_string).collect();
                for s in &args.only {
                    if !SECTIONS.contains(&s.as_str()) {
                        bail!("unknown section {s:?}; sections: {}", SECTIONS.join(", "));
                    }
                }
            }
            other => bail!(
                "unknown argument {other:?}; usage: python-eval [--runs N] [--only SECTION,...]"
            ),
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let limit = measure::address_space_limit();
    println!("# python3 evaluation: {VARIANT}");
    println!();
    println!(
        "address-space limit: {}; process at start: {}",
        limit.map_or("none".into(), measure::mib),
        measure::Mem::now().describe()
    );
    for section in &args.only {
        println!();
        match section.as_str() {
            "startup" => scenarios::startup(args.runs).await?,
            "script" => scenarios::script(args.runs.min(20)).await?,
            "modules" => scenarios::modules().await?,
            "limits" => scenarios::limits().await?,
            "network" => scenarios::network().await?,
            _ => unreachable!("checked by parse_args"),
        }
    }
    Ok(())
}
