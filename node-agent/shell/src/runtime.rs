//! The public exec API: run one bash script against a computer.

use crate::limits::{DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT, ShellLimits};
use crate::output::OutputGate;
use crate::session::{self, Finished, Job, Stop};
use crate::stdin::StdinStream;
use crate::stop::StopFlag;
use agentcomputer_fs::{Fence, Fs};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use agentcomputer_runtime_contract::{
    EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_TIMEOUT, OutputChunk,
};
/// Exit status of a run stopped by a resource budget (loop, command,
/// recursion, memory) or refused before it started (bad cwd).
pub const EXIT_LIMIT: i32 = 1;
/// Exit status of a script refused before any of it ran, because it uses a
/// construct the runtime cannot run as bash does (bash's status for a
/// script it cannot run, as for a syntax error).
pub const EXIT_REFUSED: i32 = 2;

/// How long past its deadline a run may take to notice it, before the
/// caller gets its answer and the exec thread is left to stop on its own.
const STOP_GRACE: Duration = Duration::from_millis(250);

/// One script to run.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// The bash script (the text `bash -c` would get).
    pub script: String,
    /// Starting directory: `""` is `/workspace`; a relative path is taken
    /// under `/workspace` (and cannot leave it); an absolute path is a path
    /// of the shell's namespace (`/workspace/src`, `/tmp`). It must exist.
    pub cwd: String,
    /// Environment variables added to the shell's defaults (`HOME`, `PATH`,
    /// `USER`, ...), overriding them on a clash.
    pub env: Vec<(String, String)>,
    /// Bytes the script reads on standard input; empty is end-of-file.
    pub stdin: Vec<u8>,
    /// Input that follows `stdin` while the script runs, streamed into its
    /// pipe as it arrives (the default: none). A script the runtime must
    /// run unwrapped (see the `stdin` module) gets it whole instead, within
    /// its memory budget.
    pub stdin_stream: StdinStream,
    /// Wall-clock limit; `Duration::ZERO` means [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// Cap on stdout and stderr bytes together; 0 means
    /// [`DEFAULT_MAX_OUTPUT_BYTES`]. The runtime's own closing message does
    /// not count.
    pub max_output_bytes: u64,
    /// Where `curl` and `wget` may connect; the default denies everything.
    pub egress: Arc<agentcomputer_egress::Policy>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// The script's exit status as bash gives it (`exit 3` is 3, `false` is
    /// 1, a syntax error 2, an unknown command 127), or [`EXIT_TIMEOUT`],
    /// [`EXIT_CANCELLED`], [`EXIT_OUTPUT_CAP`], [`EXIT_LIMIT`] when the
    /// runtime stopped it.
    pub exit_code: i32,
    /// Set when the runtime, not the script, ended the run (timeout,
    /// cancellation, output cap, a budget, an unusable cwd): a one-line human
    /// message, also written to stderr.
    pub error: Option<String>,
}

/// Runs `req` against computer `fs` with [`ShellLimits::default`].
///
/// Output goes to `out` as it is produced; the call returns when the script
/// ends, after its last chunk was sent. A full channel slows the script
/// down. The run stops when `cancel` fires or `out`'s receiver is dropped.
/// See [`run_with_limits`].
pub async fn run(
    fs: Fs,
    req: ExecRequest,
    out: mpsc::Sender<OutputChunk>,
    cancel: CancellationToken,
) -> ExecOutcome {
    run_with_limits(fs, req, out, cancel, ShellLimits::default()).await
}

