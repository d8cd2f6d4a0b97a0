//! Bad settings stop the gateway at start with a message that names them,
//! before it listens or reaches the Kubernetes API.

use std::process::Command;

fn gateway(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentcomputer-gateway"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(args)
        // No cluster to find: a start that got past its checks would fail
        // on this instead.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("listening on"), "listened: {stdout}");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_settings_are_named() {
    let (ok, err) = gateway(&["--per-token-rate", "0"]);
    assert!(
        !ok && err.contains("--per-token-rate must be a positive number"),
        "{err}"
    );
    let (ok, err) = gateway(&["--per-computer-in-flight", "0"]);
    assert!(!ok && err.contains("--per-computer-in-flight"), "{err}");
    let (ok, err) = gateway(&["--tls-cert", "/nonexistent/tls.crt"]);
    assert!(!ok && err.contains("--tls-key"), "{err}");
    let (ok, err) = gateway(&[
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        "/nonexistent/tls.key",
    ]);
    assert!(
        !ok && err.contains("cannot read the certificate /nonexistent/tls.crt"),
        "{err}"
    );
    let (ok, err) = gateway(&["--agent-ca-cert", "/nonexistent/ca.crt"]);
    assert!(
        !ok && err.contains("cannot read --agent-ca-cert /nonexistent/ca.crt"),
        "{err}"
    );
    let (ok, err) = gateway(&["--mcp", "maybe"]);
    assert!(!ok && err.contains("--mcp"), "{err}");
    // Good settings without a cluster: the Kubernetes client is what fails.
    let (ok, err) = gateway(&[]);
    assert!(!ok && err.contains("no Kubernetes client"), "{err}");
}
