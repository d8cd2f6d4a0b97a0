//! The `SandboxRunner.Attach` service: a runner's hello, its token and
//! protocol revision checked, its registration (a later attach of the same
//! computer ends the earlier stream) and its events handed to their runs.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_server::{SandboxRunner, SandboxRunnerServer};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use pb::runner_event::Event;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use super::{Runner, Sandboxes};
use crate::auth::bearer_token;

/// How long a runner has to send its hello after the call opened.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Commands buffered towards one runner.
const COMMAND_BUFFER: usize = 64;

impl Sandboxes {
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
        protocol: u32,
        mut inbound: Streaming<pb::RunnerEvent>,
    ) -> CommandStream {
        let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
        let runner = Arc::new(Runner {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            protocol,
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
            Event::StdinAck(a) => a.run_id,
            Event::Hello(_) => return,
        };
        let to = runner.runs().get(&run_id).cloned();
        if let Some(to) = to {
            // A run whose exec is gone has dropped its receiver: ignored.
            let _ = to.send(event).await;
        }
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
    /// NOT_FOUND as [`crate::auth::Authorizer::computer`] decides, INVALID_ARGUMENT for
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
        let protocol = agentcomputer_proto::runner_protocol(&hello);
        Ok(Response::new(self.0.attach(uid, protocol, inbound)))
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
