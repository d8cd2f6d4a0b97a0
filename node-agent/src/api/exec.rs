//! The Exec call: runs a program on a computer and streams its output.
//!
//! Two runtimes run in-process: the shell (a bash script) and JavaScript (an
//! ES module whose default export gets `input_json` and returns the result);
//! the third, the container, runs the bash script with real binaries in a
//! sandbox, through whichever [`ContainerRuntime`] the mode gave the
//! service (the local sandbox, or the computer's sandbox pod in a
//! cluster). The in-process runtimes run a program on an OS thread of its
//! own, so a busy program never
//! occupies the server's worker threads and runs on different computers
//! never wait on each other. The run is cancelled when the client goes away
//! (the response stream is dropped), when the computer is deleted, or when
//! the agent shuts down.

mod choice;
mod fetch;
mod prepare;
mod program;
mod pump;
mod request;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_fs::FileKind;
use agentcomputer_js::JsRequest;
use agentcomputer_proto::Requested;
use agentcomputer_proto::v1 as pb;
use agentcomputer_runtime_contract::Runtime;
use agentcomputer_shell::auto::Route;
use agentcomputer_shell::{ExecRequest as ShellRequest, ShellLimits};
use nix::errno::Errno;
use pb::exec_event::Event;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tracing::info;

use super::convert::resolve;
use super::observe::{ExecOutcome, Observer};
use crate::admission::{Admission, MemoryAsk};
use crate::api::container_runtime::{ContainerRun, ContainerRuntime};
use crate::blocking::blocking;
use crate::errors::{errno_detail, errno_status};
use crate::paths::ApiPath;
use crate::registry::Registry;
use choice::{Choice, decide, runtime_of};
use prepare::prepare_container;
use program::Program;
pub(super) use request::policy_of;
use request::{check_env, parse_input};

pub use program::MAX_RESULT_BYTES;

/// Timeout when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest timeout a request may ask for.
pub const MAX_TIMEOUT: Duration = agentcomputer_runtime_contract::MAX_EXEC_TIMEOUT;
/// Output cap when the request gives none (16 MiB).
pub const DEFAULT_MAX_OUTPUT: u64 = 16 * 1024 * 1024;
/// Memory budget of one exec when the request gives none, and the most a
/// request may ask for (256 MiB): the shell's `ShellLimits::memory_bytes`,
/// the JavaScript heap limit, a container's cgroup `memory.max`. A request
/// that asks for none may be given less on a busy agent (never less than
/// the admission floor, [`crate::admission::AdmissionConfig::min_exec_memory_bytes`]).
/// See docs/isolation.md.
pub const DEFAULT_EXEC_MEMORY: u64 = 256 * 1024 * 1024;
/// The least memory budget a request may name (8 MiB): below it no
/// runtime starts (bash alone, in the container runtime, needs about 4 MiB;
/// a QuickJS context about 1 MiB), and a run killed at once would say
/// nothing useful.
pub const MIN_EXEC_MEMORY: u64 = 8 * 1024 * 1024;
/// Events buffered ahead of a slow client.
const EVENT_BUFFER: usize = 64;
/// `input_json` longer than this is parsed on the blocking pool.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// The stream of an Exec call.
pub type ExecStream = ReceiverStream<Result<pb::ExecEvent, Status>>;

