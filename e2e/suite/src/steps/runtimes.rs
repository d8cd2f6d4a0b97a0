//! The runtimes on a computer in the cluster: shell, JavaScript, the
//! sandbox pod and its container runtime, MCP, and bad input.

use std::time::Instant;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;

use super::*;
use crate::tools::{eventually, text};

/// Through `kubectl computer` from outside the cluster: the shell writes a
/// file that JavaScript reads, and the other way round; first and warm
/// exec latency of both runtimes.
pub(super) fn shell_and_javascript(cx: &mut Context) -> Result<String> {
    let t = Instant::now();
    let out = cx.exec("scratch", "shell", "echo from-shell > s.txt && cat s.txt")?;
    cx.time("first shell exec (kubectl computer)", t.elapsed());
    ensure!(out == "from-shell\n", "shell printed {out:?}");
    let t = Instant::now();
    let out = cx.exec(
        "scratch",
        "javascript",
        r#"import fs from "node:fs"; fs.writeFileSync("j.txt", "from-js\n"); export default () => fs.readFileSync("s.txt", "utf8")"#,
    )?;
    cx.time("first javascript exec (kubectl computer)", t.elapsed());
    ensure!(out == "\"from-shell\\n\"\n", "javascript printed {out:?}");
    let out = cx.exec("scratch", "shell", "cat j.txt")?;
    ensure!(out == "from-js\n", "shell read {out:?} from j.txt");
    for runtime in ["shell", "javascript"] {
        let script = if runtime == "shell" {
            "true"
        } else {
            "export default () => null"
        };
        let mut all = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            cx.exec("scratch", runtime, script)?;
            all.push(t.elapsed());
        }
        all.sort();
        cx.time(
            format!("warm {runtime} exec, median of 5 (kubectl computer)"),
            all[2],
        );
    }
    Ok(String::new())
}

