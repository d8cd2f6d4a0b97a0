//! The suite's steps, in the order they run. Each step is what a user does
//! and checks the result a user expects; a `required` step's failure stops
//! the run, since the steps after it build on what it made.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use serde_json::Value;

use crate::tools::{Tools, condition, eventually, text};

mod doors;
mod failures;
mod memory;
mod nodes;

/// Namespace of the release.
const SYSTEM_NS: &str = "agentcomputer-system";
/// Namespace of the computers the suite makes.
const NS: &str = "e2e";
/// The CSI driver's name.
const DRIVER: &str = "agentcomputer.dev";

/// One step: its name, whether later steps need it, and what it does. `run`
/// returns a note printed beside `ok` (a measurement, a known limit).
pub struct Step {
    /// Name printed in the results.
    pub name: &'static str,
    /// Later steps need this one: a failure stops the run.
    pub required: bool,
    /// The step.
    pub run: fn(&mut Context) -> Result<String>,
}

/// Every step, in order.
pub const STEPS: &[Step] = &[
    Step {
        name: "helm install",
        required: true,
        run: helm_install,
    },
    Step {
        name: "example computer Ready",
        required: true,
        run: example_computer,
    },
    Step {
        name: "shell and javascript share files",
        required: false,
        run: shell_and_javascript,
    },
    Step {
        name: "sandbox pod mounts the volume",
        required: false,
        run: sandbox_pod,
    },
    Step {
        name: "container runtime via kubectl computer",
        required: false,
        run: container_runtime,
    },
    Step {
        name: "idle sandbox pod starts on exec",
        required: false,
        run: idle_wake,
    },
    Step {
        name: "missing sandbox image reported",
        required: false,
        run: missing_image,
    },
    Step {
        name: "egress on the pod network",
        required: false,
        run: egress,
    },
    Step {
        name: "allow-all keeps the node's own addresses out",
        required: false,
        run: egress_keeps_the_node_out,
    },
    Step {
        name: "allow-all computer Ready, metadata refused",
        required: false,
        run: failures::allow_all,
    },
    Step {
        name: "resize then deny-all cuts the sandbox off",
        required: false,
        run: failures::resize_then_deny,
    },
    Step {
        name: "a failed reconcile is a condition and an event",
        required: false,
        run: failures::failed_reconcile_visible,
    },
    Step {
        name: "three 600 MiB JavaScript execs leave the agent running",
        required: false,
        run: memory::js_memory_burst,
    },
    Step {
        name: "one sandbox cannot hold the node agent's API port",
        required: false,
        run: doors::one_sandbox_cannot_hold_the_agents_port,
    },
    Step {
        name: "bad input refused",
        required: false,
        run: bad_input,
    },
    Step {
        name: "running sandbox survives node agent restart",
        required: false,
        run: agent_restart,
    },
    Step {
        name: "helm upgrade keeps a running sandbox",
        required: false,
        run: upgrade_keeps_sandbox,
    },
    Step {
        name: "helm upgrade to TLS keeps computers",
        required: false,
        run: tls_upgrade,
    },
    Step {
        name: "share link through the gateway",
        required: false,
        run: share_gateway,
    },
    Step {
        name: "MCP server on a computer in the cluster",
        required: false,
        run: mcp_in_cluster,
    },
    Step {
        name: "deletion under Delete and Retain",
        required: false,
        run: deletion,
    },
    Step {
        name: "200 computers on one node",
        required: false,
        run: burst,
    },
    Step {
        name: "a computer on each node works",
        required: false,
        run: nodes::computer_on_each_node,
    },
    Step {
        name: "a drained node's computers stay listed",
        required: false,
        run: nodes::drained_node_listed,
    },
    Step {
        name: "a stopped node's computers come back",
        required: false,
        run: nodes::stopped_node_comes_back,
    },
];

/// What the steps share: the tools, the images, and measured timings.
pub struct Context {
    tools: Tools,
    registry: String,
    tag: String,
    /// The node agents' host directories, one per node.
    node_data: Option<Vec<PathBuf>>,
    timings: Vec<(String, Duration)>,
    /// The host port share links name, once the gateway is on.
    share_port: Option<u16>,
}

impl Context {
    /// A context over `tools`, the images named by the environment.
    pub fn new(tools: Tools) -> Context {
        Context {
            tools,
            registry: std::env::var("E2E_IMAGE_REGISTRY")
                .unwrap_or_else(|_| "localhost/agentcomputer-e2e".into()),
            tag: std::env::var("E2E_IMAGE_TAG").unwrap_or_else(|_| "e2e".into()),
            node_data: std::env::var_os("E2E_NODE_DATA_DIR")
                .map(|dirs| std::env::split_paths(&dirs).collect()),
            timings: Vec::new(),
            share_port: None,
        }
    }

    fn time(&mut self, what: impl Into<String>, d: Duration) {
        self.timings.push((what.into(), d));
    }

