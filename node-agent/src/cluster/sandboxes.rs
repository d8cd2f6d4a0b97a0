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
//! Ready for [`ATTACH_GRACE`] without its runner attaching, or
//! [`START_TIMEOUT`] passes. Waits and runs rewrite the annotation every
//! [`RENEW`] (once per computer) so the pod is not stopped in use.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentcomputer_container::{EXIT_CANCELLED, EXIT_START_FAILED, Outcome, OutputChunk};
use agentcomputer_crds::{AgentComputer, sandbox_reasons};
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_server::{SandboxRunner, SandboxRunnerServer};
use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use pb::runner_event::Event;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use super::activity::Activity;
use super::index::{Entry, Index};
use super::keys::FIELD_MANAGER;
use crate::api::container_runtime::{ContainerRun, ContainerRuntime};
use crate::auth::{Authorizer, bearer_token};

/// How long a runner has to send its hello after the call opened.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Commands buffered towards one runner.
const COMMAND_BUFFER: usize = 64;
/// Events buffered per run ahead of the exec's client; past that the
/// stream from the runner waits (HTTP/2 flow control then slows the run).
const RUN_BUFFER: usize = 64;
/// Exit status of a run whose runner went away (the runner killed it).
pub const EXIT_RUNNER_LOST: i32 = EXIT_START_FAILED;
/// Longest wait of an exec for its computer's sandbox pod to start and its
/// runner to attach (an image pull included).
pub const START_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a waiting exec looks at its computer's `SandboxReady`
/// condition in the watch-fed index (an attach wakes it at once).
const START_POLL: Duration = Duration::from_millis(500);
/// How often the `last-activity` annotation of a computer is rewritten
/// while execs wait for its pod or run in it (at most once per computer,
/// however many execs), so that an idle timeout longer than this never
/// stops a pod in use.
const RENEW: Duration = Duration::from_secs(10);
/// How long a pod may report Ready without its runner attaching before a
/// waiting exec gives up: the runner cannot reach or is refused by this
/// agent (TLS trust, NetworkPolicy, no runner image).
const ATTACH_GRACE: Duration = Duration::from_secs(30);

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
}

/// One attached runner: its command stream and its runs in flight.
struct Runner {
    /// Distinguishes this attachment from a later one of the same computer.
    id: u64,
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
        }
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

    /// The gRPC service runners attach to.
    pub fn server(self: &Arc<Self>) -> SandboxRunnerServer<AttachService> {
        SandboxRunnerServer::new(AttachService(self.clone()))
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
    }

    /// Registers a runner of `uid` reading `inbound`, replacing (and
    /// ending) an earlier one; returns its command stream.
    fn attach(
        self: &Arc<Self>,
        uid: String,
        mut inbound: Streaming<pb::RunnerEvent>,
    ) -> CommandStream {
        let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
        let runner = Arc::new(Runner {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            commands: tx,
            runs: Mutex::default(),
            closed: CancellationToken::new(),
        });
        {
            let mut attached = self.attached();
            if let Some(old) = attached.insert(uid.clone(), runner.clone()) {
                info!(computer = %uid, "a sandbox runner attached again; ending the earlier stream");
                old.closed.cancel();
            }
            self.gauge.set(attached.len() as i64);
        }
        self.attach_seen.notify_waiters();
        info!(computer = %uid, attachment = runner.id, "sandbox runner attached");
        let this = self.clone();
        let reader = runner.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    () = reader.closed.cancelled() => break,
                    event = inbound.message() => event,
                };
                match event {
                    Ok(Some(pb::RunnerEvent { event: Some(event) })) => {
                        this.dispatch(&reader, event).await
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(status) => {
                        warn!(computer = %uid, error = %status, "sandbox runner stream broke");
                        break;
                    }
                }
            }
            reader.closed.cancel();
            {
                let mut attached = this.attached();
                if attached.get(&uid).is_some_and(|r| r.id == reader.id) {
                    attached.remove(&uid);
                }
                this.gauge.set(attached.len() as i64);
            }
            // Runs still waiting see their channel close: the runner is gone.
            reader.runs().clear();
            info!(computer = %uid, attachment = reader.id, "sandbox runner detached");
        });
        let closed = runner.closed.clone();
        Box::pin(ReceiverStream::new(rx).take_until(closed.cancelled_owned()))
    }

    /// Hands one event of `runner` to its run.
    async fn dispatch(&self, runner: &Runner, event: Event) {
        let run_id = match &event {
            Event::Output(o) => o.run_id,
            Event::Exit(e) => e.run_id,
            Event::Hello(_) => return,
        };
        let to = runner.runs().get(&run_id).cloned();
        if let Some(to) = to {
            // A run whose exec is gone has dropped its receiver: ignored.
            let _ = to.send(event).await;
        }
    }
}