/// A computer with the container runtime: its sandbox pod runs with
/// `/workspace` mounted from the CSI volume (a FUSE mount), and a file
/// written in the pod is read by the shell runtime at once, and the other
/// way round.
pub(super) fn sandbox_pod(cx: &mut Context) -> Result<String> {
    let image = cx.sandbox_image();
    let start = Instant::now();
    cx.apply_computer(
        "box",
        serde_json::json!({
            "storage": {"size": "1Gi", "reclaimPolicy": "Retain"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": image},
        }),
    )?;
    let ready = cx.wait_ready("box", 180)?;
    cx.time("kubectl apply to Ready (computer with sandbox pod)", ready);
    let c = cx.computer("box")?;
    let pod = text(&c, "/status/sandboxPod").to_string();
    ensure!(!pod.is_empty(), "status.sandboxPod is empty");
    // Ready means Running; the kubelet takes a moment more before its
    // container accepts `kubectl exec` ("container not found").
    let mounts = eventually(60, "kubectl exec into the sandbox pod", || {
        match cx.pod_exec(&pod, "grep ' /workspace ' /proc/mounts") {
            Err(e) if format!("{e:#}").contains("container not found") => Err(e),
            other => Ok(Some(other)),
        }
    })??;
    ensure!(
        mounts.contains("fuse"),
        "/workspace in the sandbox pod is not a FUSE mount: {mounts:?}"
    );
    cx.pod_exec(&pod, "echo from-pod > /workspace/p.txt")?;
    let out = cx.exec("box", "shell", "cat p.txt")?;
    ensure!(out == "from-pod\n", "the shell read {out:?} from p.txt");
    cx.exec("box", "shell", "echo from-shell > s.txt")?;
    let out = cx.pod_exec(&pod, "cat /workspace/s.txt")?;
    ensure!(out == "from-shell\n", "the pod read {out:?} from s.txt");
    let owner = cx.pod_exec(&pod, "id -u; stat -c %u /workspace/p.txt")?;
    Ok(format!(
        "Ready after {:.1} s; pod uid and file owner: {}",
        (start.elapsed()).as_secs_f64(),
        owner.split_whitespace().collect::<Vec<_>>().join("/")
    ))
}

/// `kubectl computer exec --runtime container` runs real binaries on the
/// same files.
pub(super) fn container_runtime(cx: &mut Context) -> Result<String> {
    // The pod turns Ready when its runner starts; the runner attaches to
    // the node agent a moment later, and the exec waits for it.
    let start = Instant::now();
    let out = cx.exec(
        "box",
        "container",
        "python3 -c 'print(open(\"p.txt\").read().strip())'",
    )?;
    ensure!(out == "from-pod\n", "python3 printed {out:?}");
    Ok(format!(
        "first container exec after {:.1} s",
        start.elapsed().as_secs_f64()
    ))
}

/// A sandbox pod stopped after its idle timeout is started again by the
/// next container exec, which waits for it, says so on stderr, and runs.
pub(super) fn idle_wake(cx: &mut Context) -> Result<String> {
    let image = cx.sandbox_image();
    cx.apply_computer(
        "nap",
        serde_json::json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": false, "container": true},
            "sandbox": {"image": image, "idleTimeoutSeconds": 15},
        }),
    )?;
    cx.wait_ready("nap", 180)?;
    // Use writes last-activity; 15 s later the operator stops the pod.
    cx.exec("nap", "container", "echo before > n.txt")?;
    eventually(120, "the sandbox pod of nap stopped as idle", || {
        let c = cx.computer("nap")?;
        let reason = c
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| text(c, "/type") == "SandboxReady")
            .map(|c| text(c, "/reason").to_string())
            .unwrap_or_default();
        let pod = cx.tools.kubectl_ok(&[
            "-n",
            NS,
            "get",
            "pod",
            "nap-sandbox",
            "--ignore-not-found",
            "-o",
            "name",
        ])?;
        if reason == "Idle" && pod.trim().is_empty() {
            Ok(Some(()))
        } else {
            bail!("SandboxReady reason {reason:?}, pod {:?}", pod.trim())
        }
    })?;
    let start = Instant::now();
    let out = cx.exec_output("nap", "container", "cat n.txt; echo woke")?;
    let took = start.elapsed();
    ensure!(
        out.code == 0 && out.stdout == "before\nwoke\n",
        "the exec on the stopped pod exited {}: stdout {:?}, stderr {:?}",
        out.code,
        out.stdout,
        out.stderr
    );
    ensure!(
        out.stderr
            .contains("sandbox pod nap-sandbox was stopped when idle; starting it")
            && out.stderr.contains("attached after"),
        "no progress message on stderr: {:?}",
        out.stderr
    );
    cx.time(
        "container exec on an idle-stopped pod (start included)",
        took,
    );
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        "nap",
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(format!("woke and ran in {:.1} s", took.as_secs_f64()))
}

/// A sandbox image that cannot be pulled: `SandboxReady=False` carries the
/// kubelet's reason and message, and a container exec is refused with it
/// while the in-process runtimes keep working.
pub(super) fn missing_image(cx: &mut Context) -> Result<String> {
    let image = format!("{}/does-not-exist:{}", cx.registry, cx.tag);
    cx.apply_computer(
        "noimg",
        serde_json::json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": false, "container": true},
            "sandbox": {"image": image},
        }),
    )?;
    cx.wait_ready("noimg", 180)?;
    let (reason, message) =
        eventually(120, "SandboxReady=False with the kubelet's reason", || {
            let c = cx.computer("noimg")?;
            let cond = c
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| text(c, "/type") == "SandboxReady")
                .cloned()
                .unwrap_or_default();
            let reason = text(&cond, "/reason").to_string();
            if matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff") {
                Ok(Some((reason, text(&cond, "/message").to_string())))
            } else {
                bail!("SandboxReady {cond}")
            }
        })?;
    ensure!(
        message.contains("container sandbox"),
        "the condition's message does not name the container: {message:?}"
    );
    let out = cx.exec_output("noimg", "container", "true")?;
    ensure!(
        out.code != 0
            && out.stderr.contains("cannot run")
            && (out.stderr.contains("ErrImagePull") || out.stderr.contains("ImagePullBackOff")),
        "the container exec was not refused with the kubelet's reason: exit {}, {:?}",
        out.code,
        out.stderr
    );
    let shell = cx.exec("noimg", "shell", "echo still-works")?;
    ensure!(shell == "still-works\n", "the shell printed {shell:?}");
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        "noimg",
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(format!("{reason}: {message}"))
}