    /// Prints every timing measured by the steps.
    pub fn print_timings(&self) {
        if self.timings.is_empty() {
            return;
        }
        println!("timings:");
        for (what, d) in &self.timings {
            println!("  {what:<55} {:8.0} ms", d.as_secs_f64() * 1e3);
        }
    }

    /// `kubectl computer -n e2e exec NAME [--runtime R] -- SCRIPT`, requiring
    /// exit 0; returns stdout.
    fn exec(&self, name: &str, runtime: &str, script: &str) -> Result<String> {
        self.exec_output(name, runtime, script)?
            .ok(&format!("kubectl computer exec {name} --runtime {runtime}"))
    }

    /// `kubectl computer -n e2e exec NAME --runtime R -- SCRIPT`, whatever
    /// its exit status.
    fn exec_output(&self, name: &str, runtime: &str, script: &str) -> Result<crate::tools::Output> {
        self.tools.cli(
            &["-n", NS, "exec", name, "--runtime", runtime, "--", script],
            None,
        )
    }

    /// The AgentComputer `name` of the suite's namespace.
    fn computer(&self, name: &str) -> Result<Value> {
        self.tools
            .kubectl_json(&["-n", NS, "get", "agentcomputer", name])
    }

    /// Waits until computer `name` is Ready; returns how long that took.
    fn wait_ready(&self, name: &str, secs: u64) -> Result<Duration> {
        let start = Instant::now();
        eventually(secs, &format!("computer {name} Ready"), || {
            let c = self.computer(name)?;
            if condition(&c, "Ready") == "True" {
                Ok(Some(()))
            } else {
                bail!(
                    "phase {:?}, conditions {}",
                    text(&c, "/status/phase"),
                    c.pointer("/status/conditions")
                        .map(Value::to_string)
                        .unwrap_or_default()
                )
            }
        })?;
        Ok(start.elapsed())
    }

    /// `kubectl exec` into a pod of the suite's namespace, requiring exit 0.
    fn pod_exec(&self, pod: &str, script: &str) -> Result<String> {
        self.tools
            .kubectl_ok(&["-n", NS, "exec", pod, "--", "sh", "-c", script])
    }

    /// Applies a computer manifest of the suite's namespace.
    fn apply_computer(&self, name: &str, spec: Value) -> Result<()> {
        let manifest = serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        });
        self.tools
            .apply(&manifest.to_string())?
            .ok(&format!("kubectl apply of computer {name}"))?;
        Ok(())
    }

    fn sandbox_image(&self) -> String {
        format!("{}/sandbox:{}", self.registry, self.tag)
    }
}

/// `helm install` of the chart with the locally built images; the operator,
/// node agent and mounter become Ready, and the node's CSINode lists the
/// driver.
fn helm_install(cx: &mut Context) -> Result<String> {
    let start = Instant::now();
    cx.helm_upgrade(&[])?;
    cx.time("helm install --wait", start.elapsed());
    let start = Instant::now();
    cx.wait_release_ready()?;
    cx.time("helm install to every pod Ready", start.elapsed());
    eventually(60, "the CSINode to list agentcomputer.dev", || {
        let nodes = cx.tools.kubectl_json(&["get", "csinodes"])?;
        let listed = nodes["items"].as_array().into_iter().flatten().any(|n| {
            n.pointer("/spec/drivers")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|d| text(d, "/name") == DRIVER))
        });
        Ok(listed.then_some(()))
    })?;
    Ok(String::new())
}

/// The chart value letting the node agents reach the test namespace's pods.
const E2E_AGENT_EGRESS: &str = r#"egress.networkPolicy.extraTo=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"e2e"}}}]}]"#;

impl Context {
    /// `helm upgrade --install` of the chart with the suite's images and
    /// `extra` arguments, waiting up to 5 minutes.
    fn helm_upgrade(&self, extra: &[&str]) -> Result<()> {
        let registry = format!("image.registry={}", self.registry);
        let tag = format!("image.tag={}", self.tag);
        let mut args = vec![
            "upgrade",
            "--install",
            "ac",
            "charts/agent-computer",
            "-n",
            SYSTEM_NS,
            "--create-namespace",
            "--set",
            &registry,
            "--set",
            &tag,
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "operator.replicas=1",
            // Computers hibernate after 2 minutes unused (not the default
            // 5), so the burst step sees the agent's memory after
            // hibernation within the run, while its 200 first execs (about
            // 25 s, over a minute on a loaded machine) all land before the
            // first of them hibernates.
            "--set",
            "nodeAgent.idleTimeout=120s",
            // The test namespace's pods (the web server the egress steps
            // reach) are in the pod network's private range, which the
            // node agents' egress NetworkPolicy leaves out unless named.
            "--set-json",
            E2E_AGENT_EGRESS,
            "--wait",
            "--timeout",
            "5m",
        ];
        args.extend_from_slice(extra);
        self.tools.helm(&args)?.ok("helm upgrade --install")?;
        Ok(())
    }

