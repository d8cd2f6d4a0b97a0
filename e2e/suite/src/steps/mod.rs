//! The suite's steps, in the order they run. Each step is what a user does
//! and checks the result a user expects; a `required` step's failure stops
//! the run, since the steps after it build on what it made.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::tools::{Tools, condition, eventually, text};

mod backup;
mod dashboard;
mod doors;
mod examples;
mod failures;
mod gateway;
mod gateway_load;
mod git;
mod install;
mod lifecycle;
mod memory;
mod moves;
mod network;
mod nodes;
mod runtimes;
mod snapshots;
mod survival;

use install::*;
use lifecycle::*;
use network::*;
use runtimes::*;
use survival::*;

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
        name: "backup",
        required: false,
        run: backup::backup,
    },
    Step {
        name: "a computer from a ComputerSnapshot on another node",
        required: false,
        run: snapshots::fork_across_nodes,
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
        name: "git across the runtimes",
        required: false,
        run: git::across_runtimes,
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
        name: "the API gateway: exec and MCP by address and token",
        required: false,
        run: gateway::api_gateway,
    },
    Step {
        name: "the API gateway in the cluster: latency, load, upgrade",
        required: false,
        run: gateway_load::gateway_in_cluster,
    },
    Step {
        name: "MCP server on a computer in the cluster",
        required: false,
        run: mcp_in_cluster,
    },
    Step {
        name: "the kubernetes example",
        required: false,
        run: examples::kubernetes_example,
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
        name: "the Grafana dashboard's series are served",
        required: false,
        run: dashboard::dashboard_metrics,
    },
    Step {
        name: "a computer on each node works",
        required: false,
        run: nodes::computer_on_each_node,
    },
    Step {
        name: "a drained node's computers move",
        required: false,
        run: moves::drained_node_moves_its_computers,
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
    Step {
        name: "a lost node's computers fail over",
        required: false,
        run: moves::lost_node_fails_over,
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
    /// Values files given to every `helm upgrade` (`E2E_HELM_VALUES`).
    helm_values: Vec<PathBuf>,
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
            helm_values: std::env::var_os("E2E_HELM_VALUES")
                .map(|files| {
                    std::env::split_paths(&files)
                        .filter(|f| !f.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
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
        // The run's own values (e2e/run.sh: backups to the cluster's
        // object store) under every upgrade, before the step's.
        let files: Vec<String> = self
            .helm_values
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        for file in &files {
            args.extend(["-f", file.as_str()]);
        }
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
