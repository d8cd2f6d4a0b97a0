//! The examples that need a cluster (examples/README.md), run as a user
//! runs them against this cluster.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};

use super::*;

/// `examples/kubernetes/run.sh` with the chart already installed
/// (`SKIP_INSTALL=1`) and the suite's sandbox image: a computer with the
/// container runtime, a build in its sandbox pod, the artifact seen from
/// the shell runtime; the example deletes its namespace at the end.
pub(super) fn kubernetes_example(cx: &mut Context) -> Result<String> {
    let start = Instant::now();
    let script = cx.tools.repo.join("examples/kubernetes/run.sh");
    let out = Command::new("bash")
        .arg(&script)
        .current_dir(&cx.tools.repo)
        .env("KUBECONFIG", &cx.tools.kubeconfig)
        .env("KUBECTL", &cx.tools.kubectl)
        .env("HELM", &cx.tools.helm)
        .env("KUBECTL_COMPUTER", &cx.tools.cli)
        .env("SKIP_INSTALL", "1")
        .env("SANDBOX_IMAGE", cx.sandbox_image())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success()
            && stdout.contains("ok: built in the sandbox pod, stored in the computer"),
        "examples/kubernetes/run.sh: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(format!(
        "built and ran greet.pyz in its sandbox pod; {:.0} s with the namespace's cleanup",
        start.elapsed().as_secs_f64()
    ))
}
