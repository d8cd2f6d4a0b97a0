//! Noisy-neighbour benchmark of the node agent.
//!
//! Starts a real `node-agent local` for each configuration given, and for
//! each scenario measures the latency of `echo ok` on a quiet computer (from
//! sending the Exec call to receiving its exit event, over loopback gRPC)
//! while bombs run on other computers of the same agent:
//!
//! * `cpu`: a spinning shell loop (`while true; do :; done`);
//! * `mem`: JavaScript allocating and filling 8 MiB buffers in a loop;
//! * `io`: a shell loop writing, copying and removing files;
//!
//! each either as `--bombs` execs on one computer (`-one`) or as one exec on
//! each of `--bombs` computers (`-many`). It prints one table row per
//! configuration and scenario: samples, p50, p99 and max latency, failed
//! samples, and how the bombs' Exec calls ended (admitted, refused with
//! RESOURCE_EXHAUSTED, other errors). Numbers go to docs/benchmarks.md.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use anyhow::{Context, bail};
use clap::Parser;
use pb::exec_event::Event;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Sends the agent token (the file `token` in the agent's data directory)
/// as `authorization: Bearer <token>` on every call.
#[derive(Clone)]
struct Bearer(MetadataValue<Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

type Client = AgentComputerClient<InterceptedService<Channel, Bearer>>;

#[derive(Parser)]
#[command(about = "p50/p99 of `echo ok` on one computer while others run bombs")]
struct Args {
    /// The node-agent binary.
    #[arg(long)]
    agent: std::path::PathBuf,
    /// An agent configuration: `LABEL=ARGS`, ARGS being extra arguments of
    /// `node-agent local` separated by spaces (may be empty). Repeatable;
    /// each configuration runs every scenario on a fresh agent.
    #[arg(long = "config", required = true)]
    configs: Vec<String>,
    /// Scenarios to run: idle, cpu-one, cpu-many, mem-one, mem-many,
    /// io-one, io-many.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "idle,cpu-one,cpu-many,mem-one,mem-many,io-one,io-many"
    )]
    scenarios: Vec<String>,
    /// Bomb execs per scenario.
    #[arg(long, default_value_t = 200)]
    bombs: usize,
    /// `echo ok` samples per scenario (fewer when --sample-time runs out).
    #[arg(long, default_value_t = 300)]
    samples: usize,
    /// Longest time spent sampling one scenario.
    #[arg(long, default_value = "20s", value_parser = humantime_secs)]
    sample_time: Duration,
    /// Pause between two samples.
    #[arg(long, default_value = "10ms", value_parser = humantime_secs)]
    gap: Duration,
    /// Time given to the bombs to start before sampling.
    #[arg(long, default_value = "2s", value_parser = humantime_secs)]
    warmup: Duration,
}

/// Parses `250ms`, `2s` or `1m`.
fn humantime_secs(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .ok_or_else(|| format!("{s:?}: a unit is needed (ms, s, m)"))?;
    let n: u64 = n.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(60 * n)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m)")),
    }
}

/// What a bomb runs.
#[derive(Clone, Copy)]
enum Bomb {
    Cpu,
    Mem,
    Io,
}

impl Bomb {
    fn request(self, computer: &str, timeout: Duration) -> pb::ExecRequest {
        let (runtime, script) = match self {
            Bomb::Cpu => (pb::Runtime::Shell, "while true; do :; done"),
            Bomb::Mem => (
                pb::Runtime::Javascript,
                "export default () => { for (;;) { const b = new Uint8Array(8 << 20); b.fill(1); } }",
            ),
            Bomb::Io => (
                pb::Runtime::Shell,
                "while true; do seq 1 20000 > f.$$; cp f.$$ g.$$; rm f.$$ g.$$; done",
            ),
        };
        pb::ExecRequest {
            computer: computer.into(),
            runtime: runtime as i32,
            script: script.into(),
            timeout_ms: timeout.as_millis() as u64,
            ..Default::default()
        }
    }
}

/// How the bombs' calls ended.
#[derive(Default)]
struct BombTally {
    admitted: AtomicUsize,
    refused: AtomicUsize,
    other: AtomicUsize,
}