/// Validates `req`, starts the run and returns its event stream; reports
/// the end (or the refusal) of every exec to `observer`. Errors before the
/// run: an unknown runtime or `input_json` that is not JSON (INVALID_ARGUMENT), `input_json` for a runtime other
/// than JavaScript (INVALID_ARGUMENT), RUNTIME_CONTAINER on an agent that
/// cannot build the sandbox (FAILED_PRECONDITION, saying which walls are
/// missing), an unknown computer, a runtime the computer does not enable
/// (FAILED_PRECONDITION), RUNTIME_CONTAINER on a computer whose sandbox is
/// not ready ([`ContainerRuntime::not_ready`], FAILED_PRECONDITION), a bad
/// or missing `cwd`, no admission
/// (RESOURCE_EXHAUSTED, see [`Admission::admit`]).
///
/// RUNTIME_AUTO runs the script in the shell or the container runtime as
/// [`agentcomputer_shell::auto::decide`] says; where the container was
/// chosen and the computer has none (the agent cannot build sandboxes, or
/// `spec.runtimes.container` is off), a script naming a command the shell
/// runtime lacks is refused (FAILED_PRECONDITION naming the command) and
/// any other runs in the shell runtime; a computer with the shell runtime
/// disabled runs it in the container. The exit event names the runtime
/// that ran and, for RUNTIME_AUTO, why.
///
/// Limits: a request's timeout, output cap and memory of 0 take the
/// computer's ([`crate::computer::ExecLimits`]), else the agent's defaults;
/// a larger timeout or output cap is cut to the computer's; a memory
/// budget above the computer's (else [`DEFAULT_EXEC_MEMORY`]) is refused
/// (INVALID_ARGUMENT naming the limit), in every runtime alike; the memory
/// budget a run gets is the one admission reserved
/// ([`crate::admission::MemoryAsk`]). A timeout above [`MAX_TIMEOUT`] is refused
/// (INVALID_ARGUMENT naming the maximum), whatever the computer's limit.
pub async fn start(
    registry: &Registry,
    containers: &Arc<dyn ContainerRuntime>,
    admission: &Admission,
    req: pb::ExecRequest,
    observer: Arc<dyn Observer>,
) -> Result<ExecStream, Status> {
    start_with_input(registry, containers, admission, req, None, observer).await
}

/// Standard input of an ExecStream call, after the request's own `stdin`:
/// chunks as the caller sends them, the end when the sender is dropped.
pub struct StreamedStdin {
    /// The chunks; bounded, so a program that reads slowly holds back the
    /// caller.
    pub chunks: mpsc::Receiver<Vec<u8>>,
    /// Set (and `failed` cancelled) when the caller's stream fails: the run
    /// is stopped and its exit says why.
    pub failure: Arc<parking_lot::Mutex<Option<String>>>,
    /// Cancelled when the caller's stream fails.
    pub failed: tokio_util::sync::CancellationToken,
}

/// [`start`] with input that arrives while the run goes. The shell and
/// the container runtime stream it to the program; JavaScript gets it whole
/// before the module runs, at most the run's memory budget of it (more
/// ends the run with an error saying so), and a container run in a
/// cluster at most one runner message of it (4 MiB less 64 KiB).
pub async fn start_with_input(
    registry: &Registry,
    containers: &Arc<dyn ContainerRuntime>,
    admission: &Admission,
    req: pb::ExecRequest,
    input: Option<StreamedStdin>,
    observer: Arc<dyn Observer>,
) -> Result<ExecStream, Status> {
    let runtime = pb::Runtime::try_from(req.runtime).map_err(|_| {
        errno_detail(
            Errno::EINVAL,
            format_args!("unknown runtime {}", req.runtime),
        )
    })?;
    let requested = Requested::from(runtime);
    let (runtime, auto) = match requested {
        Requested::Runtime(runtime) => (runtime, None),
        Requested::Auto => {
            let decision = decide(&req.script).await;
            (runtime_of(decision.route), Some(decision))
        }
    };
    let started = start_runtime(
        registry,
        containers,
        admission,
        Choice { runtime, auto },
        req,
        input,
        observer.clone(),
    )
    .await;
    if started.is_err() {
        observer.exec_finished(requested.name(), ExecOutcome::Rejected, Duration::ZERO);
    }
    started
}

