//! Egress on the pod network and share links through the gateway.

use std::time::Instant;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;

use super::*;
use crate::tools::{eventually, text};

/// Egress on the real pod network, enforced by a real NetworkPolicy
/// implementation: a computer whose allow-list names the test web server's
/// Service reaches it from the container runtime (through the node agent's
/// egress proxy, which knows the pod by its computer's token), from the
/// shell's `curl` and from JavaScript's `fetch` (both in the node agent);
/// a host off the list is refused by all three.
pub(super) fn egress(cx: &mut Context) -> Result<String> {
    let web_image = std::env::var("E2E_WEB_IMAGE")
        .unwrap_or_else(|_| "localhost/agentcomputer-e2e/busybox:1".into());
    let mut web_pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "e2e-web"}},
        "spec": {"containers": [{"name": "web", "image": web_image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "mkdir -p /tmp/www && echo egress-ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"],
            "ports": [{"containerPort": 8080}]}]}});
    // A pod with no controller makes `kubectl drain` (without --force) fail:
    // it goes where the object store is, the node the moves steps never empty.
    if let Some(node) = super::nodes::object_store_node(cx) {
        web_pod["spec"]["nodeName"] = node.into();
    }
    let web = serde_json::json!({
    "apiVersion": "v1", "kind": "List", "items": [
        web_pod,
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "web", "namespace": NS},
         "spec": {"selector": {"app": "e2e-web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
    ]});
    cx.tools
        .apply(&web.to_string())?
        .ok("kubectl apply of the web server")?;
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "wait",
        "--for=condition=Ready",
        "pod/web",
        "--timeout=120s",
    ])?;
    let allowed = format!("web.{NS}.svc.cluster.local");
    let other = format!("web-off.{NS}.svc.cluster.local");
    let other = other.as_str();
    cx.apply_computer(
        "net",
        serde_json::json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": cx.sandbox_image()},
            "egress": {"mode": "allow-list", "hosts": [allowed]},
        }),
    )?;
    cx.wait_ready("net", 180)?;
    let curl = |host: &str| format!("curl -sS --max-time 10 http://{host}/");
    let out = eventually(
        60,
        "the container's request through the proxy",
        || match cx.exec("net", "container", &curl(&allowed)) {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        },
    )??;
    ensure!(
        out == "egress-ok\n",
        "the container got {out:?} from {allowed}"
    );
    let code = cx.exec_output(
        "net",
        "container",
        &format!("curl -sS --max-time 10 -o /dev/null -w '%{{http_code}}' http://{other}/"),
    )?;
    ensure!(
        code.stdout.trim() == "403",
        "the container reached {other} (HTTP {:?}, exit {})",
        code.stdout.trim(),
        code.code
    );
    let out = cx.exec("net", "shell", &curl(&allowed))?;
    ensure!(out == "egress-ok\n", "the shell's curl got {out:?}");
    let denied = cx
        .tools
        .cli(&["-n", NS, "exec", "net", "--", &curl(other)], None)?;
    ensure!(
        denied.code != 0 && denied.stderr.contains("not in the allow-list"),
        "the shell's curl of {other}: exit {}, {:?}",
        denied.code,
        denied.stderr.trim()
    );
    let js = |host: &str| {
        format!(
            "export default async () => {{ try {{ const r = await fetch('http://{host}/'); return (await r.text()).trim(); }} catch (e) {{ return 'refused: ' + e.message; }} }}"
        )
    };
    let out = cx.exec("net", "javascript", &js(&allowed))?;
    ensure!(out == "\"egress-ok\"\n", "JavaScript's fetch got {out:?}");
    let out = cx.exec("net", "javascript", &js(other))?;
    ensure!(
        out.contains("refused") && out.contains("not in the allow-list"),
        "JavaScript's fetch of {other} gave {out:?}"
    );

    // An allow-list by address: the web pod's IP and port, reached
    // directly (no proxy) by the container and by the shell's curl.
    let web_pod = cx.tools.kubectl_json(&["-n", NS, "get", "pod", "web"])?;
    let ip = text(&web_pod, "/status/podIP").to_string();
    ensure!(!ip.is_empty(), "the web pod has no IP");
    let cidr = if ip.contains(':') {
        format!("{ip}/128")
    } else {
        format!("{ip}/32")
    };
    let egress_of = |egress: Value| {
        serde_json::json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": cx.sandbox_image()},
            "egress": egress,
        })
    };
    cx.apply_computer(
        "net",
        egress_of(serde_json::json!({"mode": "allow-list", "cidrs": [{"cidr": cidr, "ports": [{"port": 8080}]}]})),
    )?;
    let direct = if ip.contains(':') {
        format!("[{ip}]:8080")
    } else {
        format!("{ip}:8080")
    };
    // The pod is replaced (its proxy settings went) and the NetworkPolicy
    // changes: wait for both. Until the operator has replaced it, the old
    // pod still runs with the proxy settings (and the proxy, under the new
    // policy, lets it through), so only a run without them counts.
    let out = eventually(
        120,
        "the replaced container to reach the web pod by address",
        || {
            let out = cx.exec_output(
                "net",
                "container",
                &format!("env | grep -ci '^http_proxy=' || true; {}", curl(&direct)),
            )?;
            if out.code == 0 && out.stdout == "0\negress-ok\n" {
                Ok(Some(out.stdout))
            } else {
                bail!(
                    "exit {}: {:?} {:?}",
                    out.code,
                    out.stdout,
                    out.stderr.trim()
                )
            }
        },
    )?;
    ensure!(
        out.starts_with("0\n"),
        "the container still has a proxy: {out:?}"
    );
    let out = eventually(30, "the shell's curl of the allowed address", || {
        cx.exec("net", "shell", &curl(&direct)).map(Some)
    })?;
    ensure!(out == "egress-ok\n", "the shell's curl got {out:?}");

    // Back to deny-all: nothing gets out, by any runtime.
    cx.apply_computer("net", egress_of(serde_json::json!({"mode": "deny-all"})))?;
    eventually(120, "the container to be cut off", || {
        let out = cx.exec_output("net", "container", &curl(&direct))?;
        if out.code != 0 && !out.stdout.contains("egress-ok") {
            Ok(Some(()))
        } else {
            bail!("exit {}: {:?}", out.code, out.stdout)
        }
    })?;
    let denied = cx
        .tools
        .cli(&["-n", NS, "exec", "net", "--", &curl(&direct)], None)?;
    ensure!(
        denied.code != 0 && !denied.stdout.contains("egress-ok"),
        "the shell's curl under deny-all: exit {}, {:?}",
        denied.code,
        denied.stdout
    );
    let out = cx.exec("net", "javascript", &js(&direct))?;
    ensure!(
        out.contains("refused"),
        "JavaScript's fetch under deny-all gave {out:?}"
    );
    Ok(String::new())
}