struct Agent {
    child: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Agent {
    async fn start(binary: &std::path::Path, extra: &[String]) -> anyhow::Result<Agent> {
        let data = tempfile::tempdir()?;
        let mut child = Command::new(binary)
            .args(["local", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .args(extra)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?)
            .read_line(&mut line)
            .await?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_string();
        Ok(Agent {
            child,
            url: format!("http://{addr}"),
            _data: data,
        })
    }

    async fn client(&self) -> anyhow::Result<Client> {
        let token = std::fs::read_to_string(self._data.path().join("token"))
            .context("cannot read the agent token")?;
        let bearer = Bearer(
            format!("Bearer {}", token.trim())
                .parse()
                .context("the agent token is not a header value")?,
        );
        let channel = Channel::from_shared(self.url.clone())?.connect().await?;
        Ok(AgentComputerClient::with_interceptor(channel, bearer))
    }
}

/// Runs `req` to its end; returns whether it exited 0 with `expect` on
/// stdout.
async fn exec(
    client: &mut Client,
    req: pb::ExecRequest,
    expect: &[u8],
) -> Result<bool, tonic::Status> {
    let mut stream = client.exec(req).await?.into_inner();
    let mut stdout = Vec::new();
    while let Some(ev) = stream.message().await? {
        match ev.event {
            Some(Event::Stdout(b)) => stdout.extend_from_slice(&b),
            Some(Event::Exit(exit)) => return Ok(exit.code == 0 && stdout == expect),
            _ => {}
        }
    }
    Ok(false)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "| config | scenario | samples | p50 ms | p99 ms | max ms | failed | bombs admitted | bombs refused | bombs other |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for config in &args.configs {
        let (label, extra) = config
            .split_once('=')
            .with_context(|| format!("--config {config:?}: expected LABEL=ARGS"))?;
        let extra: Vec<String> = extra.split_whitespace().map(String::from).collect();
        let agent = Agent::start(&args.agent, &extra).await?;
        let mut admin = agent.client().await?;
        let computers = args.bombs.max(1);
        for name in
            std::iter::once("quiet".to_string()).chain((0..computers).map(|i| format!("n{i:03}")))
        {
            admin
                .create_computer(pb::CreateComputerRequest {
                    name,
                    ..Default::default()
                })
                .await?;
        }
        for scenario in &args.scenarios {
            run_scenario(&args, label, scenario, &agent).await?;
        }
        drop(agent);
    }
    Ok(())
}

async fn run_scenario(
    args: &Args,
    label: &str,
    scenario: &str,
    agent: &Agent,
) -> anyhow::Result<()> {
    let (bomb, many) = match scenario {
        "idle" => (None, false),
        "cpu-one" => (Some(Bomb::Cpu), false),
        "cpu-many" => (Some(Bomb::Cpu), true),
        "mem-one" => (Some(Bomb::Mem), false),
        "mem-many" => (Some(Bomb::Mem), true),
        "io-one" => (Some(Bomb::Io), false),
        "io-many" => (Some(Bomb::Io), true),
        other => bail!("unknown scenario {other:?}"),
    };
    let tally = Arc::new(BombTally::default());
    let mut bombs = JoinSet::new();
    // The bombs outlast the sampling; they are abandoned (the calls
    // dropped, which cancels the runs) once it ends.
    let bomb_timeout = args.warmup + args.sample_time + Duration::from_secs(30);
    if let Some(bomb) = bomb {
        // Several connections: one HTTP/2 connection carries a bounded
        // number of concurrent streams.
        let mut clients = Vec::new();
        for _ in 0..args.bombs.div_ceil(50) {
            clients.push(agent.client().await?);
        }
        for i in 0..args.bombs {
            let computer = if many {
                format!("n{i:03}")
            } else {
                "n000".to_string()
            };
            let mut client = clients[i / 50].clone();
            let tally = tally.clone();
            let req = bomb.request(&computer, bomb_timeout);
            bombs.spawn(async move {
                let result = exec(&mut client, req, b"").await;
                match result {
                    Ok(_) => &tally.admitted,
                    Err(s) if s.code() == tonic::Code::ResourceExhausted => &tally.refused,
                    Err(_) => &tally.other,
                }
                .fetch_add(1, Ordering::Relaxed);
            });
        }
        tokio::time::sleep(args.warmup).await;
    }
    let mut client = agent.client().await?;
    let mut lat = Vec::new();
    let mut failed = 0;
    let begin = Instant::now();
    while lat.len() + failed < args.samples && begin.elapsed() < args.sample_time {
        let req = pb::ExecRequest {
            computer: "quiet".into(),
            script: "echo ok".into(),
            timeout_ms: 30_000,
            ..Default::default()
        };
        let t = Instant::now();
        match exec(&mut client, req, b"ok\n").await {
            Ok(true) => lat.push(t.elapsed()),
            _ => failed += 1,
        }
        tokio::time::sleep(args.gap).await;
    }
    // Bombs still running when sampling ends were admitted.
    let admitted = tally.admitted.load(Ordering::Relaxed);
    let refused = tally.refused.load(Ordering::Relaxed);
    let other = tally.other.load(Ordering::Relaxed);
    let still = if bomb.is_some() {
        args.bombs.saturating_sub(admitted + refused + other)
    } else {
        0
    };
    bombs.abort_all();
    while bombs.join_next().await.is_some() {}
    lat.sort();
    println!(
        "| {label} | {scenario} | {} | {} | {} | {} | {failed} | {} | {refused} | {other} |",
        lat.len(),
        ms(percentile(&lat, 50.0)),
        ms(percentile(&lat, 99.0)),
        ms(lat.last().copied().unwrap_or_default()),
        admitted + still,
    );
    // Let the cancelled bombs stop before the next scenario.
    settle(agent).await?;
    Ok(())
}

/// Waits until `echo ok` answers within 50 ms again (at most 30 s).
async fn settle(agent: &Agent) -> anyhow::Result<()> {
    let mut client = agent.client().await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let t = Instant::now();
        let req = pb::ExecRequest {
            computer: "quiet".into(),
            script: "echo ok".into(),
            ..Default::default()
        };
        if exec(&mut client, req, b"ok\n").await.unwrap_or(false)
            && t.elapsed() < Duration::from_millis(50)
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("warning: the agent did not settle within 30 s");
    Ok(())
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