/// Starts a run of `runtime`, named by [`Runtime::name`] in messages, logs,
/// metrics and `spec.runtimes`.
async fn start_runtime(
    registry: &Registry,
    containers: &Arc<dyn ContainerRuntime>,
    admission: &Admission,
    mut choice: Choice,
    req: pb::ExecRequest,
    streamed: Option<StreamedStdin>,
    observer: Arc<dyn Observer>,
) -> Result<ExecStream, Status> {
    let (mut stdin_chunks, stdin_failure) = match streamed {
        Some(s) => (Some(s.chunks), Some((s.failure, s.failed))),
        None => (None, None),
    };
    let input = match choice.runtime {
        Runtime::Shell | Runtime::Container => {
            if !req.input_json.is_empty() {
                return Err(errno_detail(
                    Errno::EINVAL,
                    "input_json is only for RUNTIME_JAVASCRIPT; a shell script reads stdin",
                ));
            }
            None
        }
        Runtime::JavaScript => Some(parse_input(req.input_json).await?),
    };
    if choice.runtime == Runtime::Container
        && let Some(why) = containers.unavailable_reason()
    {
        choice.without_container(why)?;
    }
    if req.sync && registry.backup_target().is_none() {
        return Err(crate::registry::RegistryError::NoBackup(req.computer.clone()).into());
    }
    let lease = registry.acquire(&req.computer).await?;
    let settings = lease.settings();
    if choice.auto.is_some() {
        if choice.runtime == Runtime::Container && !settings.runtimes.container {
            choice.without_container("spec.runtimes.container is off".into())?;
        } else if choice.runtime == Runtime::Shell
            && !settings.runtimes.shell
            && settings.runtimes.container
            && containers.unavailable_reason().is_none()
            && let Some(decision) = choice.auto.as_mut()
        {
            decision.reason = "the shell runtime is disabled for this computer".into();
            decision.route = Route::Container;
            choice.runtime = Runtime::Container;
        }
    }
    let runtime = choice.runtime;
    let runtime_name = runtime.name();
    let (runtime_reason, auto_command) = match &choice.auto {
        Some(decision) => (decision.reason.clone(), decision.missing.clone()),
        None => (String::new(), None),
    };
    let enabled = match runtime {
        Runtime::JavaScript => settings.runtimes.javascript,
        Runtime::Container => settings.runtimes.container,
        Runtime::Shell => settings.runtimes.shell,
    };
    if !enabled {
        return Err(Status::failed_precondition(format!(
            "runtime {runtime_name} is disabled for this computer (spec.runtimes.{runtime_name})"
        )));
    }
    if runtime == Runtime::Container
        && let Some(why) = containers.not_ready(lease.name()).await
    {
        return Err(Status::failed_precondition(why));
    }
    check_env(&req.env)?;
    if runtime == Runtime::Container {
        for name in req.env.keys() {
            agentcomputer_container::launch::check_name(name)
                .map_err(|e| errno_detail(Errno::EINVAL, e))?;
        }
    }
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
    let limits = settings.exec;
    let most_time = limits.timeout_ms.map_or(MAX_TIMEOUT, Duration::from_millis);
    let timeout = match req.timeout_ms {
        0 => limits
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis),
        ms if Duration::from_millis(ms) > MAX_TIMEOUT => {
            return Err(errno_detail(
                Errno::EINVAL,
                format_args!(
                    "timeout_ms {ms} is above the maximum, {} ms (1 hour)",
                    MAX_TIMEOUT.as_millis()
                ),
            ));
        }
        ms => Duration::from_millis(ms).min(most_time),
    };
    let max_output_bytes = match req.max_output_bytes {
        0 => limits.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT),
        n => limits.max_output_bytes.map_or(n, |most| n.min(most)),
    };
    let most_memory = limits.memory_bytes.unwrap_or(DEFAULT_EXEC_MEMORY);
    // No budget asked: the computer's default, or less on a busy agent
    // (admission sizes it); a budget asked for is reserved whole.
    let ask = match req.memory_limit_bytes {
        0 => MemoryAsk::AtMost(most_memory),
        n if n > most_memory => {
            let whose = if limits.memory_bytes.is_some() {
                "this computer's limit (spec.limits.memory)"
            } else {
                "the default budget of a computer with no memory limit (spec.limits.memory raises it)"
            };
            return Err(errno_detail(
                Errno::EINVAL,
                format_args!(
                    "memory_limit_bytes {n} is above {whose}: {most_memory} bytes ({})",
                    agentcomputer_runtime_contract::human_bytes(most_memory)
                ),
            ));
        }
        n if n < MIN_EXEC_MEMORY => {
            return Err(errno_detail(
                Errno::EINVAL,
                format_args!(
                    "memory_limit_bytes {n} is below the least any runtime can start with, {MIN_EXEC_MEMORY} bytes ({})",
                    agentcomputer_runtime_contract::human_bytes(MIN_EXEC_MEMORY)
                ),
            ));
        }
        n => MemoryAsk::Exactly(n),
    };
    let memory = ask.most();
    let egress = policy_of(&lease, &settings.egress);
    let mut env: Vec<(String, String)> = req.env.into_iter().collect();
    env.sort();
    let mut program = match input {
        None if runtime == Runtime::Container => Program::Container(
            Arc::clone(containers),
            ContainerRun {
                computer: lease.name().to_string(),
                fs: lease.fs().clone(),
                egress,
                script: req.script,
                cwd: cwd.runtime_path(),
                env,
                stdin: req.stdin,
                stdin_stream: stdin_chunks.take(),
                timeout,
                max_output_bytes,
                memory_limit_bytes: memory,
            },
        ),
        None => Program::Shell(
            ShellRequest {
                script: req.script,
                cwd: cwd.runtime_path(),
                env,
                stdin: req.stdin,
                stdin_stream: stdin_chunks
                    .take()
                    .map(agentcomputer_shell::StdinStream::new)
                    .unwrap_or_default(),
                timeout,
                max_output_bytes,
                egress,
            },
            ShellLimits {
                memory_bytes: memory,
                ..ShellLimits::default()
            },
        ),
        Some(input) => Program::JavaScript(
            JsRequest {
                source: req.script,
                input,
                cwd: cwd.runtime_path(),
                env,
                argv: Vec::new(),
                stdin: req.stdin,
                timeout,
                max_output_bytes,
                memory_limit_bytes: usize::try_from(memory).unwrap_or(usize::MAX),
                // Zero: the runtime's own stack default.
                stack_limit_bytes: 0,
            },
            egress,
        ),
    };

    // The exec's memory budget is reserved for it while it runs. A
    // container exec reserves it once its sandbox is there, so that
    // waiting for a pod to start holds nothing other computers need.
    let early_permit = match program {
        Program::Container(..) => None,
        _ => Some(admission.admit(lease.name(), ask).await?),
    };
    let admission = admission.clone();

    let sync = req.sync;
    let registry = registry.clone();
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let cancel = lease.cancel_token();
    if let Some((_, failed)) = &stdin_failure {
        // A failed input stream stops the run.
        let (failed, cancel) = (failed.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = failed.cancelled() => cancel.cancel(),
                () = cancel.cancelled() => {}
            }
        });
    }
    tokio::spawn(async move {
        let computer = lease.name().to_string();
        let started = Instant::now();
        info!(%computer, runtime = runtime_name, reason = %runtime_reason, command = ?auto_command, timeout_ms = timeout.as_millis() as u64, "exec started");
        // A container run may first wait for its sandbox; the wait does not
        // count against the script's timeout.
        if let Program::Container(containers, _) = &program
            && let Err(why) = prepare_container(containers.as_ref(), &computer, &tx, &cancel).await
        {
            info!(%computer, runtime = runtime_name, error = %why, "exec could not start");
            let outcome = if tx.is_closed() || cancel.is_cancelled() {
                ExecOutcome::Cancelled
            } else {
                ExecOutcome::Error
            };
            observer.exec_finished(runtime_name, outcome, started.elapsed());
            let exit = pb::ExecExit {
                code: agentcomputer_runtime_contract::EXIT_START_FAILED,
                error: why,
                result_json: String::new(),
                duration_ms: started.elapsed().as_millis() as u64,
                backup_position: 0,
                runtime: runtime_name.to_string(),
                runtime_reason: runtime_reason.clone(),
            };
            let _ = tx
                .send(Ok(pb::ExecEvent {
                    event: Some(Event::Exit(exit)),
                }))
                .await;
            drop(lease);
            return;
        }
        let permit = match early_permit {
            Some(permit) => permit,
            None => match admission.admit(&computer, ask).await {
                Ok(permit) => permit,
                Err(refusal) => {
                    observer.exec_finished(runtime_name, ExecOutcome::Rejected, started.elapsed());
                    let _ = tx.send(Err(Status::from(refusal))).await;
                    drop(lease);
                    return;
                }
            },
        };
        program.set_memory(permit.memory());
        // JavaScript reads its input whole: gathered now, within the budget.
        if let (Program::JavaScript(js, _), Some(chunks)) = (&mut program, stdin_chunks.take())
            && let Err(why) =
                gather_stdin(&mut js.stdin, chunks, permit.memory(), timeout, &cancel).await
        {
            observer.exec_finished(runtime_name, ExecOutcome::Error, started.elapsed());
            let exit = pb::ExecExit {
                code: agentcomputer_js::EXIT_FAILURE,
                error: why,
                result_json: "null".into(),
                duration_ms: started.elapsed().as_millis() as u64,
                backup_position: 0,
                runtime: runtime_name.to_string(),
                runtime_reason: runtime_reason.clone(),
            };
            let _ = tx
                .send(Ok(pb::ExecEvent {
                    event: Some(Event::Exit(exit)),
                }))
                .await;
            drop((permit, lease));
            return;
        }
        let run = program.start(
            lease.fs().clone(),
            cancel.clone(),
            lease.scratch_dir().to_path_buf(),
        );
        let (client_gone, mut finished) = pump::pump(run, &tx, &cancel, timeout).await;
        if lease.deleted() && finished.error.is_some() {
            // The runtime only knows it was cancelled; say by what.
            finished.error = Some(format!(
                "computer {computer} was deleted while the run was going; the run was stopped and its files are gone"
            ));
        }
        if let Some((failure, _)) = &stdin_failure
            && let Some(why) = failure.lock().clone()
        {
            finished.error = Some(format!(
                "the exec's standard input failed ({why}); the run was stopped"
            ));
        }
        if let Some(why) = lease.ended()
            && finished.error.is_some()
        {
            finished.error = Some(format!("the run on computer {computer} was stopped: {why}"));
        }
        if let Some(why) = lease.writer_lost() {
            finished.error = Some(format!(
                "this node stopped serving computer {computer} during the run ({why}): the run was stopped, and nothing it wrote after that was kept"
            ));
        }
        let elapsed = started.elapsed();
        let duration_ms = elapsed.as_millis() as u64;
        info!(%computer, runtime = runtime_name, code = finished.exit_code, error = ?finished.error, duration_ms, client_gone, "exec finished");
        let outcome = if client_gone || (cancel.is_cancelled() && finished.error.is_some()) {
            ExecOutcome::Cancelled
        } else if finished.error.is_some() {
            ExecOutcome::Error
        } else if finished.exit_code == 0 {
            ExecOutcome::Success
        } else {
            ExecOutcome::Failure
        };
        observer.exec_finished(runtime_name, outcome, elapsed);
        if !client_gone {
            let mut error = finished.error.unwrap_or_default();
            let mut backup_position = 0;
            if sync {
                match registry.sync(&computer).await {
                    Ok(s) => backup_position = s.position,
                    Err(e) => {
                        let not_synced =
                            format!("the run's changes are not confirmed in the backup store: {e}");
                        error = if error.is_empty() {
                            not_synced
                        } else {
                            format!("{error}; {not_synced}")
                        };
                    }
                }
            }
            let exit = pb::ExecExit {
                code: finished.exit_code,
                error,
                result_json: finished.result_json,
                duration_ms,
                backup_position,
                runtime: runtime_name.to_string(),
                runtime_reason,
            };
            let _ = tx
                .send(Ok(pb::ExecEvent {
                    event: Some(Event::Exit(exit)),
                }))
                .await;
        }
        drop((permit, lease));
    });
    Ok(ReceiverStream::new(rx))
}

