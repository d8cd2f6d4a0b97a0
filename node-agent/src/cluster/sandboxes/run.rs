//! A container run on an attached runner: `start` sent down its stream,
//! output and exit events back, `cancel` when the exec ends first, and the
//! computer's activity renewed while it runs.

use std::sync::atomic::Ordering;

use agentcomputer_container::{EXIT_CANCELLED, EXIT_START_FAILED, Outcome, OutputChunk};
use agentcomputer_proto::v1 as pb;
use pb::runner_event::Event;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Sandboxes;
use super::wait::RENEW;
use crate::api::container_runtime::ContainerRun;

/// Events buffered per run ahead of the exec's client; past that the
/// stream from the runner waits (HTTP/2 flow control then slows the run).
const RUN_BUFFER: usize = 64;
/// Exit status of a run whose runner went away (the runner killed it).
const EXIT_RUNNER_LOST: i32 = EXIT_START_FAILED;

/// Most bytes of standard input a run on a runner of attach protocol
/// revision 1 takes: one RunnerStart message, with room for the script and
/// its environment.
const RUNNER_STDIN_BYTES: usize = agentcomputer_proto::MAX_MESSAGE_BYTES - 64 * 1024;

/// `first` and then everything `rest` brings, up to `limit` bytes. Errors:
/// more input than that, or `cancel` firing first.
async fn gather(
    first: Vec<u8>,
    mut rest: mpsc::Receiver<Vec<u8>>,
    limit: usize,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, String> {
    let mut all = first;
    loop {
        let chunk = tokio::select! {
            chunk = rest.recv() => chunk,
            () = cancel.cancelled() => return Err("container: the run was cancelled while its standard input arrived".into()),
        };
        let Some(chunk) = chunk else {
            return Ok(all);
        };
        if all.len() + chunk.len() > limit {
            return Err(format!(
                "container: the standard input is more than the {limit} bytes this sandbox pod's runner (attach protocol 1) can take; copy large data to the computer first (put) and read it from the file, or restart the sandbox pod with a newer runner image"
            ));
        }
        all.extend_from_slice(&chunk);
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
    /// The next chunk of streamed stdin (`None`: its end).
    Stdin(Option<Vec<u8>>),
}

/// Most bytes of streamed stdin sent to a runner and not yet acknowledged,
/// per run: the runner holds at most this much for a script that reads
/// slowly.
const RUNNER_STDIN_WINDOW: u64 = 4 * 1024 * 1024;

/// The next chunk of `input` (`None` at its end); pending forever without
/// one, so a `select!` branch guarded by `input.is_some()` is never polled
/// then.
async fn next_chunk(input: &mut Option<mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match input {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Sandboxes {
    /// Runs `run` on its computer's attached runner: sends `start`, passes
    /// the output to `out`, sends `cancel` once when `cancel` fires or
    /// `out` closes, and renews the computer's activity meanwhile. The
    /// outcome is the runner's exit, or [`EXIT_RUNNER_LOST`] with a message
    /// when no runner is attached or its stream breaks during the run.
    pub(super) async fn run_on_runner(
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
        let mut run = run;
        // A runner of revision 2 takes the input as it comes; an older one
        // in its one RunnerStart.
        let mut streamed = run.stdin_stream.take();
        if runner.protocol < 2
            && let Some(rest) = streamed.take()
        {
            // One RunnerStart carries the whole input to the runner.
            match gather(run.stdin, rest, RUNNER_STDIN_BYTES, &cancel).await {
                Ok(all) => run.stdin = all,
                Err(why) => {
                    let _ = out
                        .send(OutputChunk::Stderr(format!("{why}\n").into_bytes()))
                        .await;
                    return Outcome {
                        exit_code: EXIT_START_FAILED,
                        error: Some(why),
                    };
                }
            }
        }
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
            stdin_stream: streamed.is_some(),
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
        // Streamed stdin: bytes sent down and acknowledged by the runner.
        let (mut sent, mut acked) = (0u64, 0u64);
        let outcome = loop {
            let stop = !cancel_sent;
            let room = streamed.is_some() && !cancel_sent && sent - acked < RUNNER_STDIN_WINDOW;
            let step = tokio::select! {
                biased;
                event = events.recv() => Step::Event(event),
                () = cancel.cancelled(), if stop => Step::Stop,
                () = out.closed(), if stop => Step::Stop,
                chunk = next_chunk(&mut streamed), if room => Step::Stdin(chunk),
                _ = renew.tick() => Step::Renew,
            };
            match step {
                Step::Stdin(chunk) => {
                    let end = chunk.is_none();
                    if end {
                        streamed = None;
                    }
                    let data = chunk.unwrap_or_default();
                    sent += data.len() as u64;
                    let stdin = pb::RunnerStdin { run_id, data, end };
                    let _ = runner
                        .commands
                        .send(Ok(pb::RunnerCommand {
                            command: Some(pb::runner_command::Command::Stdin(stdin)),
                        }))
                        .await;
                }
                Step::Event(Some(Event::StdinAck(a))) => acked = a.bytes.min(sent),
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