/// Runs `req` against computer `fs` under `limits`.
///
/// The script runs on an exec thread with a single-threaded runtime of its
/// own (see the `pool` module), never on the caller's runtime. This task only waits, and answers at the deadline
/// (plus a short grace) even if the script has not noticed its stop flag
/// yet; such a thread then ends at its next command boundary, with its
/// output discarded.
pub async fn run_with_limits(
    fs: Fs,
    req: ExecRequest,
    out: mpsc::Sender<OutputChunk>,
    cancel: CancellationToken,
    limits: ShellLimits,
) -> ExecOutcome {
    let timeout = if req.timeout.is_zero() {
        DEFAULT_TIMEOUT
    } else {
        req.timeout
    };
    let cap = match req.max_output_bytes {
        0 => DEFAULT_MAX_OUTPUT_BYTES,
        n => n,
    };
    let gate = Arc::new(OutputGate::new(out.clone(), cap));
    let stop = StopFlag::new();
    // Every change the script makes goes through this fence; it is closed
    // before the caller hears how the run ended, so nothing the script
    // started is committed afterwards.
    let fence = Fence::new();
    let fs = fs.fenced(Arc::clone(&fence));
    // If the caller drops this future mid-run, the script stops too.
    let _abandon = Abandon {
        stop: Arc::clone(&stop),
        gate: Arc::clone(&gate),
    };
    let job = Job {
        fs,
        script: req.script,
        cwd: req.cwd,
        env: req.env,
        stdin: req.stdin,
        stdin_stream: req.stdin_stream,
        timeout,
        limits,
        gate: Arc::clone(&gate),
        stop: Arc::clone(&stop),
        egress: req.egress,
    };

    let (done_tx, mut done_rx) = oneshot::channel();
    if let Err(e) = spawn_exec_thread(job, done_tx) {
        let stop = Stop::Limit(format!("cannot start the exec thread: {e}"));
        return conclude(Some(stop), 0, timeout, &gate, &out).await;
    }

    let halted = tokio::select! {
        biased;
        done = &mut done_rx => {
            close_fence(&fence).await;
            return match done {
                Ok(Finished { exit_code, stop }) => conclude(stop, exit_code, timeout, &gate, &out).await,
                // The thread panicked: its sender dropped without a result.
                Err(_) => {
                    let stop = Stop::Limit("the shell failed internally".into());
                    conclude(Some(stop), 0, timeout, &gate, &out).await
                }
            };
        }
        () = cancel.cancelled() => Stop::Cancelled,
        () = out.closed() => Stop::Cancelled,
        () = tokio::time::sleep(timeout + STOP_GRACE) => Stop::Timeout,
    };
    // Ask the script to stop and give it a moment to get there, so that in
    // the usual case nothing touches the computer after we answer.
    stop.raise();
    let _ = tokio::time::timeout(STOP_GRACE, &mut done_rx).await;
    // A thread still running past the grace may be inside an engine call:
    // wait for that call, and refuse the thread's later ones.
    close_fence(&fence).await;
    conclude(Some(halted), 0, timeout, &gate, &out).await
}

/// Closes `fence` without blocking the caller's async worker. The wait is
/// for one engine call in flight at most (one transaction).
async fn close_fence(fence: &Arc<Fence>) {
    let fence = Arc::clone(fence);
    if let Err(e) = tokio::task::spawn_blocking(move || fence.close()).await {
        tracing::error!(error = %e, "closing the exec's write fence failed");
    }
}

/// Stops the script and its output when dropped.
struct Abandon {
    stop: Arc<StopFlag>,
    gate: Arc<OutputGate>,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.stop.raise();
        self.gate.close();
    }
}

fn spawn_exec_thread(job: Job, done: oneshot::Sender<Finished>) -> std::io::Result<()> {
    crate::pool::spawn(move || {
        // IO as well as time: `curl` and `wget` open sockets on this runtime.
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = done.send(Finished {
                    exit_code: 0,
                    stop: Some(Stop::Limit(format!("cannot start the shell runtime: {e}"))),
                });
                return;
            }
        };
        let finished = runtime.block_on(session::execute(job));
        let _ = done.send(finished);
    })
}

/// Turns how the run ended into the outcome, writing the runtime's message
/// to stderr (bounded by the grace period, so a reader that stopped
/// reading cannot hold the caller).
async fn conclude(
    stop: Option<Stop>,
    exit_code: i32,
    timeout: Duration,
    gate: &OutputGate,
    out: &mpsc::Sender<OutputChunk>,
) -> ExecOutcome {
    gate.close();
    let Some(stop) = stop else {
        return ExecOutcome {
            exit_code,
            error: None,
        };
    };
    let (exit_code, message) = match stop {
        Stop::Timeout => (
            EXIT_TIMEOUT,
            format!("shell: script timed out after {}", human(timeout)),
        ),
        Stop::Cancelled => (EXIT_CANCELLED, "shell: script cancelled".to_string()),
        Stop::OutputCap => (
            EXIT_OUTPUT_CAP,
            format!(
                "shell: output exceeded {} bytes; output truncated and script stopped",
                gate.cap()
            ),
        ),
        Stop::Limit(what) => (EXIT_LIMIT, format!("shell: script stopped: {what}")),
        Stop::BadCwd(what) => (EXIT_LIMIT, format!("shell: {what}")),
        Stop::Refused(message) => (EXIT_REFUSED, message),
    };
    let line = format!("{message}\n").into_bytes();
    let _ = tokio::time::timeout(STOP_GRACE, out.send(OutputChunk::Stderr(line))).await;
    ExecOutcome {
        exit_code,
        error: Some(message),
    }
}

/// `5s`, `1.5s`, `250ms`.
fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::human;
    use std::time::Duration;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human(Duration::from_secs(5)), "5s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_millis(250)), "250ms");
    }
}
