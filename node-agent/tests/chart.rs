//! The Helm chart's node-agent DaemonSet starts the real `node-agent`
//! binary with arguments it accepts (an argument the binary does not know
//! would crash-loop every node's agent). Renders the chart with the Helm
//! the API server tests use.

#[path = "../../operator/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

#[test]
fn the_chart_starts_node_agent_with_arguments_it_accepts() {
    if support::skipped() {
        return;
    }
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/agent-computer");
    let out = Command::new(support::tools_bin().join("helm"))
        .arg("template")
        .arg("ac")
        .arg(&chart)
        .args(["--namespace", support::SYSTEM_NS])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).unwrap();
    let container = serde_yaml::Deserializer::from_str(&rendered)
        .map(|doc| serde_json::Value::deserialize(doc).unwrap())
        .filter(|v| v["kind"] == "DaemonSet")
        .flat_map(|v| {
            v["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["command"] == serde_json::json!(["node-agent"]))
        .expect("a DaemonSet container running node-agent");
    // The kubelet expands $(VAR) from the container's environment.
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(NODE_NAME)", "n1")
                .replace("$(POD_NAMESPACE)", support::SYSTEM_NS)
        })
        .collect();
    assert_eq!(
        args.first().map(String::as_str),
        Some("cluster"),
        "{args:?}"
    );
    // Without a Kubernetes client the agent stops right after parsing its
    // arguments, before it binds or creates anything.
    let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(&args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "node-agent {args:?}: {stderr}");
    assert!(
        stderr.contains("no Kubernetes client"),
        "node-agent {args:?} failed before reaching the API server: {stderr}"
    );
}
