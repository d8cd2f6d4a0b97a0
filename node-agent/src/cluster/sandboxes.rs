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

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentcomputer_container::{EXIT_CANCELLED, EXIT_START_FAILED, Outcome, OutputChunk};
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_server::{SandboxRunner, SandboxRunnerServer};
use futures::{Stream, StreamExt};
use pb::runner_event::Event;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use super::index::Index;
use crate::auth::{Authorizer, bearer_token};
use crate::containers::{ContainerRun, ContainerRuntime};

/// How long a runner has to send its hello after the call opened.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Commands buffered towards one runner.
const COMMAND_BUFFER: usize = 64;
/// Events buffered per run ahead of the exec's client; past that the
/// stream from the runner waits (HTTP/2 flow control then slows the run).
const RUN_BUFFER: usize = 64;
/// Exit status of a run whose runner went away (the runner killed it).
pub const EXIT_RUNNER_LOST: i32 = EXIT_START_FAILED;

/// The runners attached to this agent, by computer uid.
pub struct Sandboxes {
    index: Arc<Index>,
    auth: Arc<dyn Authorizer>,
    attached: Mutex<HashMap<String, Arc<Runner>>>,
    next_id: AtomicU64,
    /// `agentcomputer_node_sandbox_runners`: runners attached now.
    gauge: prometheus::IntGauge,
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
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<Event>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sandboxes {
    /// No runner attached yet; `auth` checks the runners' tokens and
    /// `index` names computers in messages.
    pub fn new(index: Arc<Index>, auth: Arc<dyn Authorizer>) -> Sandboxes {
        Sandboxes {
            index,
            auth,
            attached: Mutex::default(),
            next_id: AtomicU64::new(1),
            gauge: prometheus::IntGauge::new(
                "agentcomputer_node_sandbox_runners",
                "Sandbox pod runners attached to this node agent (one per computer at most)",
            )
            .expect("valid metric"),
        }
    }

    /// Registers the attached-runners gauge in `registry` (the agent's
    /// `/metrics`). Errors: a family of that name exists already.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.gauge.clone()))
    }

    fn attached(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Runner>>> {
        self.attached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The runner serving `uid`, if one is attached.
    fn runner(&self, uid: &str) -> Option<Arc<Runner>> {
        self.attached().get(uid).cloned()
    }

    /// How many runners are attached.
    pub fn len(&self) -> usize {
        self.attached().len()
    }

    /// Whether no runner is attached.
    pub fn is_empty(&self) -> bool {
        self.attached().is_empty()
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

    fn not_ready(&self, key: &str) -> Option<String> {
        self.runner(key).is_none().then(|| self.not_connected(key))
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
            runner.runs().remove(&run_id);
            return lost(self.not_connected(&run.computer));
        }
        let mut cancel_sent = false;
        let outcome = loop {
            let stop = !cancel_sent;
            let step = tokio::select! {
                biased;
                event = events.recv() => Step::Event(event),
                () = cancel.cancelled(), if stop => Step::Stop,
                () = out.closed(), if stop => Step::Stop,
            };
            match step {
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
        runner.runs().remove(&run_id);
        outcome
    }
}

/// What a run waits for next.
enum Step {
    /// An event of the runner (`None`: the runner is gone).
    Event(Option<Event>),
    /// The exec was cancelled or its client went away.
    Stop,
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
    /// a stream not starting with a hello, DEADLINE_EXCEEDED for none.
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
        info!(computer = %uid, version = %hello.version, "sandbox runner hello");
        Ok(Response::new(self.0.attach(uid, inbound)))
    }
}
