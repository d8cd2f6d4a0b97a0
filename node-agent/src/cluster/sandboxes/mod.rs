//! The container runtime in a cluster: execs run in the computer's sandbox
//! pod, by the `agentcomputer-runner` there, which dials this agent
//! (`SandboxRunner.Attach`) and keeps the stream open.
//!
//! The pod dials the agent rather than the agent reaching into the pod, so
//! the unprivileged agent needs neither `pods/exec` (cluster-wide RBAC for
//! a DaemonSet) nor the node's CRI socket (host access);
//! docs/container-runtime.md has the trade-off. A runner proves which
//! computer it serves with that computer's token, checked by the same
//! [`Authorizer`] as every call.
//!
//! [`Sandboxes`] holds one attached runner per computer uid (a later
//! attach replaces the earlier one and ends its stream) and implements
//! [`ContainerRuntime`]: a run is sent as `start`, its output and exit come
//! back as events, cancellation becomes `cancel`, and a stream that breaks
//! ends its runs with an error (the runner kills their process groups).
//!
//! A container exec for a computer whose runner is not attached waits for
//! it ([`ContainerRuntime::prepare`]): it writes the computer's
//! `last-activity` annotation at once, which makes the operator start a
//! sandbox pod stopped when idle, then follows the `SandboxReady`
//! condition, telling the caller each step, until the runner attaches, the
//! kubelet or the API server gives a reason the pod cannot run, the pod is
//! Ready for [`wait::ATTACH_GRACE`] without its runner attaching, or
//! [`wait::START_TIMEOUT`] passes. Waits and runs rewrite the annotation every
//! [`wait::RENEW`] (once per computer) so the pod is not stopped in use.
//!
//! One idea per file: [`attach`] is the `SandboxRunner.Attach` service and
//! its protocol check, a runner's registration and its events handed to
//! their runs; [`wait`] is an exec's wait for its computer's sandbox pod
//! and the `last-activity` renewal that keeps the pod up; [`run`] is a run
//! sent down an attached runner's stream. This file holds the runners by
//! computer and their gauge.

mod attach;
mod run;
mod wait;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentcomputer_container::{Outcome, OutputChunk};
use agentcomputer_proto::v1 as pb;
use pb::runner_event::Event;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::activity::Activity;
use super::index::Index;
use crate::api::container_runtime::{ContainerRun, ContainerRuntime};
use crate::auth::Authorizer;

/// The runners attached to this agent, by computer uid.
pub struct Sandboxes {
    index: Arc<Index>,
    auth: Arc<dyn Authorizer>,
    /// Reads computers' conditions and writes their `last-activity`.
    client: kube::Client,
    /// Where runs record use (the status reporter publishes it).
    activity: Arc<Activity>,
    attached: Mutex<HashMap<String, Arc<Runner>>>,
    /// Woken on every attach, for execs waiting for a runner.
    attach_seen: Notify,
    /// When each computer's `last-activity` was last written from here.
    touched: Mutex<HashMap<String, Instant>>,
    next_id: AtomicU64,
    /// `agentcomputer_node_sandbox_runners`: runners attached now.
    gauge: prometheus::IntGauge,
    /// Set by [`Sandboxes::stop`]: a runner's stream ends with its last run.
    stopping: std::sync::atomic::AtomicBool,
    /// The refusals of the node's egress proxy, which sandbox pods use.
    denials: agentcomputer_proxy::Denials,
}

/// One attached runner: its command stream and its runs in flight.
struct Runner {
    /// Distinguishes this attachment from a later one of the same computer.
    id: u64,
    /// The attach protocol revision it speaks (`RunnerHello.protocol`).
    protocol: u32,
    commands: mpsc::Sender<Result<pb::RunnerCommand, Status>>,
    /// Runs started on this stream: run id → where their events go.
    runs: Mutex<HashMap<u64, mpsc::Sender<Event>>>,
    /// Ends the stream (on replacement or when the runner's side ended).
    closed: CancellationToken,
}