#[tonic::async_trait]
impl ContainerRuntime for Sandboxes {
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// None when a runner is attached or one may come (the exec then
    /// waits in [`Sandboxes::prepare`]); the reason when the computer has
    /// no sandbox or its pod cannot run.
    async fn not_ready(&self, key: &str) -> Option<String> {
        if self.runner(key).is_some() {
            return None;
        }
        let Some(entry) = self.index.get(key) else {
            return Some(self.not_connected(key));
        };
        match self.view(&entry).await {
            Ok(View::NotConfigured) => Some(no_sandbox(&entry)),
            Ok(View::Condition(Some(c))) if c.failing() => Some(c.cannot_start(&entry)),
            // Starting, idle, unknown yet, or unreadable now: wait for it.
            Ok(View::Condition(_)) | Err(_) => None,
        }
    }

    async fn prepare(
        &self,
        key: &str,
        progress: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        if self.runner(key).is_some() {
            return Ok(());
        }
        let Some(entry) = self.index.get(key) else {
            return Err(self.not_connected(key));
        };
        let began = Instant::now();
        let pod = format!("{}-sandbox", entry.name);
        // Use of the computer is what starts a stopped sandbox pod.
        self.activity.record(key);
        let mut shown: Option<Sandbox> = None;
        let mut first = true;
        let mut ready_since: Option<Instant> = None;
        loop {
            self.renew(&entry);
            let attached = self.attach_seen.notified();
            tokio::pin!(attached);
            attached.as_mut().enable();
            if self.runner(key).is_some() {
                if !first {
                    let _ = progress
                        .send(format!(
                            "container: sandbox pod {pod} attached after {:.1}s",
                            began.elapsed().as_secs_f64()
                        ))
                        .await;
                }
                return Ok(());
            }
            match self.view(&entry).await {
                Ok(View::NotConfigured) => return Err(no_sandbox(&entry)),
                Ok(View::Condition(Some(c))) if c.failing() => {
                    return Err(c.cannot_start(&entry));
                }
                Ok(View::Condition(now)) => {
                    let ready = now.as_ref().is_some_and(|c| c.ready);
                    let since = *ready_since.get_or_insert_with(Instant::now);
                    if !ready {
                        ready_since = None;
                    } else if since.elapsed() >= ATTACH_GRACE {
                        return Err(format!(
                            "container: sandbox pod {pod} is running but its runner has not attached to this node agent for {}s; see kubectl logs {pod} -n {} (TLS trust, NetworkPolicy or the operator's --runner-image)",
                            ATTACH_GRACE.as_secs(),
                            entry.namespace
                        ));
                    }
                    if first || now != shown {
                        let line = match &now {
                            Some(c) if c.reason == sandbox_reasons::IDLE => format!(
                                "container: sandbox pod {pod} was stopped when idle; starting it (up to {}s)",
                                START_TIMEOUT.as_secs()
                            ),
                            Some(c) => format!(
                                "container: waiting for sandbox pod {pod}: {}: {}",
                                c.reason, c.message
                            ),
                            None => format!(
                                "container: waiting for sandbox pod {pod} (not reported by the operator yet)"
                            ),
                        };
                        let _ = progress.send(line).await;
                        shown = now;
                    }
                }
                Err(e) => return Err(format!("container: {e}")),
            }
            first = false;
            let left = START_TIMEOUT.saturating_sub(began.elapsed());
            if left.is_zero() {
                let last = shown
                    .map(|c| format!(" (last: {}: {})", c.reason, c.message))
                    .unwrap_or_default();
                return Err(format!(
                    "container: sandbox pod {pod} did not attach within {}s{last}; see kubectl describe pod {pod} -n {}",
                    START_TIMEOUT.as_secs(),
                    entry.namespace
                ));
            }
            tokio::select! {
                () = &mut attached => {}
                () = cancel.cancelled() => {
                    return Err("container: the wait for the sandbox pod was cancelled".into());
                }
                () = tokio::time::sleep(START_POLL.min(left)) => {}
            }
        }
    }

