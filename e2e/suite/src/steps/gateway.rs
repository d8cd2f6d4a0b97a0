//! The API gateway on the cluster (docs/gateway.md): from this host, with
//! only the gateway's address and a computer's token.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};

use super::*;
use crate::tools::{Background, Output, eventually};

/// The gateway as a program outside the cluster reaches it: a `kubectl
/// port-forward` to its Service stands for its public address.
pub(super) struct Front {
    _forward: Background,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

/// A computer's credentials through the gateway, as `kubectl computer
/// credentials` prints them.
pub(super) struct Credentials {
    /// `NS/NAME`.
    pub computer: String,
    pub token: String,
}

impl Front {
    pub fn open(cx: &Context) -> Result<Front> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let forward =
            cx.tools
                .kubectl_port_forward(SYSTEM_NS, "svc/ac-agent-computer-gateway", port, 443)?;
        Ok(Front {
            _forward: forward,
            endpoint: format!("http://127.0.0.1:{port}"),
        })
    }

    /// `kubectl computer -n e2e credentials NAME --gateway ENDPOINT -o json`.
    pub fn credentials(&self, cx: &Context, name: &str) -> Result<Credentials> {
        let out = cx
            .tools
            .cli(
                &[
                    "-n",
                    NS,
                    "credentials",
                    name,
                    "--gateway",
                    &self.endpoint,
                    "-o",
                    "json",
                ],
                None,
            )?
            .ok("kubectl computer credentials")?;
        let v: Value = serde_json::from_str(&out).context("credentials printed no JSON")?;
        ensure!(
            v["endpoint"] == self.endpoint.as_str(),
            "credentials named {} as the gateway",
            v["endpoint"]
        );
        Ok(Credentials {
            computer: text(&v, "/computer").to_string(),
            token: text(&v, "/token").to_string(),
        })
    }

    /// `kubectl-computer --endpoint GATEWAY --token T ARGS`, with no
    /// kubeconfig.
    pub fn cli(&self, cx: &Context, token: &str, args: &[&str]) -> Result<Output> {
        let cli = cx.tools.cli.display().to_string();
        let mut all = vec![
            "KUBECONFIG=/nonexistent",
            &cli,
            "--endpoint",
            &self.endpoint,
            "--token",
            token,
        ];
        all.extend(args);
        cx.tools.run(std::path::Path::new("env"), &all)
    }

    /// `exec COMPUTER -- SCRIPT` through the gateway, requiring exit 0.
    pub fn exec(&self, cx: &Context, c: &Credentials, script: &str) -> Result<String> {
        self.cli(cx, &c.token, &["exec", &c.computer, "--", script])?
            .ok(&format!("exec {script:?} through the gateway"))
    }
}

/// `exec NAME -- SCRIPT` through the API gateway when the release runs
/// one (else `None`), with the credentials `kubectl computer credentials`
/// prints.
pub(super) fn exec_if_running(cx: &Context, name: &str, script: &str) -> Result<Option<String>> {
    let runs = cx.tools.kubectl(&[
        "-n",
        SYSTEM_NS,
        "get",
        "deployment",
        "ac-agent-computer-gateway",
    ])?;
    if runs.code != 0 {
        return Ok(None);
    }
    let front = Front::open(cx)?;
    let creds = front.credentials(cx, name)?;
    let out = eventually(60, &format!("{name} through the gateway"), || {
        let out = front.cli(cx, &creds.token, &["exec", &creds.computer, "--", script])?;
        Ok((out.code == 0).then_some(out.stdout))
    })?;
    Ok(Some(out))
}

