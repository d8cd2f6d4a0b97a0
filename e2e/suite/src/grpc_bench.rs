//! `e2e-suite grpc-bench`: what the API gateway adds to a call, measured
//! with a gRPC client inside the cluster's network (the suite runs it in a
//! node's network namespace through `e2e/cluster/node netexec`).
//!
//! 1. Warm exec of `true` in the shell runtime, each call on a kept
//!    connection, alternating between the node agent directly and the
//!    gateway, so that both see the same machine load: p50 and p99 of each.
//! 2. `--clients` concurrent clients, each with its own connection to the
//!    gateway, calling in a loop for `--seconds`: calls a second, p50 and
//!    p99 under that load, and failures by status code.
//!
//! Arguments: `--direct URL` (the agent; `https://` checks its certificate
//! against `--ca FILE` and `--server-name NAME`; needed when `--calls` is
//! not 0), `--gateway URL`, `--computer NS/NAME`, `--calls N` (each way,
//! default 200; 0 skips step 1), `--clients N` (default 100; 0 skips step
//! 2), `--seconds S` (default 10), `--pause-ms MS` (each client's pause
//! between calls, default 0), `--stop-file PATH` (step 2 also ends once
//! that file exists), `--load-direct yes` (step 2 also directly against
//! the agent, as a baseline, the clients sharing one connection). The computer's token is
//! read from `E2E_BENCH_TOKEN`, never from the command line (which other
//! users of the machine can read). Prints one JSON object, times in
//! milliseconds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use anyhow::{Context as _, Result, bail, ensure};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

