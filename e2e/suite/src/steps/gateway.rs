//! The API gateway on the cluster (docs/gateway.md): from this host, with
//! only the gateway's address and a computer's token.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};

use super::*;
use crate::tools::eventually;

/// `helm upgrade --reuse-values` with the gateway on (keeping whatever TLS
/// the agents serve by now); a `kubectl port-forward` to its Service stands
/// for its public address. Through it, with the computer's own token and
/// no kubeconfig: `kubectl-computer --endpoint ... exec NS/scratch` prints
/// `hi`, the official Python MCP client drives `/mcp/NS/scratch`, and a
/// wrong token is refused. Times a warm `true` through the gateway
/// against through `kubectl computer` (a port-forward per call).
pub(super) fn api_gateway(cx: &mut Context) -> Result<String> {
    let start = Instant::now();
    cx.helm_upgrade(&[
        "--reuse-values",
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.replicas=2",
    ])?;
    cx.wait_release_ready()?;
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "rollout",
        "status",
        "deployment/ac-agent-computer-gateway",
        "--timeout=180s",
    ])?;
    cx.time(
        "helm upgrade with the API gateway to Ready",
        start.elapsed(),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _forward =
        cx.tools
            .kubectl_port_forward(SYSTEM_NS, "svc/ac-agent-computer-gateway", port, 443)?;
    let token = cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "get",
        "secret",
        "scratch-credential",
        "-o",
        "jsonpath={.data.token}",
    ])?;
    use base64::Engine as _;
    let token = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .context("the credential Secret's token is not base64")?,
    )?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let computer = format!("{NS}/scratch");
    // Without any kubeconfig: the gateway's address and the token only.
    let cli = cx.tools.cli.display().to_string();
    let direct = |cx: &Context, token: &str, script: &str| {
        cx.tools.run(
            std::path::Path::new("env"),
            &[
                "KUBECONFIG=/nonexistent",
                &cli,
                "--endpoint",
                &endpoint,
                "--token",
                token,
                "exec",
                &computer,
                "--",
                script,
            ],
        )
    };
    let out = eventually(60, "an exec through the gateway", || {
        let out = direct(cx, &token, "echo hi")?;
        Ok((out.code == 0).then_some(out.stdout))
    })?;
    ensure!(out == "hi\n", "through the gateway: {out:?}");
    let wrong = direct(cx, "not-a-token", "echo hi")?;
    ensure!(
        wrong.code != 0 && wrong.stderr.contains("not a computer's current token"),
        "a wrong token through the gateway: {} {}",
        wrong.stdout,
        wrong.stderr
    );

    // Warm `true`, 20 each, alternating: through the gateway, and through
    // `kubectl computer` (the API server's port-forward per call).
    let mut via_gateway = Vec::new();
    let mut via_kubectl = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let out = direct(cx, &token, "true")?;
        ensure!(out.code == 0, "true through the gateway: {}", out.stderr);
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
    let url = format!("{endpoint}/mcp/{NS}/scratch");
    let out = cx
        .tools
        .run(
            std::path::Path::new(python.trim()),
            &[&client.display().to_string(), "http", &url, &token],
        )?
        .ok("the Python MCP client through the gateway")?;
    let checks = out
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("ok: http "))
        .and_then(|n| n.parse::<u32>().ok())
        .with_context(|| format!("the MCP client did not finish: {out}"))?;
    Ok(format!(
        "warm exec p50 {:.0} ms through the gateway, {:.0} ms through kubectl computer; MCP {checks} checks",
        g.as_secs_f64() * 1e3,
        k.as_secs_f64() * 1e3
    ))
}

fn median(d: &mut [Duration]) -> Duration {
    d.sort();
    d[d.len() / 2]
}
