//! One run: `bash -c SCRIPT` in a session of its own, its output streamed
//! under a cap, all its processes killed (its process group and whatever
//! left it: [`Reaper::kill_run`]) when it ends, times out, is cancelled or
//! passes the cap.
//!
//! Exit codes and messages are those of every runtime
//! (`agentcomputer-runtime-contract`): 124 timeout, 125 could not start,
//! 130 cancelled, 141 output cap; the message is also written to stderr.

use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::reaper::Reaper;

pub(crate) use agentcomputer_runtime_contract::{
    EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_START_FAILED, EXIT_TIMEOUT,
};

/// Timeout when the agent sends 0.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Output cap when the agent sends 0 (16 MiB).
const DEFAULT_MAX_OUTPUT: u64 = 16 * 1024 * 1024;
/// Bytes read at most per output chunk (well below the gRPC message limit).
const READ_SIZE: usize = 64 * 1024;
/// How long the output readers may take after the run was killed (a
/// process that did not die in time, e.g. stuck in the kernel, may still
/// hold the pipes).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// The directory runs see their files under.
const WORKSPACE: &str = "/workspace";

/// Events of the attach stream.
pub(crate) type Events = mpsc::Sender<pb::RunnerEvent>;

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct End {
    pub code: i32,
    pub error: Option<String>,
}

/// Runs `start` to its end, sending its output and then its exit to
/// `events`. `cancel` fires (or is dropped) to stop it.
pub(crate) async fn run(
    start: pb::RunnerStart,
    input: Option<mpsc::UnboundedReceiver<pb::RunnerStdin>>,
    workspace: PathBuf,
    reaper: Arc<Reaper>,
    events: Events,
    cancel: oneshot::Receiver<()>,
) {
    let id = start.run_id;
    let end = execute(start, input, &workspace, &reaper, &events, cancel).await;
    if let Some(error) = &end.error {
        let _ = events
            .send(output(
                id,
                pb::RunnerStream::Stderr,
                format!("{error}\n").into_bytes(),
            ))
            .await;
    }
    let _ = events
        .send(pb::RunnerEvent {
            event: Some(pb::runner_event::Event::Exit(pb::RunnerExit {
                run_id: id,
                code: end.code,
                error: end.error.unwrap_or_default(),
            })),
        })
        .await;
}

fn output(run_id: u64, stream: pb::RunnerStream, data: Vec<u8>) -> pb::RunnerEvent {
    pb::RunnerEvent {
        event: Some(pb::runner_event::Event::Output(pb::RunnerOutput {
            run_id,
            stream: stream as i32,
            data,
        })),
    }
}

enum Stop {
    Timeout,
    Cancelled,
    OutputCap,
}