type Client = AgentComputerClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer TOKEN` to every call.
#[derive(Clone)]
struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

struct Args {
    direct: Option<String>,
    gateway: String,
    computer: String,
    ca: Option<String>,
    server_name: Option<String>,
    calls: usize,
    clients: usize,
    seconds: u64,
    pause: Duration,
    stop_file: Option<std::path::PathBuf>,
    load_direct: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args> {
    let mut named = BTreeMap::new();
    while let Some(flag) = args.next() {
        let Some(name) = flag.strip_prefix("--") else {
            bail!("unexpected argument {flag:?}");
        };
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        named.insert(name.to_string(), value);
    }
    let mut take = |k: &str| named.remove(k);
    let number = |v: Option<String>, default: usize| -> Result<usize> {
        v.map_or(Ok(default), |v| {
            v.parse().with_context(|| format!("not a number: {v}"))
        })
    };
    let args = Args {
        direct: take("direct"),
        gateway: take("gateway").context("--gateway URL is required")?,
        computer: take("computer").context("--computer NS/NAME is required")?,
        ca: take("ca"),
        server_name: take("server-name"),
        calls: number(take("calls"), 200)?,
        clients: number(take("clients"), 100)?,
        seconds: number(take("seconds"), 10)? as u64,
        pause: Duration::from_millis(number(take("pause-ms"), 0)? as u64),
        stop_file: take("stop-file").map(Into::into),
        load_direct: match take("load-direct").as_deref() {
            None | Some("no") => false,
            Some("yes") => true,
            Some(v) => bail!("--load-direct yes|no, not {v:?}"),
        },
    };
    ensure!(named.is_empty(), "unknown flags: {:?}", named.keys());
    ensure!(args.seconds > 0, "--seconds must be positive");
    ensure!(
        args.calls == 0 || args.direct.is_some(),
        "--direct URL is required unless --calls is 0"
    );
    Ok(args)
}

async fn connect(url: &str, tls: Option<ClientTlsConfig>, token: &str) -> Result<Client> {
    let mut endpoint = Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10));
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls)?;
    }
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    let bearer = Bearer(format!("Bearer {token}").parse()?);
    Ok(AgentComputerClient::with_interceptor(channel, bearer))
}

/// One exec of `true` to its exit event: its duration, or the status.
async fn exec_true(c: &mut Client, computer: &str) -> Result<Duration, tonic::Status> {
    let start = Instant::now();
    let req = pb::ExecRequest {
        computer: computer.to_string(),
        runtime: pb::Runtime::Shell as i32,
        script: "true".into(),
        ..Default::default()
    };
    let mut stream = c.exec(req).await?.into_inner();
    while let Some(ev) = stream.message().await? {
        if let Some(pb::exec_event::Event::Exit(e)) = ev.event {
            if e.code != 0 {
                return Err(tonic::Status::unknown(format!("`true` exited {}", e.code)));
            }
            return Ok(start.elapsed());
        }
    }
    Err(tonic::Status::unknown(
        "the exec ended without an exit event",
    ))
}

fn percentiles(d: &mut [Duration]) -> serde_json::Value {
    if d.is_empty() {
        return serde_json::json!({"calls": 0});
    }
    d.sort();
    let at = |q: f64| {
        let i = ((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1;
        d[i].as_secs_f64() * 1e3
    };
    serde_json::json!({"calls": d.len(), "p50_ms": at(0.5), "p99_ms": at(0.99)})
}

/// Runs the benchmark with `args` (without the subcommand's name).
pub fn main(args: impl Iterator<Item = String>) -> Result<()> {
    let args = parse(args)?;
    let token = std::env::var("E2E_BENCH_TOKEN").context("E2E_BENCH_TOKEN is not set")?;
    let tls = match (&args.ca, &args.server_name) {
        (Some(ca), Some(name)) => Some(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(
                    std::fs::read(ca).with_context(|| format!("cannot read {ca}"))?,
                ))
                .domain_name(name.clone()),
        ),
        (None, None) => None,
        _ => bail!("--ca and --server-name go together"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut out = serde_json::json!({});
        let tls_again = tls.clone();
        if let (Some(url), true) = (&args.direct, args.calls > 0) {
            let mut direct = connect(url, tls, &token).await?;
            let mut gateway = connect(&args.gateway, None, &token).await?;
            // Warm both paths: connections, the agent's caches, the routes.
            for _ in 0..10 {
                exec_true(&mut direct, &args.computer)
                    .await
                    .context("direct")?;
                exec_true(&mut gateway, &args.computer)
                    .await
                    .context("gateway")?;
            }
            let (mut via_direct, mut via_gateway) = (Vec::new(), Vec::new());
            for _ in 0..args.calls {
                via_direct.push(
                    exec_true(&mut direct, &args.computer)
                        .await
                        .context("direct")?,
                );
                via_gateway.push(
                    exec_true(&mut gateway, &args.computer)
                        .await
                        .context("gateway")?,
                );
            }
            out["direct"] = percentiles(&mut via_direct);
            out["gateway"] = percentiles(&mut via_gateway);
        }
        if args.clients == 0 {
            println!("{out}");
            return Ok(());
        }

        out["concurrent"] = load(&args, &args.gateway, None, &token, false).await?;
        if args.load_direct {
            // The agent admits few connections from one address (its API
            // port's door), so the baseline multiplexes every client's
            // calls over one connection, as the gateway does towards it.
            let url = args
                .direct
                .as_deref()
                .context("--load-direct needs --direct")?;
            out["concurrent_direct"] = load(&args, url, tls_again, &token, true).await?;
        }
        println!("{out}");
        Ok(())
    })
}

/// Step 2 against `url`: `--clients` clients made first, each with its
/// own connection (or all sharing one when `shared`), then each calls in
/// a loop until `--seconds` pass (or the stop file appears).
async fn load(
    args: &Args,
    url: &str,
    tls: Option<ClientTlsConfig>,
    token: &str,
    shared: bool,
) -> Result<serde_json::Value> {
    let mut clients = Vec::new();
    let one = match shared {
        true => Some(connect(url, tls.clone(), token).await?),
        false => None,
    };
    for _ in 0..args.clients {
        clients.push(match &one {
            Some(c) => c.clone(),
            None => connect(url, tls.clone(), token).await?,
        });
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for mut c in clients {
        let computer = args.computer.clone();
        let (pause, stop_file) = (args.pause, args.stop_file.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (Vec::new(), BTreeMap::<String, u64>::new());
            while Instant::now() < deadline && !stop_file.as_ref().is_some_and(|f| f.exists()) {
                match exec_true(&mut c, &computer).await {
                    Ok(d) => ok.push(d),
                    Err(s) => {
                        let key = format!("{:?}: {}", s.code(), s.message());
                        *failed.entry(key).or_default() += 1;
                    }
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            (ok, failed)
        }));
    }
    let (mut all, mut failed) = (Vec::new(), BTreeMap::<String, u64>::new());
    for t in tasks {
        let (ok, f) = t.await?;
        all.extend(ok);
        for (code, n) in f {
            *failed.entry(code).or_default() += n;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut concurrent = percentiles(&mut all);
    concurrent["clients"] = args.clients.into();
    concurrent["calls_per_second"] = (all.len() as f64 / seconds).into();
    concurrent["failed"] = serde_json::to_value(&failed)?;
    Ok(concurrent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_hundred() {
        let mut d: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let p = percentiles(&mut d);
        assert_eq!(p["p50_ms"], 50.0);
        assert_eq!(p["p99_ms"], 99.0);
    }

    #[test]
    fn flags_are_checked() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!(parse(args("--direct a --gateway b").into_iter()).is_err());
        assert!(parse(args("--gateway b --computer c").into_iter()).is_err());
        assert!(parse(args("--gateway b --computer c --calls 0").into_iter()).is_ok());
        assert!(parse(args("--direct a --gateway b --computer c --nope 1").into_iter()).is_err());
        let a = parse(args("--direct a --gateway b --computer c --clients 3").into_iter()).unwrap();
        assert_eq!((a.calls, a.clients, a.seconds), (200, 3, 10));
    }
}