/// Chunks of an ExecStream's input buffered ahead of the program (each up
/// to 1 MiB, [`agentcomputer_proto::CHUNK_BYTES`]); past them the caller's
/// stream is not read, and HTTP/2 flow control holds the caller back.
const STDIN_BUFFER: usize = 4;

/// A bounded channel for an ExecStream's input: its sender, and the
/// [`StreamedStdin`] the run reads.
pub fn stdin_channel() -> (mpsc::Sender<Vec<u8>>, StreamedStdin) {
    let (tx, rx) = mpsc::channel(STDIN_BUFFER);
    let input = StreamedStdin {
        chunks: rx,
        failure: Arc::default(),
        failed: tokio_util::sync::CancellationToken::new(),
    };
    (tx, input)
}

/// Copies the `stdin` chunks of an ExecStream call into `chunks` until
/// `stdin_end`, the caller's half-close, or the program no longer reading
/// (the run ended). A failed stream, or a second `start`, records why in
/// `failure` and cancels `failed`, which stops the run.
pub async fn forward_stdin(
    mut input: tonic::Streaming<pb::ExecStreamRequest>,
    chunks: mpsc::Sender<Vec<u8>>,
    failure: Arc<parking_lot::Mutex<Option<String>>>,
    failed: tokio_util::sync::CancellationToken,
) {
    use pb::exec_stream_request::Msg;
    loop {
        let message = tokio::select! {
            message = input.message() => message,
            // The run is over: nothing reads its input any more.
            () = chunks.closed() => return,
        };
        let why = match message {
            Ok(Some(pb::ExecStreamRequest {
                msg: Some(Msg::Stdin(data)),
            })) => {
                if data.is_empty() {
                    continue;
                }
                if chunks.send(data).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(Some(pb::ExecStreamRequest {
                msg: Some(Msg::StdinEnd(_)),
            }))
            | Ok(None) => return,
            Ok(Some(pb::ExecStreamRequest {
                msg: Some(Msg::Start(_)),
            })) => "a second `start` message".to_string(),
            Ok(Some(pb::ExecStreamRequest { msg: None })) => "an empty message".to_string(),
            Err(status) => status.message().to_string(),
        };
        *failure.lock() = Some(why);
        failed.cancel();
        return;
    }
}

/// Appends what `chunks` brings to `stdin`, up to `limit` bytes in all.
/// Errors: more input than that, the timeout passing, or `cancel`.
async fn gather_stdin(
    stdin: &mut Vec<u8>,
    mut chunks: mpsc::Receiver<Vec<u8>>,
    limit: u64,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        let chunk = tokio::select! {
            chunk = chunks.recv() => chunk,
            () = &mut deadline => return Err(format!(
                "javascript: the standard input did not end within the run's timeout ({} ms)",
                timeout.as_millis()
            )),
            () = cancel.cancelled() => return Err("javascript: the run was cancelled while its standard input arrived".into()),
        };
        let Some(chunk) = chunk else {
            return Ok(());
        };
        if (stdin.len() + chunk.len()) as u64 > limit {
            return Err(format!(
                "javascript: the standard input is more than the run's memory budget, {limit} bytes ({}); a module reads its input whole: copy large data to the computer first (put) and read the file",
                agentcomputer_runtime_contract::human_bytes(limit)
            ));
        }
        stdin.extend_from_slice(&chunk);
    }
}