/// `helm upgrade --reuse-values` with the gateway on, in mutual TLS with
/// the agents (which serve TLS by now: they restart asking clients for
/// certificates of their CA, which the gateway presents). Through it, with the computer's credentials
/// from `kubectl computer credentials` and no kubeconfig:
/// `kubectl-computer --endpoint ... exec NS/scratch` prints `hi`, so does
/// the Python library, 50 MB go up and come back whole, an exec streams
/// its output for 30 s as it comes, the official Python MCP client drives
/// `/mcp/NS/scratch`, and a wrong token is refused. Times a warm `true`
/// through the gateway against through `kubectl computer` (a
/// port-forward per call).
pub(super) fn api_gateway(cx: &mut Context) -> Result<String> {
    let start = Instant::now();
    cx.helm_upgrade(&[
        "--reuse-values",
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.replicas=2",
        // Mutual TLS with the agents (their TLS is on by now): the
        // gateway's client certificate from the agents' CA.
        "--set",
        "gateway.agentClientTls.secretName=gateway-agent-client",
    ])?;
    cx.wait_release_ready()?;
    wait_gateway_rollout(cx)?;
    cx.time(
        "helm upgrade with the API gateway to Ready",
        start.elapsed(),
    );
    let front = Front::open(cx)?;
    let creds = front.credentials(cx, "scratch")?;
    ensure!(
        creds.computer == format!("{NS}/scratch"),
        "credentials named {}",
        creds.computer
    );
    let out = eventually(60, "an exec through the gateway", || {
        let out = front.cli(
            cx,
            &creds.token,
            &["exec", &creds.computer, "--", "echo hi"],
        )?;
        Ok((out.code == 0).then_some(out.stdout))
    })?;
    ensure!(out == "hi\n", "through the gateway: {out:?}");
    // -n NS NAME is NS/NAME there.
    let out = front
        .cli(
            cx,
            &creds.token,
            &["-n", NS, "exec", "scratch", "--", "echo by-namespace"],
        )?
        .ok("exec -n NS NAME through the gateway")?;
    ensure!(out == "by-namespace\n", "-n through the gateway: {out:?}");
    let wrong = front.cli(
        cx,
        "not-a-token",
        &["exec", &creds.computer, "--", "echo hi"],
    )?;
    ensure!(
        wrong.code != 0 && wrong.stderr.contains("not a computer's current token"),
        "a wrong token through the gateway: {} {}",
        wrong.stdout,
        wrong.stderr
    );
    python_library(cx, &front)?;
    let (up, down) = fifty_megabytes(cx, &front, &creds)?;
    let first_line = thirty_second_stream(cx, &front, &creds)?;

    // Warm `true`, 20 each, alternating: through the gateway, and through
    // `kubectl computer` (the API server's port-forward per call).
    let mut via_gateway = Vec::new();
    let mut via_kubectl = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        front.exec(cx, &creds, "true")?;
        via_gateway.push(t.elapsed());
        let t = Instant::now();
        cx.exec("scratch", "shell", "true")?;
        via_kubectl.push(t.elapsed());
    }
    let (g, k) = (median(&mut via_gateway), median(&mut via_kubectl));
    cx.time("warm exec `true` through the gateway (CLI, p50)", g);
    cx.time("warm exec `true` through kubectl computer (p50)", k);

    // The computer as a remote MCP server, by URL and token. Its `share`
    // tool's link is downloaded through the share-link gateway.
    let share_port = super::network::share_links_on(cx)?;
    let _share_forward = super::network::forward_to_gateway(cx, share_port)?;
    let python = cx
        .tools
        .run(std::path::Path::new("bash"), &["scripts/mcp-python.sh"])?
        .ok("scripts/mcp-python.sh")?;
    let client = cx.tools.repo.join("kubectl-computer/tests/mcp/client.py");
    let url = format!("{}/mcp/{}", front.endpoint, creds.computer);
    let out = cx
        .tools
        .run(
            std::path::Path::new(python.trim()),
            &[&client.display().to_string(), "http", &url, &creds.token],
        )?
        .ok("the Python MCP client through the gateway")?;
    let checks = out
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("ok: http "))
        .and_then(|n| n.parse::<u32>().ok())
        .with_context(|| format!("the MCP client did not finish: {out}"))?;
    Ok(format!(
        "warm exec p50 {:.0} ms through the gateway, {:.0} ms through kubectl computer (CLI start included); \
         50 MB up {up:.1} s, down {down:.1} s; first streamed line after {:.1} s; MCP {checks} checks",
        g.as_secs_f64() * 1e3,
        k.as_secs_f64() * 1e3,
        first_line.as_secs_f64(),
    ))
}

/// Waits for the gateway Deployment's rollout.
pub(super) fn wait_gateway_rollout(cx: &Context) -> Result<()> {
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "rollout",
        "status",
        "deployment/ac-agent-computer-gateway",
        "--timeout=180s",
    ])?;
    Ok(())
}

