//! The API gateway from inside the cluster's network (docs/gateway.md):
//! what it adds to a call against the node agent directly, 100 concurrent
//! clients, a `helm upgrade` of the gateway while clients call, and a
//! recreated node agent pod. The gRPC client is `e2e-suite grpc-bench`,
//! run in the computer's node's network namespace (`E2E_NODE_CTL netexec`),
//! where the agent's pod address and the gateway's Service address are
//! reachable as from any pod (through kube-proxy, across the
//! NetworkPolicies, which admit a node's own traffic to its pods).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail, ensure};

use super::gateway::{Front, wait_gateway_rollout};
use super::*;

/// Where and how the benchmark reaches `scratch`.
struct Bench {
    ctl: PathBuf,
    node: String,
    computer: String,
    token: String,
    direct: String,
    tls: Option<(PathBuf, String)>,
    gateway: String,
    dir: tempfile::TempDir,
}

impl Bench {
    fn find(cx: &Context, ctl: PathBuf) -> Result<Bench> {
        let scratch = cx.computer("scratch")?;
        let node = text(&scratch, "/status/node").to_string();
        let endpoint = text(&scratch, "/status/endpoint").to_string();
        ensure!(
            !node.is_empty() && !endpoint.is_empty(),
            "scratch has no node or endpoint"
        );
        let secret = cx
            .tools
            .kubectl_json(&["-n", NS, "get", "secret", "scratch-credential"])?;
        let field = |k: &str| -> Result<Option<String>> {
            use base64::Engine as _;
            let Some(v) = secret["data"][k].as_str() else {
                return Ok(None);
            };
            let bytes = base64::engine::general_purpose::STANDARD.decode(v)?;
            Ok(Some(String::from_utf8(bytes)?.trim().to_string()))
        };
        let token = field("token")?.context("the credential Secret has no token")?;
        let dir = tempfile::tempdir()?;
        let tls = match (field("ca.crt")?, field("tls-server-name")?) {
            (Some(ca), Some(name)) => {
                let path = dir.path().join("ca.crt");
                std::fs::write(&path, ca)?;
                Some((path, name))
            }
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let ip = cx.tools.kubectl_ok(&[
            "-n",
            SYSTEM_NS,
            "get",
            "service",
            "ac-agent-computer-gateway",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])?;
        Ok(Bench {
            ctl,
            node,
            computer: format!("{NS}/scratch"),
            token,
            direct: format!("{scheme}://{endpoint}"),
            tls,
            gateway: format!("http://{}:443", ip.trim()),
            dir,
        })
    }

    /// `E2E_NODE_CTL netexec NODE e2e-suite grpc-bench ARGS`, started.
    fn start(&self, args: &[&str]) -> Result<Child> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(&self.ctl);
        cmd.arg("netexec")
            .arg(&self.node)
            .arg(exe)
            .arg("grpc-bench")
            .args(["--gateway", &self.gateway, "--computer", &self.computer])
            .args(["--direct", &self.direct])
            .args(args)
            .env("E2E_BENCH_TOKEN", &self.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some((ca, name)) = &self.tls {
            cmd.arg("--ca").arg(ca).args(["--server-name", name]);
        }
        cmd.spawn()
            .context("cannot start grpc-bench in the node's network")
    }

    fn finish(child: Child) -> Result<Value> {
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "grpc-bench: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim())
            .with_context(|| format!("grpc-bench printed {stdout:?}"))
    }

    fn run(&self, args: &[&str]) -> Result<Value> {
        Bench::finish(self.start(args)?)
    }
}

fn ms(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// Needs `E2E_NODE_CTL` and the gateway step before it.
pub(super) fn gateway_in_cluster(cx: &mut Context) -> Result<String> {
    let Some(ctl) = std::env::var_os("E2E_NODE_CTL") else {
        return Ok("skipped: E2E_NODE_CTL is not set".into());
    };
    let bench = Bench::find(cx, ctl.into())?;

    // 1. Warm exec of `true`: directly against the agent and through the
    // gateway, alternating, on kept connections.
    let latency = bench.run(&["--calls", "200", "--clients", "0"])?;
    let (d50, d99) = (
        ms(&latency, "/direct/p50_ms"),
        ms(&latency, "/direct/p99_ms"),
    );
    let (g50, g99) = (
        ms(&latency, "/gateway/p50_ms"),
        ms(&latency, "/gateway/p99_ms"),
    );
    cx.time(
        "warm exec `true` directly against the agent (gRPC, p50)",
        ms_duration(d50),
    );
    cx.time(
        "warm exec `true` through the gateway (gRPC, p50)",
        ms_duration(g50),
    );

    // 2. A helm upgrade of the gateway (new limits, so its pods are
    // replaced one by one) while 8 clients call through its Service: new
    // calls see no interruption.
    let stop = bench.dir.path().join("stop");
    let stop_arg = stop.display().to_string();
    let clients = bench.start(&[
        "--calls",
        "0",
        "--clients",
        "8",
        "--pause-ms",
        "50",
        "--seconds",
        "600",
        "--stop-file",
        &stop_arg,
    ])?;
    let upgrade = Instant::now();
    let upgraded = cx
        .helm_upgrade(&[
            "--reuse-values",
            "--set",
            "gateway.limits.perTokenRate=20000",
            "--set",
            "gateway.limits.perTokenInFlight=512",
            "--set",
            "gateway.limits.perComputerInFlight=512",
        ])
        .and_then(|_| wait_gateway_rollout(cx));
    // Calls keep going a while on the new pods.
    std::thread::sleep(std::time::Duration::from_secs(5));
    std::fs::write(&stop, b"")?;
    let during = Bench::finish(clients)?;
    upgraded?;
    let upgrade_s = upgrade.elapsed().as_secs_f64();
    let calls = ms(&during, "/concurrent/calls");
    let failed = &during["concurrent"]["failed"];
    ensure!(
        failed.as_object().is_some_and(|f| f.is_empty()) && calls > 0.0,
        "calls through the gateway during its upgrade failed: {failed} ({calls} passed)"
    );

    // 3. 100 concurrent clients, each with its own connection.
    let load = bench.run(&[
        "--calls",
        "0",
        "--clients",
        "100",
        "--seconds",
        "10",
        "--load-direct",
        "yes",
    ])?;
    let load_failed = &load["concurrent"]["failed"];
    ensure!(
        load_failed.as_object().is_some_and(|f| f.is_empty()),
        "100 concurrent clients through the gateway: {load_failed}"
    );
    let rate = ms(&load, "/concurrent/calls_per_second");
    let direct_rate = ms(&load, "/concurrent_direct/calls_per_second");

    // 4. The node agent's pod recreated: the route follows.
    let recreated = agent_pod_recreated(cx, &bench.node)?;

    Ok(format!(
        "warm exec p50/p99 {d50:.2}/{d99:.2} ms direct, {g50:.2}/{g99:.2} ms through the gateway \
         (+{:.2} ms p50); upgrade under 8 clients: {calls:.0} calls, none failed, {upgrade_s:.0} s; \
         100 clients: {rate:.0} calls/s through the gateway (p50 {:.1} ms, p99 {:.1} ms), \
         {direct_rate:.0} calls/s directly over one shared connection (p50 {:.1} ms, p99 {:.1} ms); {recreated}",
        g50 - d50,
        ms(&load, "/concurrent/p50_ms"),
        ms(&load, "/concurrent/p99_ms"),
        ms(&load, "/concurrent_direct/p50_ms"),
        ms(&load, "/concurrent_direct/p99_ms"),
    ))
}

fn ms_duration(ms: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(ms.max(0.0) / 1e3)
}

/// Deletes the node agent pod on `node` (its DaemonSet makes a new one)
/// and calls through the gateway until the computer answers again.
fn agent_pod_recreated(cx: &Context, node: &str) -> Result<String> {
    let pods = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=agentcomputer-node-agent",
        "--field-selector",
        &format!("spec.nodeName={node}"),
    ])?;
    let Some(old) = pods["items"].as_array().and_then(|p| p.first()) else {
        bail!("no node agent pod on {node}");
    };
    let old_name = text(old, "/metadata/name").to_string();
    let before = text(&cx.computer("scratch")?, "/status/endpoint").to_string();
    let front = Front::open(cx)?;
    let creds = front.credentials(cx, "scratch")?;
    front.exec(cx, &creds, "echo before > gateway-agent-pod")?;
    let start = Instant::now();
    cx.tools
        .kubectl_ok(&["-n", SYSTEM_NS, "delete", "pod", &old_name, "--wait=true"])?;
    let out = eventually(
        180,
        "the computer through the gateway after its agent pod was recreated",
        || {
            let out = front.cli(
                cx,
                &creds.token,
                &["exec", &creds.computer, "--", "cat gateway-agent-pod"],
            )?;
            Ok((out.code == 0).then_some(out.stdout))
        },
    )?;
    ensure!(
        out == "before\n",
        "after the agent pod was recreated: {out:?}"
    );
    let after = text(&cx.computer("scratch")?, "/status/endpoint").to_string();
    cx.wait_release_ready()?;
    Ok(format!(
        "agent pod recreated ({before} then {after}): answering through the gateway after {:.0} s",
        start.elapsed().as_secs_f64()
    ))
}