    async fn run(
        &self,
        run: ContainerRun,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome {
        let lost = |error: String| Outcome {
            exit_code: EXIT_RUNNER_LOST,
            error: Some(error),
        };
        let Some(runner) = self.runner(&run.computer) else {
            return lost(self.not_connected(&run.computer));
        };
        let run_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut events) = mpsc::channel(RUN_BUFFER);
        runner.runs().insert(run_id, tx);
        let start = pb::RunnerStart {
            run_id,
            script: run.script,
            cwd: run.cwd,
            env: run.env.into_iter().collect(),
            stdin: run.stdin,
            timeout_ms: u64::try_from(run.timeout.as_millis()).unwrap_or(u64::MAX),
            max_output_bytes: run.max_output_bytes,
        };
        let sent = runner
            .commands
            .send(Ok(pb::RunnerCommand {
                command: Some(pb::runner_command::Command::Start(start)),
            }))
            .await;
        if sent.is_err() {
            self.run_ended(&runner, run_id);
            return lost(self.not_connected(&run.computer));
        }
        let mut cancel_sent = false;
        let mut renew = tokio::time::interval(RENEW);
        let outcome = loop {
            let stop = !cancel_sent;
            let step = tokio::select! {
                biased;
                event = events.recv() => Step::Event(event),
                () = cancel.cancelled(), if stop => Step::Stop,
                () = out.closed(), if stop => Step::Stop,
                _ = renew.tick() => Step::Renew,
            };
            match step {
                // The pod must not count as idle while it runs a script.
                Step::Renew => {
                    self.activity.record(&run.computer);
                    if let Some(entry) = self.index.get(&run.computer) {
                        self.renew(&entry);
                    }
                }
                // The exec is over on this side: tell the runner once, then
                // wait for its exit (the pump gives up after a grace).
                Step::Stop => {
                    cancel_sent = true;
                    let cancel = pb::RunnerCancel { run_id };
                    let _ = runner
                        .commands
                        .send(Ok(pb::RunnerCommand {
                            command: Some(pb::runner_command::Command::Cancel(cancel)),
                        }))
                        .await;
                }
                Step::Event(Some(Event::Output(o))) => {
                    let chunk = match pb::RunnerStream::try_from(o.stream) {
                        Ok(pb::RunnerStream::Stderr) => OutputChunk::Stderr(o.data),
                        _ => OutputChunk::Stdout(o.data),
                    };
                    // A closed `out` is noticed by the select above.
                    let _ = out.send(chunk).await;
                }
                Step::Event(Some(Event::Exit(e))) => {
                    break Outcome {
                        exit_code: e.code,
                        error: (!e.error.is_empty()).then_some(e.error),
                    };
                }
                Step::Event(Some(Event::Hello(_))) => {}
                Step::Event(None) if cancel_sent => {
                    break Outcome {
                        exit_code: EXIT_CANCELLED,
                        error: Some("container: script cancelled".into()),
                    };
                }
                Step::Event(None) => {
                    let message = "container: the sandbox pod's runner disconnected during the run; its processes were killed".to_string();
                    let _ = out
                        .send(OutputChunk::Stderr(format!("{message}\n").into_bytes()))
                        .await;
                    break lost(message);
                }
            }
        };
        self.run_ended(&runner, run_id);
        outcome
    }
}

/// What a run waits for next.
enum Step {
    /// An event of the runner (`None`: the runner is gone).
    Event(Option<Event>),
    /// The exec was cancelled or its client went away.
    Stop,
    /// Time to renew the computer's last activity.
    Renew,
}

/// What a computer's resource says about its sandbox.
enum View {
    /// `spec.sandbox` is unset or `spec.runtimes.container` is off: the
    /// operator makes no pod.
    NotConfigured,
    /// The `SandboxReady` condition; None before the operator wrote one.
    Condition(Option<Sandbox>),
}

