//! The Exec call: runs a script on a computer and streams its output.
//!
//! The shell runtime runs each script on an OS thread of its own, so a busy
//! script never occupies the server's worker threads and runs on different
//! computers never wait on each other. The run is cancelled when
//! the client goes away (the response stream is dropped), when the computer
//! is deleted, or when the agent shuts down.

use std::time::{Duration, Instant};

use agentcomputer_fs::FileKind;
use agentcomputer_proto::v1 as pb;
use agentcomputer_shell::{ExecOutcome, ExecRequest as ShellRequest, OutputChunk};
use nix::errno::Errno;
use pb::exec_event::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{info, warn};

use super::convert::resolve;
use super::errors::{errno_detail, errno_status};
use super::paths::ApiPath;
use crate::blocking::blocking;
use crate::registry::Registry;

/// Timeout when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest timeout a request may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Output cap when the request gives none (16 MiB).
pub const DEFAULT_MAX_OUTPUT: u64 = 16 * 1024 * 1024;
/// How long past its timeout a run may take to notice cancellation before
/// the call gives up on it and reports an error.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Output chunks buffered ahead of a slow client; past that the script waits.
const OUTPUT_BUFFER: usize = 64;

/// The stream of an Exec call.
pub type ExecStream = ReceiverStream<Result<pb::ExecEvent, Status>>;

/// Validates `req`, starts the run and returns its event stream. Errors
/// before the run: unknown computer, UNIMPLEMENTED for runtimes other than
/// SHELL, a bad or missing `cwd`.
pub async fn start(registry: &Registry, req: pb::ExecRequest) -> Result<ExecStream, Status> {
    let runtime = pb::Runtime::try_from(req.runtime).map_err(|_| {
        errno_detail(
            Errno::EINVAL,
            format_args!("unknown runtime {}", req.runtime),
        )
    })?;
    match runtime {
        pb::Runtime::Unspecified | pb::Runtime::Shell => {}
        other => {
            return Err(Status::unimplemented(format!(
                "runtime {} is not available on this node agent yet; use RUNTIME_SHELL",
                other.as_str_name()
            )));
        }
    }
    let lease = registry.acquire(&req.computer).await?;
    let cwd = ApiPath::parse(&req.cwd)?;
    {
        let fs = lease.fs().clone();
        let cwd = cwd.clone();
        blocking(move || {
            let attr = resolve(&fs, &cwd, true)?;
            if attr.kind != FileKind::Directory {
                return Err(errno_status(Errno::ENOTDIR, cwd.shown()));
            }
            Ok(())
        })
        .await?;
    }
    let timeout = match req.timeout_ms {
        0 => DEFAULT_TIMEOUT,
        ms => Duration::from_millis(ms).min(MAX_TIMEOUT),
    };
    let mut env: Vec<(String, String)> = req.env.into_iter().collect();
    env.sort();
    let shell_req = ShellRequest {
        script: req.script,
        cwd: cwd.runtime_path(),
        env,
        stdin: req.stdin,
        timeout,
        max_output_bytes: match req.max_output_bytes {
            0 => DEFAULT_MAX_OUTPUT,
            n => n,
        },
    };

    let (tx, rx) = mpsc::channel(OUTPUT_BUFFER);
    let cancel = lease.cancel_token();
    tokio::spawn(async move {
        let computer = lease.name().to_string();
        let started = Instant::now();
        info!(%computer, timeout_ms = timeout.as_millis() as u64, "exec started");
        let (out_tx, out_rx) = mpsc::channel(OUTPUT_BUFFER);
        let done = spawn_run(lease.fs().clone(), shell_req, out_tx, cancel.clone());
        let (client_gone, outcome) = pump(out_rx, &tx, &cancel, timeout, done).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        info!(%computer, code = outcome.exit_code, error = ?outcome.error, duration_ms, client_gone, "exec finished");
        if !client_gone {
            let exit = pb::ExecExit {
                code: outcome.exit_code,
                error: outcome.error.unwrap_or_default(),
                result_json: String::new(),
                duration_ms,
            };
            let _ = tx
                .send(Ok(pb::ExecEvent {
                    event: Some(Event::Exit(exit)),
                }))
                .await;
        }
        drop(lease);
    });
    Ok(ReceiverStream::new(rx))
}

/// Starts the shell runtime. It runs the script on a thread of its own
/// (the interpreter does not yield inside CPU-bound loops), so the task
/// spawned here only waits and never occupies a worker thread.
fn spawn_run(
    fs: agentcomputer_fs::Fs,
    req: ShellRequest,
    out: mpsc::Sender<OutputChunk>,
    cancel: CancellationToken,
) -> JoinHandle<ExecOutcome> {
    tokio::spawn(agentcomputer_shell::run(fs, req, out, cancel))
}

/// Forwards output to the client until the run ends and returns whether
/// the client went away, and the run's outcome. Cancels the run when the
/// client goes away, or when its timeout plus a grace period passed without
/// the runtime stopping it; a run that ignores cancellation for another
/// grace period is reported as stuck (its thread is left to end).
async fn pump(
    mut out_rx: mpsc::Receiver<OutputChunk>,
    tx: &mpsc::Sender<Result<pb::ExecEvent, Status>>,
    cancel: &CancellationToken,
    timeout: Duration,
    mut done: JoinHandle<ExecOutcome>,
) -> (bool, ExecOutcome) {
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
            chunk = out_rx.recv(), if out_open => match chunk {
                Some(chunk) => gone = send(tx, chunk, gone, cancel).await,
                None => out_open = false,
            },
            result = &mut done => {
                // The runtime sent its last chunk before returning.
                while let Ok(chunk) = out_rx.try_recv() {
                    gone = send(tx, chunk, gone, cancel).await;
                }
                let outcome = result.unwrap_or_else(|_| ExecOutcome {
                    exit_code: 1,
                    error: Some("the shell runtime crashed".into()),
                });
                return (gone, outcome);
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
                let stuck = ExecOutcome {
                    exit_code: 124,
                    error: Some("the run did not stop after cancellation".into()),
                };
                return (gone, stuck);
            }
        }
    }
}

/// Sends one chunk unless the client is gone; returns whether it is gone
/// now (and cancels the run when it just went).
async fn send(
    tx: &mpsc::Sender<Result<pb::ExecEvent, Status>>,
    chunk: OutputChunk,
    gone: bool,
    cancel: &CancellationToken,
) -> bool {
    if gone {
        return true;
    }
    let event = match chunk {
        OutputChunk::Stdout(b) => Event::Stdout(b),
        OutputChunk::Stderr(b) => Event::Stderr(b),
    };
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