async fn execute(
    start: pb::RunnerStart,
    input: Option<mpsc::UnboundedReceiver<pb::RunnerStdin>>,
    workspace: &Path,
    reaper: &Arc<Reaper>,
    events: &Events,
    mut cancel: oneshot::Receiver<()>,
) -> End {
    let failed = |what: String| End {
        code: EXIT_START_FAILED,
        error: Some(format!("container: cannot start the script: {what}")),
    };
    let cwd = match host_path(workspace, &start.cwd) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let timeout = match start.timeout_ms {
        0 => DEFAULT_TIMEOUT,
        ms => Duration::from_millis(ms),
    };
    let cap = match start.max_output_bytes {
        0 => DEFAULT_MAX_OUTPUT,
        n => n,
    };
    let mut cmd = Command::new(shell());
    cmd.arg("-c")
        .arg(&start.script)
        .current_dir(&cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in crate::OWN_VARS {
        cmd.env_remove(name);
    }
    let mut env: Vec<_> = start.env.iter().collect();
    env.sort();
    cmd.envs(env);
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it makes the script the leader of a new session and process
    // group, so killing the group reaches every process it starts (unless
    // one makes a session of its own).
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let (mut child, exited, run) = match reaper.spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => return failed(format!("{} in {}: {e}", shell(), start.cwd)),
    };
    let budget = Arc::new(Budget::new(cap));
    let mut readers = Vec::new();
    if let Some(s) = child
        .stdout
        .take()
        .and_then(|s| tokio::process::ChildStdout::from_std(s).ok())
    {
        readers.push(tokio::spawn(forward(
            s,
            start.run_id,
            pb::RunnerStream::Stdout,
            budget.clone(),
            events.clone(),
        )));
    }
    if let Some(s) = child
        .stderr
        .take()
        .and_then(|s| tokio::process::ChildStderr::from_std(s).ok())
    {
        readers.push(tokio::spawn(forward(
            s,
            start.run_id,
            pb::RunnerStream::Stderr,
            budget.clone(),
            events.clone(),
        )));
    }
    if let Some(mut stdin) = child
        .stdin
        .take()
        .and_then(|s| tokio::process::ChildStdin::from_std(s).ok())
    {
        let bytes = start.stdin;
        let (run_id, events) = (start.run_id, events.clone());
        // A script that never reads its stdin must not block the run; the
        // pipe closes when the write ends (or fails), or, for streamed
        // input, after the last piece.
        tokio::spawn(async move {
            let mut open = stdin.write_all(&bytes).await.is_ok();
            let Some(mut input) = input else { return };
            let mut taken = 0u64;
            while let Some(piece) = input.recv().await {
                if open && !piece.data.is_empty() {
                    open = stdin.write_all(&piece.data).await.is_ok();
                }
                if piece.end {
                    break;
                }
                // Acknowledged once written (or dropped, the script having
                // closed its stdin): the agent may send more.
                taken += piece.data.len() as u64;
                let ack = pb::RunnerStdinAck {
                    run_id,
                    bytes: taken,
                };
                let ack = pb::RunnerEvent {
                    event: Some(pb::runner_event::Event::StdinAck(ack)),
                };
                if events.send(ack).await.is_err() {
                    return;
                }
            }
        });
    }
    let mut exited = exited;
    let stopped = tokio::select! {
        code = &mut exited => Ok(code.unwrap_or(EXIT_START_FAILED)),
        () = tokio::time::sleep(timeout) => Err(Stop::Timeout),
        _ = &mut cancel => Err(Stop::Cancelled),
        () = budget.over.notified() => Err(Stop::OutputCap),
    };
    // The script's background jobs go with it, whatever the reason, also
    // those that left its session.
    reaper.kill_run(run).await;
    if stopped.is_err() {
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut exited).await;
    }
    let drain = async {
        for r in &mut readers {
            let _ = r.await;
        }
    };
    if tokio::time::timeout(DRAIN_GRACE, drain).await.is_err() {
        for r in &readers {
            r.abort();
        }
    }
    reaper.run_done(run).await;
    let capped = || End {
        code: EXIT_OUTPUT_CAP,
        error: Some(format!(
            "container: output exceeded {cap} bytes; output truncated and script stopped"
        )),
    };
    match stopped {
        Ok(_) if budget.passed() => capped(),
        Ok(code) => End { code, error: None },
        Err(Stop::OutputCap) => capped(),
        Err(Stop::Timeout) => End {
            code: EXIT_TIMEOUT,
            error: Some(format!(
                "container: script timed out after {}",
                human(timeout)
            )),
        },
        Err(Stop::Cancelled) => End {
            code: EXIT_CANCELLED,
            error: Some("container: script cancelled".into()),
        },
    }
}

/// `bash` when the image has it (on `PATH` or in `/bin`), else `sh`.
fn shell() -> &'static str {
    static SHELL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        let found = std::env::split_paths(&path)
            .chain([PathBuf::from("/bin")])
            .any(|dir| dir.join("bash").is_file());
        if found { "bash" } else { "sh" }
    })
}

/// The host path of `cwd` (`/workspace` or below) under `workspace`.
/// Errors on any other path, or one with `..` in it.
pub(crate) fn host_path(workspace: &Path, cwd: &str) -> Result<PathBuf, String> {
    let cwd = if cwd.is_empty() { WORKSPACE } else { cwd };
    let rest = Path::new(cwd)
        .strip_prefix(WORKSPACE)
        .map_err(|_| format!("the working directory {cwd:?} is not under {WORKSPACE}"))?;
    let mut out = workspace.to_path_buf();
    for c in rest.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return Err(format!("the working directory {cwd:?} is not normalised")),
        }
    }
    Ok(out)
}

/// `5s`, `1.5s`, `250ms`, as the local runtime writes durations.
fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The bytes stdout and stderr may still send together.
struct Budget {
    left: AtomicU64,
    over: Notify,
    passed: AtomicBool,
}

impl Budget {
    fn new(cap: u64) -> Budget {
        Budget {
            left: AtomicU64::new(cap),
            over: Notify::new(),
            passed: AtomicBool::new(false),
        }
    }

    /// Takes up to `n` bytes and returns how many may be sent; fewer than
    /// asked marks the cap passed.
    fn take(&self, n: u64) -> u64 {
        let mut left = self.left.load(Ordering::SeqCst);
        loop {
            let grant = left.min(n);
            match self
                .left
                .compare_exchange(left, left - grant, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    if grant < n {
                        self.passed.store(true, Ordering::SeqCst);
                        self.over.notify_one();
                    }
                    return grant;
                }
                Err(now) => left = now,
            }
        }
    }

    fn passed(&self) -> bool {
        self.passed.load(Ordering::SeqCst)
    }
}

