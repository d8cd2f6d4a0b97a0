//! Starting a container run's sandbox, with its progress shown to the
//! client as stderr lines.

use agentcomputer_proto::v1 as pb;
use pb::exec_event::Event;
use tokio::sync::mpsc;
use tonic::Status;

use crate::api::container_runtime::ContainerRuntime;

/// Waits for `containers` to take a run of `computer`, forwarding its
/// progress lines to the client as stderr. Errors: the runtime's reason,
/// or the client going away (the wait is then cancelled).
pub(super) async fn prepare_container(
    containers: &dyn ContainerRuntime,
    computer: &str,
    tx: &mpsc::Sender<Result<pb::ExecEvent, Status>>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let (progress, mut lines) = mpsc::channel::<String>(8);
    let wait = cancel.child_token();
    let prepared = containers.prepare(computer, progress, wait.clone());
    tokio::pin!(prepared);
    loop {
        tokio::select! {
            result = &mut prepared => {
                // Lines sent just before the end still reach the client.
                while let Ok(line) = lines.try_recv() {
                    let _ = tx.send(Ok(stderr_line(line))).await;
                }
                return result;
            }
            Some(line) = lines.recv() => {
                let _ = tx.send(Ok(stderr_line(line))).await;
            }
            () = tx.closed() => {
                wait.cancel();
                return Err("the exec's client went away while the sandbox was starting".into());
            }
        }
    }
}

/// One line of runtime progress as a stderr event.
pub(super) fn stderr_line(mut line: String) -> pb::ExecEvent {
    line.push('\n');
    pb::ExecEvent {
        event: Some(Event::Stderr(line.into_bytes())),
    }
}