/// Under allow-all the in-process runtimes (whose connections the node
/// agent makes) reach the web pod but not the node's control addresses:
/// the node's address on the kubelet's port 10250 and the agent pod's own
/// address on its metrics port are refused as control addresses, from the
/// shell's `curl` and from JavaScript's `fetch`; CIDR rules naming the
/// node's address on 10250 and the API server's Service address on 443
/// reach neither (only the chart's egress.allowControlAddresses would).
/// Runs after "egress on the pod network" (its web pod and computer).
pub(super) fn egress_keeps_the_node_out(cx: &mut Context) -> Result<String> {
    let spec = |egress: Value| {
        serde_json::json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": cx.sandbox_image()},
            "egress": egress,
        })
    };
    cx.apply_computer("net", spec(serde_json::json!({"mode": "allow-all"})))?;
    cx.wait_ready("net", 180)?;
    let node = text(&cx.computer("net")?, "/status/node").to_string();
    ensure!(!node.is_empty(), "computer net has no node in its status");
    let agents = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=agentcomputer-node-agent",
    ])?;
    let agent = agents["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| text(p, "/spec/nodeName") == node)
        .with_context(|| format!("no node agent pod on node {node}"))?;
    let host_ip = text(agent, "/status/hostIP").to_string();
    let pod_ip = text(agent, "/status/podIP").to_string();
    ensure!(
        !host_ip.is_empty() && !pod_ip.is_empty(),
        "the node agent pod has no addresses"
    );
    let url = |ip: &str, port: u16| match ip.contains(':') {
        true => format!("http://[{ip}]:{port}/"),
        false => format!("http://{ip}:{port}/"),
    };
    let allowed = format!("web.{NS}.svc.cluster.local");
    let out = eventually(60, "the shell's curl under allow-all", || {
        cx.exec(
            "net",
            "shell",
            &format!("curl -sS --max-time 10 http://{allowed}/"),
        )
        .map(Some)
    })?;
    ensure!(
        out == "egress-ok
",
        "the shell's curl got {out:?}"
    );
    for (target, what) in [
        (url(&host_ip, 10250), "the kubelet"),
        (url(&pod_ip, 9090), "the node agent"),
    ] {
        let reason = format!("is a control address ({what})");
        let denied = cx.tools.cli(
            &[
                "-n",
                NS,
                "exec",
                "net",
                "--",
                &format!("curl -sS --max-time 10 {target}"),
            ],
            None,
        )?;
        ensure!(
            denied.code != 0 && denied.stderr.contains(&reason),
            "the shell's curl of {target} under allow-all: exit {}, {:?}",
            denied.code,
            denied.stderr.trim()
        );
        let js = format!(
            "export default async () => {{ try {{ const r = await fetch('{target}'); return 'status ' + r.status; }} catch (e) {{ return 'refused: ' + e.message; }} }}"
        );
        let out = cx.exec("net", "javascript", &js)?;
        ensure!(
            out.contains("refused") && out.contains(&reason),
            "JavaScript's fetch of {target} under allow-all gave {out:?}"
        );
    }
    // Named by CIDR rules, the kubelet and the API server's Service address
    // are still refused: they are control addresses, which no allow-list
    // reaches.
    let host = |ip: &str| match ip.contains(':') {
        true => format!("{ip}/128"),
        false => format!("{ip}/32"),
    };
    let api = cx
        .tools
        .kubectl_json(&["-n", "default", "get", "service", "kubernetes"])?;
    let api_ip = text(&api, "/spec/clusterIP").to_string();
    ensure!(
        !api_ip.is_empty(),
        "the kubernetes Service has no cluster IP"
    );
    cx.apply_computer(
        "net",
        spec(serde_json::json!({"mode": "allow-list", "cidrs": [
            {"cidr": host(&host_ip), "ports": [{"port": 10250}]},
            {"cidr": host(&api_ip), "ports": [{"port": 443}]},
        ]})),
    )?;
    for (target, what) in [
        (url(&host_ip, 10250), "the kubelet"),
        (url(&api_ip, 443), "the API server"),
    ] {
        // The new policy reaches the agent within a watch event: wait until
        // the refusal is the control one rather than "not in the allow-list".
        let reason = format!("is a control address ({what})");
        eventually(
            60,
            &format!("{target} refused as a control address"),
            || {
                let out = cx.tools.cli(
                    &[
                        "-n",
                        NS,
                        "exec",
                        "net",
                        "--",
                        &format!("curl -sS --max-time 10 -o /dev/null {target}"),
                    ],
                    None,
                )?;
                if out.code == 0 || !out.stderr.contains("egress denied") {
                    bail!(
                        "{target} was reached: exit {}, {:?}",
                        out.code,
                        out.stderr.trim()
                    );
                }
                Ok(out.stderr.contains(&reason).then_some(()))
            },
        )?;
    }
    cx.apply_computer("net", spec(serde_json::json!({"mode": "deny-all"})))?;
    Ok(String::new())
}