impl Runner {
    fn runs(&self) -> parking_lot::MutexGuard<'_, HashMap<u64, mpsc::Sender<Event>>> {
        self.runs.lock()
    }
}

impl Sandboxes {
    /// No runner attached yet; `auth` checks the runners' tokens, `index`
    /// names computers, `client` reads and annotates their resources and
    /// `activity` records their use.
    pub fn new(
        index: Arc<Index>,
        auth: Arc<dyn Authorizer>,
        client: kube::Client,
        activity: Arc<Activity>,
    ) -> Sandboxes {
        Sandboxes {
            index,
            auth,
            client,
            activity,
            attached: Mutex::default(),
            attach_seen: Notify::new(),
            touched: Mutex::default(),
            next_id: AtomicU64::new(1),
            gauge: prometheus::IntGauge::new(
                "agentcomputer_node_sandbox_runners",
                "Sandbox pod runners attached to this node agent (one per computer at most)",
            )
            .expect("valid metric"),
            stopping: std::sync::atomic::AtomicBool::new(false),
            denials: agentcomputer_proxy::Denials::new(),
        }
    }

    /// The same runner registry reporting the refusals `denials` records
    /// (those of the node's egress proxy).
    pub fn with_egress_denials(mut self, denials: agentcomputer_proxy::Denials) -> Sandboxes {
        self.denials = denials;
        self
    }

    /// The agent is stopping: ends the stream of every runner with no run
    /// in flight now, and each other runner's as soon as its last run ends.
    /// Runners reconnect with backoff and find the next agent process (the
    /// sandbox pod itself stays). An attach stream never ends by itself, so
    /// without this a stopping agent would wait its whole shutdown grace
    /// for the sandboxes of its node before it lets the next one start.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for runner in self.attached().values() {
            if runner.runs().is_empty() {
                runner.closed.cancel();
            }
        }
    }

    /// Forgets run `run_id` of `runner`; when the agent is stopping and
    /// that was the runner's last run, ends its stream.
    fn run_ended(&self, runner: &Runner, run_id: u64) {
        let mut runs = runner.runs();
        runs.remove(&run_id);
        if runs.is_empty() && self.stopping.load(Ordering::SeqCst) {
            runner.closed.cancel();
        }
    }

    /// Registers the attached-runners gauge in `registry` (the agent's
    /// `/metrics`). Errors: a family of that name exists already.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.gauge.clone()))
    }

    fn attached(&self) -> parking_lot::MutexGuard<'_, HashMap<String, Arc<Runner>>> {
        self.attached.lock()
    }

    /// The runner serving `uid`, if one is attached.
    fn runner(&self, uid: &str) -> Option<Arc<Runner>> {
        self.attached().get(uid).cloned()
    }

    /// The message of an exec refused for want of a runner.
    fn not_connected(&self, uid: &str) -> String {
        let pod = match self.index.get(uid) {
            Some(e) => format!("kubectl get pod {}-sandbox -n {}", e.name, e.namespace),
            None => "kubectl get pod NAME-sandbox".to_string(),
        };
        format!(
            "the computer's sandbox pod is not connected; runtimes.container must be true and the pod Running — see {pod}"
        )
    }
}

#[tonic::async_trait]
impl ContainerRuntime for Sandboxes {
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    fn egress_denials(&self) -> Option<agentcomputer_proxy::Denials> {
        Some(self.denials.clone())
    }

    /// None when a runner is attached or one may come (the exec then
    /// waits in [`Sandboxes::prepare`]); the reason when the computer has
    /// no sandbox or its pod cannot run.
    async fn not_ready(&self, key: &str) -> Option<String> {
        self.why_not_ready(key).await
    }

    async fn prepare(
        &self,
        key: &str,
        progress: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        self.wait_for_runner(key, progress, cancel).await
    }

    async fn run(
        &self,
        run: ContainerRun,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome {
        self.run_on_runner(run, out, cancel).await
    }
}