    /// Waits until every pod of the release is Ready and each of the
    /// operator, node agent and mounter has one (`helm --wait` does not
    /// wait for every DaemonSet pod), with no pod terminating.
    fn wait_release_ready(&self) -> Result<()> {
        eventually(
            180,
            "the operator, node agent and mounter pods Ready",
            || {
                let pods = self.tools.kubectl_json(&["-n", SYSTEM_NS, "get", "pods"])?;
                let mut ready = Vec::new();
                for pod in pods["items"].as_array().into_iter().flatten() {
                    if !text(pod, "/metadata/deletionTimestamp").is_empty() {
                        bail!("pod {} is terminating", text(pod, "/metadata/name"));
                    }
                    let app = text(pod, "/metadata/labels/app.kubernetes.io~1name");
                    if condition(pod, "Ready") != "True" {
                        bail!("pod {} ({app}) is not Ready", text(pod, "/metadata/name"));
                    }
                    ready.push(app.to_string());
                }
                for app in [
                    "agentcomputer-operator",
                    "agentcomputer-node-agent",
                    "agentcomputer-mounter",
                ] {
                    if !ready.iter().any(|s| s == app) {
                        bail!("no pod of {app} in {SYSTEM_NS} (Ready: {ready:?})");
                    }
                }
                Ok(Some(()))
            },
        )?;
        Ok(())
    }
}

/// `kubectl apply` of the README's example (crds/examples/basic.yaml): the
/// computer becomes Ready and its PVC Bound.
fn example_computer(cx: &mut Context) -> Result<String> {
    cx.tools
        .apply(&format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"{NS}\"}}}}"
        ))?
        .ok("kubectl apply of the namespace")?;
    cx.tools
        .kubectl_ok(&["-n", NS, "apply", "-f", "crds/examples/basic.yaml"])?;
    let ready = cx.wait_ready("scratch", 120)?;
    cx.time("kubectl apply to Ready (example computer)", ready);
    let pvc = cx
        .tools
        .kubectl_json(&["-n", NS, "get", "pvc", "scratch-workspace"])?;
    ensure!(
        text(&pvc, "/status/phase") == "Bound",
        "PVC scratch-workspace is {:?}, not Bound",
        text(&pvc, "/status/phase")
    );
    Ok(format!("Ready after {:.1} s", ready.as_secs_f64()))
}