/// Share links from outside the cluster: `helm upgrade` (keeping the
/// values so far) with share links on and the chart's gateway; a
/// `kubectl port-forward` to the gateway Service stands for the public
/// address links point at. A link made with `kubectl computer share`
/// downloads the file from this host through the gateway (the body,
/// `Content-Disposition`, a range); a tampered link gets 403.
pub(super) fn share_gateway(cx: &mut Context) -> Result<String> {
    let port = share_links_on(cx)?;
    let body = "shared through the gateway\n";
    eventually(120, "a file written after the agents restarted", || {
        cx.exec(
            "scratch",
            "shell",
            "printf 'shared through the gateway\\n' > out.txt",
        )
        .map(Some)
    })?;
    let link = cx
        .tools
        .cli(
            &["-n", NS, "share", "scratch", "out.txt", "--expires", "10m"],
            None,
        )?
        .ok("kubectl computer share")?;
    let link = link.trim().to_string();
    ensure!(
        link.starts_with(&format!("http://127.0.0.1:{port}/share/v1/")),
        "the link does not point at the gateway: {link}"
    );
    let _forward = forward_to_gateway(cx, port)?;
    let (took, attempts) = {
        let mut attempts = 0;
        let took = eventually(60, "downloads through the gateway", || {
            attempts += 1;
            let start = Instant::now();
            let (head, got) = curl(&link, &[])?;
            let took = start.elapsed();
            ensure!(head.starts_with("HTTP/1.1 200"), "the download: {head}");
            ensure!(got == body, "the download is {got:?}, not {body:?}");
            ensure!(
                head.to_lowercase()
                    .contains("content-disposition: attachment; filename=\"out.txt\""),
                "no Content-Disposition of out.txt: {head}"
            );
            let (head, got) = curl(&link, &["-H", "Range: bytes=7-13"])?;
            ensure!(head.starts_with("HTTP/1.1 206"), "the range: {head}");
            ensure!(got == "through", "the range is {got:?}");
            let (head, got) = curl(&link.replace("expires=", "expires=1"), &[])?;
            ensure!(head.starts_with("HTTP/1.1 403"), "a tampered link: {head}");
            ensure!(
                got == "invalid or revoked link\n",
                "a tampered link: {got:?}"
            );
            Ok(Some(took))
        })?;
        (took, attempts)
    };
    cx.time("download through the gateway", took);
    Ok(if attempts > 1 {
        format!("{attempts} attempts")
    } else {
        String::new()
    })
}