/// The `SandboxReady` condition as the operator last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sandbox {
    ready: bool,
    reason: String,
    message: String,
}

impl Sandbox {
    /// Whether the pod cannot run: not ready for a reason other than a
    /// normal start or an idle stop (the kubelet's or the API server's).
    fn failing(&self) -> bool {
        !self.ready && !sandbox_reasons::is_progress(&self.reason)
    }

    fn cannot_start(&self, entry: &Entry) -> String {
        format!(
            "container: the sandbox pod of {} cannot run: {}: {}",
            entry.shown(),
            self.reason,
            self.message
        )
    }
}

fn no_sandbox(entry: &Entry) -> String {
    format!(
        "computer {} has no sandbox pod: set spec.sandbox.image and spec.runtimes.container: true",
        entry.shown()
    )
}

impl Sandboxes {
    /// Computer `entry`'s sandbox settings and condition, as the
    /// AgentComputer watch last saw them (no call to the API server).
    /// Errors: the computer left this node.
    async fn view(&self, entry: &Entry) -> Result<View, String> {
        let now = self
            .index
            .get(&entry.uid)
            .ok_or_else(|| format!("computer {} is no longer on this node", entry.shown()))?;
        if !now.sandbox.configured {
            return Ok(View::NotConfigured);
        }
        Ok(View::Condition(now.sandbox.condition.map(
            |(ready, reason, message)| Sandbox {
                ready,
                reason,
                message,
            },
        )))
    }

    /// Writes `agentcomputer.dev/last-activity` = now on `entry` in the
    /// background, unless this agent wrote it less than [`RENEW`] ago (the
    /// status reporter's pace is too slow for a pod in use).
    fn renew(&self, entry: &Entry) {
        {
            let mut touched = self.touched.lock();
            touched.retain(|_, at| at.elapsed() < RENEW);
            if touched.contains_key(&entry.uid) {
                return;
            }
            touched.insert(entry.uid.clone(), Instant::now());
        }
        let api: Api<AgentComputer> = Api::namespaced(self.client.clone(), &entry.namespace);
        let (name, shown) = (entry.name.clone(), entry.shown());
        tokio::spawn(async move {
            let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let patch = serde_json::json!({"metadata": {"annotations": {
                agentcomputer_crds::labels::LAST_ACTIVITY: now}}});
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            if let Err(e) = api.patch(&name, &params, &Patch::Merge(patch)).await {
                warn!(computer = %shown, error = %e, "cannot record activity for the sandbox pod");
            }
        });
    }
}

/// The stream of commands sent to one runner.
pub type CommandStream = Pin<Box<dyn Stream<Item = Result<pb::RunnerCommand, Status>> + Send>>;

/// The `SandboxRunner` service over [`Sandboxes`].
pub struct AttachService(Arc<Sandboxes>);

#[tonic::async_trait]
impl SandboxRunner for AttachService {
    type AttachStream = CommandStream;

    /// Checks the token, waits for the hello (at most
    /// [`HELLO_TIMEOUT`]), checks that the token is that computer's and
    /// attaches the runner. Errors: UNAUTHENTICATED / PERMISSION_DENIED /
    /// NOT_FOUND as [`Authorizer::computer`] decides, INVALID_ARGUMENT for
    /// a stream not starting with a hello, DEADLINE_EXCEEDED for none,
    /// FAILED_PRECONDITION for a protocol revision this agent does not
    /// serve ([`check_protocol`]).
    async fn attach(
        &self,
        req: Request<Streaming<pb::RunnerEvent>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let token = bearer_token(req.metadata()).map(str::to_string);
        // A call without a valid token of any computer is refused before
        // anything is read from it.
        if token.is_none() {
            return Err(Status::unauthenticated(
                "missing credential: send the computer's token as 'authorization: Bearer <token>'",
            ));
        }
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no hello from the sandbox runner"))??;
        let hello = match first {
            Some(pb::RunnerEvent {
                event: Some(Event::Hello(hello)),
            }) => hello,
            _ => {
                return Err(Status::invalid_argument(
                    "a sandbox runner's stream must start with a hello",
                ));
            }
        };
        let uid = self.0.auth.computer(&hello.computer, token.as_deref())?;
        if let Err(refused) = check_protocol(&hello) {
            warn!(computer = %uid, version = %hello.version, protocol = hello.protocol, "{}", refused.message());
            return Err(refused);
        }
        info!(computer = %uid, version = %hello.version, protocol = hello.protocol, "sandbox runner hello");
        Ok(Response::new(self.0.attach(uid, inbound)))
    }
}

