//! `e2e-suite`: Agent Computer on a real Kubernetes cluster, driven the way
//! a user drives it — `helm install` of the chart, `kubectl apply` of
//! computers, `kubectl computer` from outside the cluster, `kubectl exec`
//! into sandbox pods.
//!
//! Every step prints `ok`/`FAILED` with its duration; a failed step that
//! later ones need stops the run. Exit status 0 when every step passed.
//! `e2e/run.sh` brings a cluster up and runs this against it; any cluster
//! with the product images loaded works (see docs/e2e.md). `e2e-suite
//! grpc-bench ...` is the gRPC client a step runs inside the cluster's
//! network ([`grpc_bench`]).
//!
//! Environment: `KUBECONFIG` (required), `E2E_KUBECTL`, `E2E_HELM`,
//! `E2E_CLI` (kubectl-computer), `E2E_REPO` (the repository, for the chart
//! and examples), `E2E_IMAGE_REGISTRY` and `E2E_IMAGE_TAG` (of the product
//! images, default `localhost/agentcomputer-e2e` and `e2e`),
//! `E2E_NODE_DATA_DIR` (the node agents' host directories as this process
//! sees them, one per node, `:`-separated, for the checks on database files;
//! unset skips those checks and says so), `E2E_WEB_IMAGE` (an image with busybox `httpd` for the egress
//! step's web server, default `localhost/agentcomputer-e2e/busybox:1`),
//! `E2E_ONLY` (comma-separated step names to run, with the steps they
//! need), `E2E_HELM_VALUES` (values files, `:`-separated, given to every
//! `helm upgrade` of the chart; `e2e/run.sh` names one that configures
//! backups to the cluster's object store, without which the backup step
//! skips), `E2E_NODE_CTL` (a command `CTL stop|start NODE` that stops a
//! node's kubelet, containerd and node agent and starts them again, such as
//! `e2e/cluster/node`; unset skips the step that needs it). `e2e/kind/run.sh` runs it on a kind cluster.

mod grpc_bench;
mod steps;
mod tools;

use std::process::ExitCode;
use std::time::Instant;

use steps::{Context, STEPS};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    if let Some(sub) = args.next() {
        if sub != "grpc-bench" {
            eprintln!(
                "e2e-suite: unknown subcommand {sub:?} (grpc-bench, or none to run the suite)"
            );
            return ExitCode::from(2);
        }
        return match grpc_bench::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("e2e-suite grpc-bench: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let tools = match tools::Tools::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("e2e-suite: {e:#}");
            return ExitCode::from(2);
        }
    };
    let only: Option<Vec<String>> = std::env::var("E2E_ONLY")
        .ok()
        .map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    let mut cx = Context::new(tools);
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for step in STEPS {
        let named = only
            .as_ref()
            .is_some_and(|only| only.iter().any(|o| o == step.name));
        if only.is_some() && !step.required && !named {
            continue;
        }
        let t = Instant::now();
        let result = (step.run)(&mut cx);
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(note) => {
                println!(
                    "ok      {:<40} {secs:7.1} s{}",
                    step.name,
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!("  {note}")
                    }
                );
                passed.push(step.name);
            }
            Err(e) => {
                println!("FAILED  {:<40} {secs:7.1} s  {e:#}", step.name);
                failed.push(step.name);
                if step.required {
                    println!("stopping: later steps need {}", step.name);
                    break;
                }
            }
        }
    }
    cx.print_timings();
    println!(
        "{} passed, {} failed in {:.0} s{}",
        passed.len(),
        failed.len(),
        started.elapsed().as_secs_f64(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" (failed: {})", failed.join(", "))
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
