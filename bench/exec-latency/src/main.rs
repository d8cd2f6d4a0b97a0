//! Exec latency of each runtime, end to end through the gRPC API of a
//! running node agent: the time from sending `Exec` to receiving its exit
//! event, as a client sees it. Prints a Markdown table of p50 and p99.

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use anyhow::{Context, bail};
use clap::Parser;
use pb::exec_event::Event;

#[derive(Parser)]
struct Args {
    /// The node agent's API.
    #[arg(long, default_value = "http://127.0.0.1:7433")]
    endpoint: String,
    /// Measured runs per case (after 10 % of that, at least 5, to warm up).
    #[arg(long, default_value_t = 200)]
    runs: usize,
}

struct Case {
    name: &'static str,
    computer: &'static str,
    runtime: pb::Runtime,
    script: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "shell `true`",
        computer: "bench",
        runtime: pb::Runtime::Shell,
        script: "true",
    },
    Case {
        name: "javascript `export default () => 1`",
        computer: "bench",
        runtime: pb::Runtime::Javascript,
        script: "export default () => 1",
    },
    Case {
        name: "container `true` (deny-all)",
        computer: "bench",
        runtime: pb::Runtime::Container,
        script: "true",
    },
    Case {
        name: "container `python3 -c 'print(1)'` (deny-all)",
        computer: "bench",
        runtime: pb::Runtime::Container,
        script: "python3 -c 'print(1)'",
    },
    Case {
        name: "container `true` (allow-list: netns + proxy)",
        computer: "bench-net",
        runtime: pb::Runtime::Container,
        script: "true",
    },
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut c = AgentComputerClient::connect(args.endpoint.clone())
        .await
        .with_context(|| format!("cannot connect to {}", args.endpoint))?;
    for (name, egress) in [
        ("bench", None),
        (
            "bench-net",
            Some(pb::Egress {
                mode: pb::EgressMode::AllowList as i32,
                hosts: vec!["example.com".into()],
                ..Default::default()
            }),
        ),
    ] {
        c.create_computer(pb::CreateComputerRequest {
            name: name.into(),
            egress,
            ..Default::default()
        })
        .await
        .with_context(|| format!("create computer {name}"))?;
    }
    let warm = (args.runs / 10).max(5);
    println!("| exec | p50 | p99 | runs |");
    println!("|---|---:|---:|---:|");
    for case in CASES {
        let mut times = Vec::with_capacity(args.runs);
        for i in 0..warm + args.runs {
            let t = exec(&mut c, case).await?;
            if i >= warm {
                times.push(t);
            }
        }
        let (p50, p99) = percentiles(&mut times);
        println!(
            "| {} | {} | {} | {} |",
            case.name,
            ms(p50),
            ms(p99),
            args.runs
        );
    }
    // The interpreter the sandbox runs (its PATH has no user-installed
    // shims such as pyenv's).
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("python3");
    for (name, program, argv) in [
        (
            "host `bash -c true` (no sandbox, for reference)",
            "/bin/bash",
            &["-c", "true"][..],
        ),
        (
            "host `python3 -c 'print(1)'` (no sandbox, for reference)",
            python,
            &["-c", "print(1)"][..],
        ),
    ] {
        let mut times = Vec::with_capacity(args.runs);
        for i in 0..warm + args.runs {
            let start = Instant::now();
            let out = tokio::process::Command::new(program)
                .args(argv)
                .output()
                .await?;
            if !out.status.success() {
                bail!("{program} failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            if i >= warm {
                times.push(start.elapsed());
            }
        }
        let (p50, p99) = percentiles(&mut times);
        println!("| {name} | {} | {} | {} |", ms(p50), ms(p99), args.runs);
    }
    Ok(())
}

/// One exec to its exit event; fails on a non-zero exit.
async fn exec(
    c: &mut AgentComputerClient<tonic::transport::Channel>,
    case: &Case,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut stream = c
        .exec(pb::ExecRequest {
            computer: case.computer.into(),
            runtime: case.runtime as i32,
            script: case.script.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut stderr = Vec::new();
    while let Some(ev) = stream.message().await? {
        match ev.event {
            Some(Event::Exit(e)) => {
                let took = start.elapsed();
                if e.code != 0 {
                    bail!(
                        "{}: exit {} {} {}",
                        case.name,
                        e.code,
                        e.error,
                        String::from_utf8_lossy(&stderr)
                    );
                }
                return Ok(took);
            }
            Some(Event::Stderr(b)) => stderr.extend(b),
            _ => {}
        }
    }
    bail!("{}: no exit event", case.name)
}

/// p50 and p99 by the nearest-rank method.
fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let rank = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    (rank(0.50), rank(0.99))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