/// Turns share links on (`helm upgrade --reuse-values` with the gateway,
/// links naming a port free on this host now) and waits for the release;
/// returns that port. Done once per run.
pub(super) fn share_links_on(cx: &mut Context) -> Result<u16> {
    if let Some(port) = cx.share_port {
        return Ok(port);
    }
    // A port free on this host now, for the forward the links name.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("nodeAgent.share.url=http://127.0.0.1:{port}/");
    let start = Instant::now();
    cx.helm_upgrade(&[
        "--reuse-values",
        "--set",
        "nodeAgent.share.enabled=true",
        "--set",
        &url,
        "--set",
        "shareGateway.enabled=true",
        "--set",
        "shareGateway.replicas=1",
    ])?;
    cx.wait_release_ready()?;
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "rollout",
        "status",
        "deployment/ac-agent-computer-share-gateway",
        "--timeout=120s",
    ])?;
    cx.time(
        "helm upgrade with the share gateway to Ready",
        start.elapsed(),
    );
    cx.share_port = Some(port);
    Ok(port)
}

/// Starts a `kubectl port-forward` from the host port share links name to
/// the gateway Service, and waits until the gateway answers through it.
pub(super) fn forward_to_gateway(cx: &Context, port: u16) -> Result<crate::tools::Background> {
    let forward = cx.tools.kubectl_port_forward(
        SYSTEM_NS,
        "svc/ac-agent-computer-share-gateway",
        port,
        80,
    )?;
    // A connection made the moment the forward announces itself can be
    // reset before the forward's stream to the pod is up: wait for the
    // gateway's /healthz through it first.
    let health = format!("http://127.0.0.1:{port}/healthz");
    eventually(30, "the gateway through the port-forward", || {
        Ok(curl(&health, &[])
            .ok()
            .filter(|(head, _)| head.starts_with("HTTP/1.1 200")))
    })?;
    Ok(forward)
}

/// `curl -sS` of `url` with `extra` arguments: (response head, body).
/// Errors: curl failed (no response).
pub(super) fn curl(url: &str, extra: &[&str]) -> Result<(String, String)> {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "30", "-D", "-", "-o", "/dev/stderr"])
        .args(extra)
        .arg(url);
    let out = cmd.output().context("cannot run curl")?;
    ensure!(out.status.success(), "curl {url} failed ({})", out.status);
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