/// Whether this agent serves the attach protocol revision the hello names
/// ([`agentcomputer_proto::runner_protocol`]): revisions
/// [`agentcomputer_proto::MIN_RUNNER_PROTOCOL`] to
/// [`agentcomputer_proto::RUNNER_PROTOCOL`]. Refused: FAILED_PRECONDITION
/// naming both sides and what happens next; the runner exits with
/// [`agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE`] and passes the message
/// on as its termination message.
pub fn check_protocol(hello: &pb::RunnerHello) -> Result<(), Status> {
    use agentcomputer_proto::{MIN_RUNNER_PROTOCOL, RUNNER_PROTOCOL};
    check_revision(hello, MIN_RUNNER_PROTOCOL, RUNNER_PROTOCOL)
}

/// [`check_protocol`] for the served revisions `min..=max`.
fn check_revision(hello: &pb::RunnerHello, min: u32, max: u32) -> Result<(), Status> {
    let revision = agentcomputer_proto::runner_protocol(hello);
    if (min..=max).contains(&revision) {
        return Ok(());
    }
    let which = if revision > max {
        "newer than this node agent: it attaches once the node agent on this node is upgraded"
    } else {
        "older than this node agent serves: the operator replaces the sandbox pod with the \
         configured runner image"
    };
    Err(Status::failed_precondition(format!(
        "sandbox runner {} speaks attach protocol {revision}, this node agent serves {min} to {max}; the runner is {which}",
        if hello.version.is_empty() {
            "(version not sent)"
        } else {
            hello.version.as_str()
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_proto::{MIN_RUNNER_PROTOCOL, RUNNER_PROTOCOL};

    fn hello(protocol: u32) -> pb::RunnerHello {
        pb::RunnerHello {
            computer: "u-1".into(),
            version: "0.9.0".into(),
            protocol,
        }
    }

    #[test]
    fn runners_of_the_served_revisions_attach() {
        for p in MIN_RUNNER_PROTOCOL..=RUNNER_PROTOCOL {
            check_protocol(&hello(p)).unwrap();
        }
        // A runner that sends no revision speaks revision 1, which this
        // agent must still serve while MIN_RUNNER_PROTOCOL is 1.
        assert_eq!(check_protocol(&hello(0)).is_ok(), MIN_RUNNER_PROTOCOL <= 1);
    }

    #[test]
    fn other_revisions_are_refused_with_both_named() {
        // An agent serving revisions 2 and 3.
        let newer = check_revision(&hello(4), 2, 3).unwrap_err();
        assert_eq!(newer.code(), tonic::Code::FailedPrecondition);
        let text = newer.message();
        assert!(
            text.contains("runner 0.9.0 speaks attach protocol 4")
                && text.contains("serves 2 to 3")
                && text.contains("node agent on this node is upgraded"),
            "{text}"
        );
        for old in [0, 1] {
            let older = check_revision(&hello(old), 2, 3).unwrap_err();
            assert_eq!(older.code(), tonic::Code::FailedPrecondition);
            assert!(
                older.message().contains("attach protocol 1")
                    && older.message().contains("replaces the sandbox pod"),
                "{}",
                older.message()
            );
        }
        check_revision(&hello(2), 2, 3).unwrap();
        check_revision(&hello(3), 2, 3).unwrap();
        // This build refuses the revision after its own.
        assert!(check_protocol(&hello(RUNNER_PROTOCOL + 1)).is_err());
    }

    #[test]
    fn the_operator_and_the_runner_agree_on_the_refusal_exit_status() {
        assert_eq!(
            agentcomputer_crds::RUNNER_EXIT_INCOMPATIBLE,
            i32::from(agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE)
        );
        assert_eq!(
            agentcomputer_crds::RUNNER_EXIT_WORKSPACE_LOST,
            i32::from(agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST)
        );
    }
}