/// An invalid manifest is refused by the API server with the CRD's
/// message; a computer's token opens no other computer.
pub(super) fn bad_input(cx: &mut Context) -> Result<String> {
    let bad = serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1",
        "kind": "AgentComputer",
        "metadata": {"name": "invalid", "namespace": NS},
        "spec": {"storage": {"size": "1Gi"}, "runtimes": {"container": true}},
    });
    let out = cx.tools.apply(&bad.to_string())?;
    ensure!(out.code != 0, "an invalid manifest was accepted");
    ensure!(
        out.stderr
            .contains("spec.sandbox (with at least its image) is required"),
        "the refusal does not carry the CRD's message: {}",
        out.stderr.trim()
    );

    // scratch's token, sent for box, through scratch's own port-forward.
    let forward = cx.tools.port_forward(NS, "scratch")?;
    let other = format!("{NS}/box");
    let out = cx.tools.cli(
        &[
            "--endpoint",
            &forward.endpoint,
            "--token",
            &forward.token,
            "exec",
            &other,
            "--",
            "cat p.txt",
        ],
        None,
    )?;
    ensure!(
        out.code != 0,
        "scratch's token read box's file: {:?}",
        out.stdout
    );
    // Answered as for a computer that does not exist: a token learns no
    // other tenant's computers.
    ensure!(
        out.stderr
            .contains("not found on this node for this credential"),
        "the refusal does not say why: {}",
        out.stderr.trim()
    );
    // ... while it still opens scratch.
    let out = cx
        .tools
        .cli(
            &[
                "--endpoint",
                &forward.endpoint,
                "--token",
                &forward.token,
                "exec",
                &format!("{NS}/scratch"),
                "--",
                "cat s.txt",
            ],
            None,
        )?
        .ok("exec through the port-forward")?;
    ensure!(out == "from-shell\n", "scratch's s.txt reads {out:?}");
    Ok(String::new())
}

/// MCP from outside the cluster: the official Python MCP client (the test
/// client of kubectl-computer/tests/mcp, in the virtual environment
/// scripts/mcp-python.sh makes) starts `kubectl computer -n e2e mcp
/// scratch` over stdio, which reaches the computer through the CLI's
/// cluster mode, and runs every tool: write, edit, read a range, ls, find,
/// grep, exec in the shell and JavaScript runtimes, a refused path, a
/// timeout, and a share link downloaded through the gateway.
pub(super) fn mcp_in_cluster(cx: &mut Context) -> Result<String> {
    let port = share_links_on(cx)?;
    let _forward = forward_to_gateway(cx, port)?;
    let python = cx
        .tools
        .run(std::path::Path::new("bash"), &["scripts/mcp-python.sh"])?
        .ok("scripts/mcp-python.sh")?;
    let client = cx.tools.repo.join("kubectl-computer/tests/mcp/client.py");
    let cli = std::fs::canonicalize(&cx.tools.cli).unwrap_or_else(|_| cx.tools.cli.clone());
    let start = Instant::now();
    let out = cx
        .tools
        .run(
            std::path::Path::new(python.trim()),
            &[
                &client.display().to_string(),
                "stdio",
                &cli.display().to_string(),
                "scratch",
                "-n",
                NS,
            ],
        )?
        .ok("the Python MCP client")?;
    let took = start.elapsed();
    let checks = out
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("ok: stdio "))
        .and_then(|n| n.parse::<u32>().ok())
        .with_context(|| format!("the MCP client did not finish: {out}"))?;
    ensure!(checks > 100, "the MCP client made only {checks} checks");
    let notes = cx
        .tools
        .cli(&["-n", NS, "cat", "scratch", "mcp-stdio/notes.md"], None)?
        .ok("kubectl computer cat")?;
    ensure!(
        notes.contains("status: final\n"),
        "the MCP client's edit is not in the computer: {notes:?}"
    );
    cx.time("MCP client's whole run against the cluster", took);
    Ok(format!("{checks} checks"))
}