/// Sends what `stream` gives as output events until end of file, the cap
/// is passed or the attach stream is gone.
async fn forward<R: AsyncRead + Unpin>(
    mut stream: R,
    run_id: u64,
    which: pb::RunnerStream,
    budget: Arc<Budget>,
    events: Events,
) {
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let grant = budget.take(n as u64) as usize;
        if grant > 0
            && events
                .send(output(run_id, which, buf[..grant].to_vec()))
                .await
                .is_err()
        {
            return;
        }
        if grant < n {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_directories_stay_in_the_workspace() {
        let ws = Path::new("/w");
        assert_eq!(host_path(ws, "").unwrap(), PathBuf::from("/w"));
        assert_eq!(host_path(ws, "/workspace").unwrap(), PathBuf::from("/w"));
        assert_eq!(
            host_path(ws, "/workspace/a/./b").unwrap(),
            PathBuf::from("/w/a/b")
        );
        assert!(host_path(ws, "/workspace/../etc").is_err());
        assert!(host_path(ws, "/etc").is_err());
        assert!(host_path(ws, "/workspacex").is_err());
    }

    #[test]
    fn the_budget_is_shared_and_reports_the_cut() {
        let b = Budget::new(10);
        assert_eq!(b.take(4), 4);
        assert!(!b.passed());
        assert_eq!(b.take(6), 6);
        assert!(!b.passed());
        assert_eq!(b.take(1), 0);
        assert!(b.passed());
    }

    fn start(script: &str, cwd: &str) -> pb::RunnerStart {
        pb::RunnerStart {
            run_id: 1,
            script: script.into(),
            cwd: cwd.into(),
            timeout_ms: 10_000,
            ..Default::default()
        }
    }

    /// Runs `start` on `dir`: its stdout and how it ended.
    async fn run_on(reaper: &Arc<Reaper>, dir: &Path, start: pb::RunnerStart) -> (String, End) {
        let (events, mut rx) = mpsc::channel(64);
        let (_cancel, cancelled) = oneshot::channel();
        let end = execute(start, None, dir, reaper, &events, cancelled).await;
        drop(events);
        let mut out = Vec::new();
        while let Some(ev) = rx.recv().await {
            if let Some(pb::runner_event::Event::Output(o)) = ev.event
                && o.stream == pb::RunnerStream::Stdout as i32
            {
                out.extend(o.data);
            }
        }
        (String::from_utf8(out).unwrap(), end)
    }

    /// One test: a reaper reaps every child of the process, so two would
    /// steal each other's.
    #[tokio::test]
    async fn runs_start_and_end_cleanly() {
        let reaper = Reaper::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // A spawn that fails (chdir in the child) while the reaper runs.
        for _ in 0..20 {
            let (_, end) = run_on(&reaper, dir.path(), start("true", "/workspace/missing")).await;
            assert_eq!(end.code, EXIT_START_FAILED);
            let error = end.error.unwrap();
            assert!(
                error.starts_with("container: cannot start the script:"),
                "{error}"
            );
        }
        // Streamed stdin: written as it comes, acknowledged piece by piece,
        // closed at the end.
        let (events, mut rx) = mpsc::channel(64);
        let (_cancel, cancelled) = oneshot::channel();
        let (input, pieces) = mpsc::unbounded_channel();
        let mut streamed = start("wc -c", "/workspace");
        streamed.stdin = b"head ".to_vec();
        streamed.stdin_stream = true;
        for (data, end) in [
            (vec![b'x'; 3 << 20], false),
            (vec![b'y'; 7], false),
            (Vec::new(), true),
        ] {
            input
                .send(pb::RunnerStdin {
                    run_id: 1,
                    data,
                    end,
                })
                .unwrap();
        }
        let end = execute(
            streamed,
            Some(pieces),
            dir.path(),
            &reaper,
            &events,
            cancelled,
        )
        .await;
        drop(events);
        assert_eq!(
            end,
            End {
                code: 0,
                error: None
            }
        );
        let (mut out, mut acks) = (Vec::new(), Vec::new());
        while let Some(ev) = rx.recv().await {
            match ev.event {
                Some(pb::runner_event::Event::Output(o)) => out.extend(o.data),
                Some(pb::runner_event::Event::StdinAck(a)) => acks.push(a.bytes),
                _ => {}
            }
        }
        assert_eq!(
            String::from_utf8(out).unwrap().trim(),
            ((3 << 20) + 12).to_string()
        );
        assert_eq!(acks, [3 << 20, (3 << 20) + 7]);

        // Background jobs end with the script.
        let (out, end) = run_on(
            &reaper,
            dir.path(),
            start("sleep 100 & echo $!", "/workspace"),
        )
        .await;
        assert_eq!(
            end,
            End {
                code: 0,
                error: None
            }
        );
        let pid = out.trim();
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        for _ in 0..50 {
            if !proc_dir.exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the background job {pid} outlived its script");
    }

    #[test]
    fn durations_read_like_the_local_runtime() {
        assert_eq!(human(Duration::from_secs(2)), "2s");
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }
}