/// Through `kubectl computer` from outside the cluster: the shell writes a
/// file that JavaScript reads, and the other way round; first and warm
/// exec latency of both runtimes.
fn shell_and_javascript(cx: &mut Context) -> Result<String> {
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
fn sandbox_pod(cx: &mut Context) -> Result<String> {
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
fn container_runtime(cx: &mut Context) -> Result<String> {
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
fn idle_wake(cx: &mut Context) -> Result<String> {
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
fn missing_image(cx: &mut Context) -> Result<String> {
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

/// `helm upgrade` of the running release to serve the API over TLS (a
/// self-signed certificate made here): the agents restart, the computers
/// keep their files, `kubectl computer` speaks TLS through its
/// port-forward, and the replaced sandbox pod's runner attaches over TLS.
fn tls_upgrade(cx: &mut Context) -> Result<String> {
    let dir = tempfile_dir()?;
    let name = "node-agent.agentcomputer.test";
    make_certificates(&dir, name)?;
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "delete",
        "secret",
        "agent-tls",
        "--ignore-not-found",
    ])?;
    // A kubernetes.io/tls Secret with the issuing CA beside the pair, as
    // cert-manager writes it.
    let file = |f: &str| format!("--from-file={f}={}", dir.join(f).display());
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "create",
        "secret",
        "generic",
        "agent-tls",
        "--type=kubernetes.io/tls",
        &file("tls.crt"),
        &file("tls.key"),
        &file("ca.crt"),
    ])?;
    let _ = std::fs::remove_dir_all(&dir);
    let before = cx.exec("scratch", "shell", "cat s.txt")?;
    let start = Instant::now();
    let server_name = format!("nodeAgent.tls.serverName={name}");
    cx.helm_upgrade(&[
        "--set",
        "nodeAgent.tls.secretName=agent-tls",
        "--set",
        &server_name,
    ])?;
    cx.wait_release_ready()?;
    cx.time("helm upgrade to TLS to every pod Ready", start.elapsed());
    // The credential Secrets carry the CA once the operator reconciled.
    eventually(120, "the credential Secret to carry the agents' CA", || {
        let s = cx
            .tools
            .kubectl_json(&["-n", NS, "get", "secret", "scratch-credential"])?;
        Ok((!text(&s, "/data/ca.crt").is_empty()).then_some(()))
    })?;
    let after = eventually(120, "a shell exec over TLS", || {
        cx.exec("scratch", "shell", "cat s.txt").map(Some)
    })?;
    ensure!(
        after == before,
        "s.txt changed across the upgrade: {before:?} → {after:?}"
    );
    // The sandbox pod is replaced (new agent IP, the CA in its spec); the
    // exec waits for its runner, which attaches over TLS.
    let start = Instant::now();
    let out = eventually(180, "a container exec over TLS", || {
        cx.exec("box", "container", "cat p.txt").map(Some)
    })?;
    ensure!(out == "from-pod\n", "the container read {out:?} from p.txt");
    cx.time(
        "first container exec after the TLS upgrade",
        start.elapsed(),
    );
    let pod = cx
        .tools
        .kubectl_json(&["-n", NS, "get", "pod", "box-sandbox"])?;
    let has_ca = pod
        .pointer("/spec/containers/0/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|e| text(e, "/name") == "AGENTCOMPUTER_AGENT_CA");
    ensure!(
        has_ca,
        "the sandbox pod's runner was not given the agents' CA"
    );
    Ok(String::new())
}

/// Share links from outside the cluster: `helm upgrade` (keeping the
/// values so far) with share links on and the chart's gateway; a
/// `kubectl port-forward` to the gateway Service stands for the public
/// address links point at. A link made with `kubectl computer share`
/// downloads the file from this host through the gateway (the body,
/// `Content-Disposition`, a range); a tampered link gets 403.
fn share_gateway(cx: &mut Context) -> Result<String> {
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
fn share_links_on(cx: &mut Context) -> Result<u16> {
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
fn forward_to_gateway(cx: &Context, port: u16) -> Result<crate::tools::Background> {
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
fn curl(url: &str, extra: &[&str]) -> Result<(String, String)> {
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

/// MCP from outside the cluster: the official Python MCP client (the test
/// client of kubectl-computer/tests/mcp, in the virtual environment
/// scripts/mcp-python.sh makes) starts `kubectl computer -n e2e mcp
/// scratch` over stdio, which reaches the computer through the CLI's
/// cluster mode, and runs every tool: write, edit, read a range, ls, find,
/// grep, exec in the shell and JavaScript runtimes, a refused path, a
/// timeout, and a share link downloaded through the gateway.
fn mcp_in_cluster(cx: &mut Context) -> Result<String> {
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

/// Writes `ca.crt` (a CA made here) and `tls.crt`/`tls.key` (a P-256
/// end-entity certificate for DNS name `name`, signed by it) into `dir`,
/// with openssl(1).
fn make_certificates(dir: &std::path::Path, name: &str) -> Result<()> {
    let p = |f: &str| dir.join(f).display().to_string();
    std::fs::write(
        p("leaf.ext"),
        format!(
            "subjectAltName=DNS:{name}\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
        ),
    )?;
    let openssl = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("openssl").args(args).output()?;
        ensure!(
            out.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let (ca_key, ca_crt) = (p("ca.key"), p("ca.crt"));
    let (key, csr, crt, ext) = (p("tls.key"), p("tls.csr"), p("tls.crt"), p("leaf.ext"));
    let subject = format!("/CN={name}");
    openssl(
        &[
            &[
                "req",
                "-x509",
                "-days",
                "2",
                "-subj",
                "/CN=agentcomputer e2e CA",
            ][..],
            &ec,
            &["-keyout", &ca_key, "-out", &ca_crt],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req", "-subj", &subject][..],
            &ec,
            &["-keyout", &key, "-out", &csr],
        ]
        .concat(),
    )?;
    openssl(&[
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-extfile",
        &ext,
        "-out",
        &crt,
    ])
}

/// A fresh private directory under the system's temporary directory.
fn tempfile_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("e2e-tls-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Egress on the real pod network, enforced by a real NetworkPolicy
/// implementation: a computer whose allow-list names the test web server's
/// Service reaches it from the container runtime (through the node agent's
/// egress proxy, which knows the pod by its computer's token), from the
/// shell's `curl` and from JavaScript's `fetch` (both in the node agent);
/// a host off the list is refused by all three.
fn egress(cx: &mut Context) -> Result<String> {
    let web_image = std::env::var("E2E_WEB_IMAGE")
        .unwrap_or_else(|_| "localhost/agentcomputer-e2e/busybox:1".into());
    let web = serde_json::json!({
    "apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "web", "namespace": NS, "labels": {"app": "e2e-web"}},
         "spec": {"containers": [{"name": "web", "image": web_image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "mkdir -p /tmp/www && echo egress-ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"],
            "ports": [{"containerPort": 8080}]}]}},
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
fn egress_keeps_the_node_out(cx: &mut Context) -> Result<String> {
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

/// An invalid manifest is refused by the API server with the CRD's
/// message; a computer's token opens no other computer.
fn bad_input(cx: &mut Context) -> Result<String> {
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

/// The node agent pod is deleted (the DaemonSet makes a new one) while a
/// process in a sandbox pod appends to a file on /workspace: the
/// computers' files are all there afterwards, the sandbox pod is the same
/// pod (its spec names the node-local agent Service), its writer saw no
/// error and lost or repeated no line (the mounter kept the FUSE
/// connection; the new agent resumed it), and its runner reconnected.
/// Measures the longest gap between two of its writes: the pause the
/// restart cost it.
fn agent_restart(cx: &mut Context) -> Result<String> {
    let selector = "app.kubernetes.io/name=agentcomputer-node-agent";
    let old = release_pods(cx, selector)?;
    ensure!(!old.is_empty(), "no node agent pod");
    let sandbox_before = text(&cx.computer("box")?, "/status/sandboxPod").to_string();
    ensure!(
        !sandbox_before.is_empty(),
        "computer box has no sandbox pod"
    );
    let uid_before = pod_uid(cx, &sandbox_before)?;
    start_writer(cx, &sandbox_before)?;
    let start = Instant::now();
    replace_pods(cx, selector, "node agent", 180)?;
    cx.time("node agent pod deleted to new pod Ready", start.elapsed());
    let out = eventually(60, "an exec after the restart", || {
        Ok(Some(cx.exec("scratch", "shell", "cat s.txt j.txt")?))
    })?;
    ensure!(
        out == "from-shell\nfrom-js\n",
        "after the restart the files read {out:?}"
    );
    // The sandbox pod that ran across the restart is the same pod (its
    // spec names the node-local agent Service, not the agent pod), and its
    // writer never saw an error: the mounter kept the FUSE connection and
    // the new agent resumed it; requests made meanwhile waited.
    let pause = finish_writer(cx, &sandbox_before, &uid_before)?;
    cx.time(
        "longest gap between a running sandbox's writes across the restart",
        pause,
    );
    // The same pod's shell sees a file the shell runtime wrote after the
    // restart, and its runner reconnected: a container exec reads what the
    // pod wrote before.
    cx.exec("box", "shell", "echo after-restart > after.txt")?;
    let seen = cx.pod_exec(&sandbox_before, "cat /workspace/after.txt")?;
    ensure!(seen == "after-restart\n", "the sandbox pod read {seen:?}");
    let ran = eventually(60, "a container exec after the restart", || {
        match cx.exec("box", "container", "cat p.txt") {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        }
    })??;
    ensure!(
        ran == "from-pod\n",
        "the container read {ran:?} after the restart"
    );
    ensure!(
        pod_uid(cx, &sandbox_before)? == uid_before,
        "the sandbox pod was replaced after the restart"
    );
    Ok(format!(
        "sandbox pod kept; 600 writes across the restart, none lost, longest gap {} ms",
        pause.as_millis()
    ))
}

/// `helm upgrade` with changed values for both DaemonSets while a process
/// in the box's sandbox pod writes to `/workspace`: every node agent pod is
/// replaced, the mounter (updated `OnDelete`) is not, the sandbox pod is
/// kept and its writer sees no error and loses nothing; computers stay
/// Ready and container execs run. Then the mounter is replaced by hand and
/// the agent restarted after it: the writer again sees nothing (the new
/// mounter took the connections back from the agent).
fn upgrade_keeps_sandbox(cx: &mut Context) -> Result<String> {
    let agents = "app.kubernetes.io/name=agentcomputer-node-agent";
    let mounters = "app.kubernetes.io/name=agentcomputer-mounter";
    let names = |cx: &Context, selector: &str| -> Result<Vec<String>> {
        Ok(release_pods(cx, selector)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    };
    let pod = text(&cx.computer("box")?, "/status/sandboxPod").to_string();
    ensure!(!pod.is_empty(), "computer box has no sandbox pod");
    let uid = pod_uid(cx, &pod)?;
    let (old_agents, old_mounters) = (names(cx, agents)?, names(cx, mounters)?);
    start_writer(cx, &pod)?;
    let start = Instant::now();
    cx.helm_upgrade(&[
        "--set",
        "nodeAgent.terminationGracePeriodSeconds=31",
        "--set",
        "mounter.logLevel=debug",
    ])?;
    eventually(180, "every node agent pod replaced and Ready", || {
        let now = names(cx, agents)?;
        Ok((!now.is_empty() && now.iter().all(|n| !old_agents.contains(n))).then_some(()))
    })?;
    cx.wait_release_ready()?;
    cx.time(
        "helm upgrade to every node agent replaced and Ready",
        start.elapsed(),
    );
    ensure!(
        names(cx, mounters)? == old_mounters,
        "the upgrade replaced the mounter (updateStrategy OnDelete expected)"
    );
    let upgrade_pause = finish_writer(cx, &pod, &uid)?;
    cx.time(
        "longest gap of a running sandbox's writes across helm upgrade",
        upgrade_pause,
    );
    ensure!(
        condition(&cx.computer("box")?, "Ready") == "True",
        "computer box is not Ready after the upgrade"
    );

    // The mounter replaced by hand (as OnDelete expects), then the agent:
    // the connection must have been given back to the new mounter.
    start_writer(cx, &pod)?;
    replace_pods(cx, mounters, "mounter", 120)?;
    // Time for the new mounter to take the connections back from the agent.
    std::thread::sleep(Duration::from_secs(3));
    replace_pods(cx, agents, "node agent", 120)?;
    let mounter_pause = finish_writer(cx, &pod, &uid)?;
    cx.time(
        "longest gap of a running sandbox's writes, mounter then agent replaced",
        mounter_pause,
    );
    let ran = eventually(60, "a container exec after the upgrade", || {
        match cx.exec("box", "container", "cat p.txt") {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        }
    })??;
    ensure!(ran == "from-pod\n", "the container read {ran:?}");
    Ok(format!(
        "sandbox pod kept; longest write gap {} ms across the upgrade, {} ms across a mounter then agent replacement",
        upgrade_pause.as_millis(),
        mounter_pause.as_millis()
    ))
}

/// The release's pods matching `selector`: name and whether Ready.
fn release_pods(cx: &Context, selector: &str) -> Result<Vec<(String, bool)>> {
    let pods = cx
        .tools
        .kubectl_json(&["-n", SYSTEM_NS, "get", "pods", "-l", selector])?;
    Ok(pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                text(p, "/metadata/name").to_string(),
                condition(p, "Ready") == "True",
            )
        })
        .collect())
}

/// Deletes the release's pods matching `selector` (waiting for them to go)
/// and waits up to `secs` until a new one of them is Ready.
fn replace_pods(cx: &Context, selector: &str, what: &str, secs: u64) -> Result<()> {
    let old: Vec<String> = release_pods(cx, selector)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "delete",
        "pods",
        "-l",
        selector,
        "--wait=true",
    ])?;
    eventually(secs, &format!("a new {what} pod Ready"), || {
        Ok(release_pods(cx, selector)?
            .iter()
            .any(|(n, ready)| *ready && !old.contains(n))
            .then_some(()))
    })
}

/// Starts, in sandbox pod `pod`, a writer that appends one numbered, timed
/// line to `/workspace/tick.log` every 50 ms for 30 s (600 lines), failures
/// into `/tmp/tick.err` (outside the volume); returns once it has written.
fn start_writer(cx: &Context, pod: &str) -> Result<()> {
    // `setsid` detaches the writer from the exec session, so it lives on
    // after `kubectl exec` returns.
    cx.pod_exec(
        pod,
        "rm -f /workspace/tick.log /tmp/tick.err /tmp/tick.done; \
         setsid sh -c 'i=1; while [ $i -le 600 ]; do \
           echo \"$i $(date +%s%N)\" >> /workspace/tick.log || echo \"$i $?\" >> /tmp/tick.err; \
           i=$((i+1)); sleep 0.05; done; touch /tmp/tick.done' >/dev/null 2>&1 < /dev/null &",
    )?;
    eventually(20, "the writer in the sandbox pod to start", || {
        Ok(cx
            .pod_exec(pod, "test -s /workspace/tick.log && echo yes")
            .ok()
            .filter(|o| o.trim() == "yes"))
    })?;
    Ok(())
}

/// Waits for the writer of [`start_writer`] in `pod` to finish, checks that
/// the pod is still the one with uid `uid`, that no write failed and that
/// all 600 lines are there once and in order; returns the longest gap
/// between two writes.
fn finish_writer(cx: &Context, pod: &str, uid: &str) -> Result<Duration> {
    eventually(90, "the writer in the sandbox pod to finish", || {
        Ok(cx
            .pod_exec(pod, "test -e /tmp/tick.done && echo yes")
            .ok()
            .filter(|o| o.trim() == "yes"))
    })?;
    ensure!(
        pod_uid(cx, pod)? == uid,
        "the operator replaced the sandbox pod while its writer ran"
    );
    let errors = cx.pod_exec(pod, "cat /tmp/tick.err 2>/dev/null; true")?;
    ensure!(
        errors.trim().is_empty(),
        "writes to /workspace failed while the writer ran: {}",
        errors.trim()
    );
    let log = cx.pod_exec(pod, "cat /workspace/tick.log")?;
    let mut times = Vec::new();
    for (n, line) in log.lines().enumerate() {
        let (i, ns) = line
            .split_once(' ')
            .ok_or_else(|| anyhow!("tick.log line {} is {line:?}", n + 1))?;
        ensure!(
            i == (n + 1).to_string(),
            "tick.log line {} is {line:?}: a write was lost or repeated",
            n + 1
        );
        times.push(ns.parse::<u128>()?);
    }
    ensure!(
        times.len() == 600,
        "tick.log has {} lines, not 600",
        times.len()
    );
    let pause = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(0);
    let pause = Duration::from_nanos(pause as u64);
    Ok(pause)
}

/// The uid of pod `name` of the suite's namespace ("" when it is gone).
fn pod_uid(cx: &Context, name: &str) -> Result<String> {
    let out = cx.tools.kubectl(&[
        "-n",
        NS,
        "get",
        "pod",
        name,
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;
    Ok(if out.code == 0 {
        out.stdout.trim().to_string()
    } else {
        String::new()
    })
}

/// Deleting computers: under Delete, the PV, PVC, Secret, NetworkPolicy and
/// database go; under Retain the database stays.
fn deletion(cx: &mut Context) -> Result<String> {
    let mut notes = Vec::new();
    for (name, keeps) in [("scratch", false), ("box", true)] {
        let c = cx.computer(name)?;
        let uid = text(&c, "/metadata/uid").to_string();
        cx.tools.kubectl_ok(&[
            "-n",
            NS,
            "delete",
            "agentcomputer",
            name,
            "--wait=true",
            "--timeout=120s",
        ])?;
        let pv = format!("agentcomputer-{uid}");
        // Under Retain the volume (PV and PVC) stays for a later computer
        // of the same name; everything else goes under both policies.
        let mut gone = vec![
            ("secret", format!("{name}-credential"), Some(NS)),
            ("networkpolicy", format!("{name}-egress"), Some(NS)),
            ("pod", format!("{name}-sandbox"), Some(NS)),
        ];
        if !keeps {
            gone.push(("pv", pv.clone(), None));
            gone.push(("pvc", format!("{name}-workspace"), Some(NS)));
        }
        eventually(120, &format!("the objects of {name} to go"), || {
            let mut left = Vec::new();
            for (kind, obj, ns) in gone.iter().cloned() {
                let mut args = vec!["get", kind, &obj, "--ignore-not-found", "-o", "name"];
                if let Some(ns) = ns {
                    args.extend(["-n", ns]);
                }
                if !cx.tools.kubectl_ok(&args)?.trim().is_empty() {
                    left.push(format!("{kind}/{obj}"));
                }
            }
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("still there: {}", left.join(", "))
            }
        })?;
        if keeps {
            let kept = cx.tools.kubectl_json(&["get", "pv", &pv])?;
            ensure!(
                text(
                    &kept,
                    "/metadata/annotations/agentcomputer.dev~1retained-from"
                ) == format!("{NS}/{name}"),
                "Retain: PV {pv} lacks agentcomputer.dev/retained-from"
            );
        }
        match &cx.node_data {
            Some(dirs) => {
                // On whichever node it was: the database is in one of them.
                let dbs: Vec<PathBuf> = dirs
                    .iter()
                    .map(|d| d.join("data/computers").join(&uid))
                    .collect();
                let shown = || {
                    dbs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                };
                if keeps {
                    ensure!(
                        dbs.iter().any(|db| db.exists()),
                        "Retain: {} is gone",
                        shown()
                    );
                } else {
                    eventually(60, &format!("{} to go", shown()), || {
                        Ok((!dbs.iter().any(|db| db.exists())).then_some(()))
                    })?;
                }
            }
            None => notes.push("database files not checked (E2E_NODE_DATA_DIR unset)"),
        }
        if keeps {
            // Released by hand, as a user would, so that the suite can run
            // again on the same cluster.
            let pvc = format!("{name}-workspace");
            cx.tools
                .kubectl_ok(&["-n", NS, "delete", "pvc", &pvc, "--timeout=60s"])?;
            cx.tools
                .kubectl_ok(&["delete", "pv", &pv, "--timeout=60s"])?;
        }
    }
    Ok(notes.join("; "))
}

/// How many computers the burst step applies at once.
const BURST: usize = 200;

/// Clients that run the burst's first execs side by side.
const BURST_CLIENTS: usize = 4;

/// `BURST` computers applied at once (one `kubectl apply` of a List), all
/// on the node of the first Ready node agent (their `nodeSelector`), all
/// reach Ready; the first shell exec of each succeeds; that node agent's
/// resident memory (its `process_resident_memory_bytes`, read through the
/// API server's pod proxy) is measured with them all open and again after
/// they hibernate; then they are deleted.
fn burst(cx: &mut Context) -> Result<String> {
    let agent = agent_pod(cx)?;
    let node = text(&agent, "/spec/nodeName").to_string();
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{i:03}")).collect();
    let items: Vec<Value> = names
        .iter()
        .map(|n| {
            serde_json::json!({
                "apiVersion": "agentcomputer.dev/v1alpha1",
                "kind": "AgentComputer",
                "metadata": {"name": n, "namespace": NS, "labels": {"e2e/burst": "1"}},
                "spec": {"storage": {"size": "16Mi"},
                         "nodeSelector": {"kubernetes.io/hostname": node}},
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let start = Instant::now();
    cx.tools
        .apply(&list.to_string())?
        .ok("kubectl apply of the burst")?;
    let mut last_ready = 0;
    eventually(600, &format!("{BURST} computers Ready"), || {
        let all =
            cx.tools
                .kubectl_json(&["-n", NS, "get", "agentcomputers", "-l", "e2e/burst=1"])?;
        let ready = all["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| condition(c, "Ready") == "True")
            .count();
        last_ready = ready;
        Ok((ready == BURST).then_some(()))
    })
    .map_err(|e| anyhow!("{e:#} ({last_ready} of {BURST} Ready)"))?;
    let all_ready = start.elapsed();
    cx.time(
        format!("{BURST} computers: kubectl apply to all Ready"),
        all_ready,
    );
    // Four clients at a time, so all the first execs land well within the
    // agent's idle timeout (120 s here) and every computer is open when the
    // memory is read.
    let ctx: &Context = cx;
    let results: Vec<Result<Vec<Duration>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = names
            .chunks(BURST.div_ceil(BURST_CLIENTS))
            .map(|chunk| {
                scope.spawn(move || {
                    let mut took = Vec::with_capacity(chunk.len());
                    for name in chunk {
                        let t = Instant::now();
                        let out = ctx.exec(name, "shell", "echo ok-$((20+22))")?;
                        took.push(t.elapsed());
                        ensure!(out == "ok-42\n", "first exec on {name} printed {out:?}");
                    }
                    Ok(took)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(anyhow!("an exec client panicked")))
            })
            .collect()
    });
    let mut latencies = Vec::with_capacity(BURST);
    for r in results {
        latencies.extend(r?);
    }
    let execs_done = start.elapsed() - all_ready;
    latencies.sort();
    let p50 = latencies[BURST / 2];
    let max = latencies[BURST - 1];
    cx.time(
        format!("{BURST} computers: first shell exec each, median"),
        p50,
    );
    cx.time(
        format!("{BURST} computers: first shell exec each, slowest"),
        max,
    );
    cx.time(
        format!("{BURST} computers: all first execs, {BURST_CLIENTS} clients"),
        execs_done,
    );
    let open = agent_metrics(cx, &agent)?;
    let open_computers = metric(&open, r#"agentcomputer_node_computers{state="open"}"#)?;
    ensure!(
        open_computers >= BURST as f64,
        "the node agent has {open_computers} computers open right after their execs, fewer than {BURST}"
    );
    let rss_open = metric(&open, "process_resident_memory_bytes")?;
    // The chart's idle timeout is 120 s here (helm_upgrade).
    let hibernated = eventually(300, "the burst's computers to hibernate", || {
        let m = agent_metrics(cx, &agent)?;
        let still_open = metric(&m, r#"agentcomputer_node_computers{state="open"}"#)?;
        Ok((still_open < 10.0).then_some(m))
    })?;
    let rss_idle = metric(&hibernated, "process_resident_memory_bytes")?;
    let mib = |b: f64| b / (1024.0 * 1024.0);
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputers",
        "-l",
        "e2e/burst=1",
        "--wait=true",
        "--timeout=300s",
    ])?;
    Ok(format!(
        "on {node}: all Ready {:.1} s after apply; first exec median {} ms, slowest {} ms; \
         agent RSS {:.0} MiB with {open_computers} open, {:.0} MiB after they hibernated",
        all_ready.as_secs_f64(),
        p50.as_millis(),
        max.as_millis(),
        mib(rss_open),
        mib(rss_idle),
    ))
}

/// The first Ready node agent pod, by node name.
fn agent_pod(cx: &Context) -> Result<Value> {
    let pods = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=agentcomputer-node-agent",
    ])?;
    let mut ready: Vec<Value> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| condition(p, "Ready") == "True")
        .cloned()
        .collect();
    ready.sort_by(|a, b| text(a, "/spec/nodeName").cmp(text(b, "/spec/nodeName")));
    ready
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("no Ready node agent pod"))
}

/// The `/metrics` text of the node agent on `agent`'s node (the pod may
/// have been replaced since), through the API server's pod proxy.
fn agent_metrics(cx: &Context, agent: &Value) -> Result<String> {
    let node = text(agent, "/spec/nodeName");
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
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| condition(p, "Ready") == "True")
        .ok_or_else(|| anyhow!("no Ready node agent pod on {node}"))?;
    let name = text(pod, "/metadata/name");
    cx.tools.kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{SYSTEM_NS}/pods/{name}:9090/proxy/metrics"),
    ])
}

/// The value of the sample line that starts with `series` (name and labels
/// exactly as exposed).
fn metric(text: &str, series: &str) -> Result<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .ok_or_else(|| anyhow!("no {series} in the node agent's metrics"))?
        .trim()
        .parse()
        .map_err(|e| anyhow!("{series}: {e}"))
}