/// The Python library with only what `eval "$(kubectl computer
/// credentials NAME)"` exports: no kubeconfig, no flags.
fn python_library(cx: &Context, front: &Front) -> Result<()> {
    let python = cx
        .tools
        .run(std::path::Path::new("bash"), &["scripts/sdk-python.sh"])?
        .ok("scripts/sdk-python.sh")?;
    let program = "import os, sys\n\
        from agentcomputer import Client\n\
        with Client() as c:\n\
        \x20   r = c.computer(os.environ['AGENTCOMPUTER_COMPUTER']).exec('echo hi from python')\n\
        \x20   sys.stdout.write(r.stdout_bytes.decode())\n\
        \x20   sys.exit(r.exit_code)\n";
    let script = format!(
        "set -e; eval \"$('{cli}' -n {NS} credentials scratch --gateway '{gw}')\"; \
         KUBECONFIG=/nonexistent exec '{python}' -c \"$PROGRAM\"",
        cli = cx.tools.cli.display(),
        gw = front.endpoint,
        python = python.trim(),
    );
    let out = cx.tools.run(
        std::path::Path::new("env"),
        &[&format!("PROGRAM={program}"), "bash", "-c", &script],
    )?;
    ensure!(
        out.code == 0 && out.stdout == "hi from python\n",
        "the Python library through the gateway: exit {}, {:?}, {}",
        out.code,
        out.stdout,
        out.stderr
    );
    Ok(())
}

/// 50 MB of random bytes up with `put` and back with `get` through the
/// gateway, compared byte for byte; seconds each way.
fn fifty_megabytes(cx: &Context, front: &Front, c: &Credentials) -> Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let (up, down) = (dir.path().join("up.bin"), dir.path().join("down.bin"));
    let mut data = vec![0u8; 50 << 20];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in data.chunks_mut(8) {
        // xorshift64: incompressible, so no layer can shrink it.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&up, &data)?;
    let (upload, download) = (up.display().to_string(), down.display().to_string());
    let t = Instant::now();
    front
        .cli(
            cx,
            &c.token,
            &[
                "put",
                "--no-progress",
                &c.computer,
                &upload,
                "gateway-50m.bin",
            ],
        )?
        .ok("put of 50 MB through the gateway")?;
    let up_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    front
        .cli(
            cx,
            &c.token,
            &[
                "get",
                "--no-progress",
                &c.computer,
                "gateway-50m.bin",
                &download,
            ],
        )?
        .ok("get of 50 MB through the gateway")?;
    let down_s = t.elapsed().as_secs_f64();
    ensure!(
        std::fs::read(&down)? == data,
        "the 50 MB came back different through the gateway"
    );
    front.exec(cx, c, "rm gateway-50m.bin")?;
    Ok((up_s, down_s))
}

/// An exec printing a line a second for 30 s through the gateway: each
/// line arrives as it is printed (the first long before the end), and the
/// exec ends with exit 0. Returns when the first line came.
fn thirty_second_stream(cx: &Context, front: &Front, c: &Credentials) -> Result<Duration> {
    let cli = cx.tools.cli.display().to_string();
    let start = Instant::now();
    let mut child = std::process::Command::new("env")
        .args([
            "KUBECONFIG=/nonexistent",
            &cli,
            "--endpoint",
            &front.endpoint,
            "--token",
            &c.token,
            "exec",
            &c.computer,
            "--",
            "for i in $(seq 1 30); do echo line $i; sleep 1; done",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start the streaming exec")?;
    let stdout = child.stdout.take().expect("piped");
    let mut arrivals = Vec::new();
    for line in BufReader::new(stdout).lines() {
        arrivals.push((line?, start.elapsed()));
    }
    let status = child.wait()?;
    let total = start.elapsed();
    ensure!(
        status.success(),
        "the 30 s exec through the gateway: {status}"
    );
    ensure!(
        arrivals.len() == 30
            && arrivals
                .iter()
                .enumerate()
                .all(|(i, (l, _))| *l == format!("line {}", i + 1)),
        "the 30 s exec printed {:?}",
        arrivals.iter().map(|(l, _)| l).collect::<Vec<_>>()
    );
    let first = arrivals[0].1;
    ensure!(
        first < Duration::from_secs(10) && total >= Duration::from_secs(29),
        "lines did not stream: the first after {first:?}, the exec took {total:?}"
    );
    // Line 15 comes about halfway, not with the rest at the end.
    let middle = arrivals[14].1;
    ensure!(
        middle + Duration::from_secs(8) < total,
        "line 15 came after {middle:?} of {total:?}: the output was held back"
    );
    Ok(first)
}

fn median(d: &mut [Duration]) -> Duration {
    d.sort();
    d[d.len() / 2]
}
