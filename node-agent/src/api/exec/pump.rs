//! Forwards a started run's output to the client and watches over the run:
//! cancellation when the client leaves, a watchdog past the timeout.

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use pb::exec_event::Event;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{info, warn};

use super::program::{Finished, Output, Started};

/// How long past its timeout a run may take to notice cancellation before
/// the call gives up on it and reports an error.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long, after a runtime answered, its output channel may stay open
/// with nothing in it before the rest of its output is given up. The
/// JavaScript runtime answers before it frees its QuickJS runtime (tens of
/// microseconds), and only then closes the channel.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Exit status reported for a run that ignored cancellation (as timeout(1)
/// reports a command it had to stop).
const EXIT_STUCK: i32 = agentcomputer_runtime_contract::EXIT_TIMEOUT;

/// The events sent to the client.
pub type EventSender = mpsc::Sender<Result<pb::ExecEvent, Status>>;

/// Forwards output to the client until the run ends and its output channel
/// is closed; returns whether the client went away, and how the run ended.
/// Cancels the run when the client goes away, or when its timeout plus a
/// grace period passed without the runtime stopping it; a run that ignores
/// cancellation for another grace period is reported as stuck (its thread
/// is left to end).
pub async fn pump(
    run: Started,
    tx: &EventSender,
    cancel: &CancellationToken,
    timeout: Duration,
) -> (bool, Finished) {
    let Started {
        mut output,
        mut done,
        runtime,
    } = run;
    let mut gone = false;
    let mut out_open = true;
    let deadline = tokio::time::sleep(timeout + STOP_GRACE);
    tokio::pin!(deadline);
    let give_up = async {
        cancel.cancelled().await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            // Output first, so nothing is lost behind the outcome.
            biased;
            event = output.recv(), if out_open => match event {
                Some(event) => gone = send(tx, event, gone, cancel).await,
                None => out_open = false,
            },
            result = &mut done => {
                let finished = result.unwrap_or_else(|_| {
                    Finished::failed(1, format!("the {runtime} runtime crashed"))
                });
                if out_open {
                    gone = drain(&mut output, tx, gone, cancel, runtime.name()).await;
                }
                return (gone, finished);
            }
            _ = tx.closed(), if !gone => {
                info!("exec client went away; cancelling the run");
                gone = true;
                cancel.cancel();
            }
            _ = &mut deadline, if !cancel.is_cancelled() => {
                warn!("exec ran past its timeout; cancelling it");
                cancel.cancel();
            }
            _ = &mut give_up => {
                warn!("exec did not stop after cancellation; giving up on it");
                let stuck = Finished::failed(
                    EXIT_STUCK,
                    "the run did not stop after cancellation".into(),
                );
                return (gone, stuck);
            }
        }
    }
}

/// Forwards what is left of the output after the runtime answered, until
/// the channel closes. A channel that stays open and silent for
/// [`CLOSE_GRACE`] (a runtime thread still holding it) is abandoned.
async fn drain(
    output: &mut Output,
    tx: &EventSender,
    mut gone: bool,
    cancel: &CancellationToken,
    runtime: &str,
) -> bool {
    while !gone {
        match tokio::time::timeout(CLOSE_GRACE, output.recv()).await {
            Ok(Some(event)) => gone = send(tx, event, gone, cancel).await,
            Ok(None) => break,
            Err(_) => {
                warn!(
                    runtime,
                    "output still open after the run ended; not waiting for it"
                );
                break;
            }
        }
    }
    gone
}

/// Sends one event unless the client is gone; returns whether it is gone
/// now (and cancels the run when it just went).
async fn send(tx: &EventSender, event: Event, gone: bool, cancel: &CancellationToken) -> bool {
    if gone {
        return true;
    }
    if tx
        .send(Ok(pb::ExecEvent { event: Some(event) }))
        .await
        .is_err()
    {
        cancel.cancel();
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_runtime_contract::{OutputChunk, Runtime};

    fn finished() -> Finished {
        Finished {
            exit_code: 0,
            error: None,
            result_json: "42".into(),
        }
    }

    async fn collect(mut rx: mpsc::Receiver<Result<pb::ExecEvent, Status>>) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(Ok(ev)) = rx.recv().await {
            events.push(ev.event.unwrap());
        }
        events
    }

    #[tokio::test]
    async fn output_sent_after_the_answer_is_still_forwarded() {
        let (out_tx, out_rx) = mpsc::channel(4);
        out_tx
            .send(OutputChunk::Stdout(b"early".to_vec()))
            .await
            .unwrap();
        // The runtime answers first and closes its output later, as the
        // JavaScript runtime does when it frees its QuickJS runtime.
        let done = tokio::spawn(async { finished() });
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            out_tx
                .send(OutputChunk::Stderr(b"late".to_vec()))
                .await
                .unwrap();
        });
        let run = Started {
            output: Output(out_rx),
            done,
            runtime: Runtime::JavaScript,
        };
        let (tx, rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let (gone, end) = pump(run, &tx, &cancel, Duration::from_secs(10)).await;
        drop(tx);
        assert_eq!((gone, end), (false, finished()));
        assert!(!cancel.is_cancelled());
        assert_eq!(
            collect(rx).await,
            [
                Event::Stdout(b"early".to_vec()),
                Event::Stderr(b"late".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn an_output_channel_left_open_is_abandoned() {
        let (out_tx, out_rx) = mpsc::channel::<OutputChunk>(4);
        let run = Started {
            output: Output(out_rx),
            done: tokio::spawn(async { finished() }),
            runtime: Runtime::JavaScript,
        };
        let (tx, rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let started = std::time::Instant::now();
        let (gone, end) = pump(run, &tx, &cancel, Duration::from_secs(10)).await;
        let waited = started.elapsed();
        drop((tx, out_tx));
        assert_eq!((gone, end), (false, finished()));
        assert!(
            waited >= CLOSE_GRACE && waited < CLOSE_GRACE * 3,
            "{waited:?}"
        );
        assert!(collect(rx).await.is_empty());
    }

    #[tokio::test]
    async fn a_client_that_leaves_cancels_the_run() {
        let (out_tx, out_rx) = mpsc::channel::<OutputChunk>(4);
        let cancel = CancellationToken::new();
        let watched = cancel.clone();
        // A run that ends only when cancelled, like both runtimes.
        let done = tokio::spawn(async move {
            watched.cancelled().await;
            drop(out_tx);
            Finished::failed(1, "javascript: cancelled".into())
        });
        let run = Started {
            output: Output(out_rx),
            done,
            runtime: Runtime::JavaScript,
        };
        let (tx, rx) = mpsc::channel(8);
        drop(rx);
        let (gone, end) = pump(run, &tx, &cancel, Duration::from_secs(10)).await;
        assert!(gone && cancel.is_cancelled());
        assert_eq!(end.error.as_deref(), Some("javascript: cancelled"));
    }
}
