//! One exec on its own thread: build the interpreter over the computer's
//! namespace, run the script with output streamed through the gate, and say
//! how it ended.

use crate::budget::ExecBudget;
use crate::builtins;
use crate::dup_input;
use crate::engine_fs::EngineFs;
use crate::gathered::Gathered;
use crate::limits::ShellLimits;
use crate::output::{OutputGate, Refusal};
use crate::paths::resolve_cwd;
use crate::refuse;
use crate::runtime::EXIT_REFUSED;
use crate::sandbox_fs::SandboxFs;
use crate::stderr;
use crate::stdin;
use crate::stdin_free;
use crate::stop::StopFlag;
use crate::whole_input;
use agentcomputer_fs::Fs;
use bashkit::{Bash, ExecOptions, LimitExceeded};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The sandbox user's home, `/home/<user>` in the scratch tree (bashkit
/// makes it for its user).
fn home() -> String {
    format!("/home/{}", agentcomputer_runtime_contract::SANDBOX_USER)
}

/// Name the shell gives itself in diagnostics (`bash: line 1: ...`).
const SHELL_NAME: &str = "bash";

/// What the exec thread hands back.
pub(crate) struct Finished {
    pub exit_code: i32,
    pub stop: Option<Stop>,
}

/// Why the runtime, not the script, ended a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    Timeout,
    Cancelled,
    OutputCap,
    /// A budget ran out; the text is bashkit's description of it.
    Limit(String),
    /// The requested working directory is unusable.
    BadCwd(String),
    /// The script uses a construct the runtime cannot run as bash does;
    /// none of it ran (see the `refuse` module).
    Refused(String),
}

/// Everything the exec thread needs, moved into it.
pub(crate) struct Job {
    pub fs: Fs,
    pub script: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    /// Input that follows `stdin` while the run goes.
    pub stdin_stream: crate::stdin::StdinStream,
    pub timeout: Duration,
    pub limits: ShellLimits,
    pub gate: Arc<OutputGate>,
    /// The exec's stop flag, raised by the caller's task; linked to the
    /// interpreter's cancellation token once the interpreter exists.
    pub stop: Arc<StopFlag>,
    /// Decides the connections of `curl` and `wget`.
    pub egress: Arc<agentcomputer_egress::Policy>,
}

/// A hook run before every command: the exec thread's safe point where a
/// demoted exec waits for its computer's turn of idle CPU
/// ([`agentcomputer_sched::checkpoint`]), unless it must stop.
fn checkpoint_hook(stop: Arc<StopFlag>) -> bashkit::hooks::Interceptor<bashkit::hooks::ToolEvent> {
    Box::new(move |event| {
        agentcomputer_sched::checkpoint(|| stop.is_raised());
        bashkit::hooks::HookAction::Continue(event)
    })
}

/// Writes the exec's buffered appends before a command runs.
fn flush_hook(engine: EngineFs) -> bashkit::hooks::Interceptor<bashkit::hooks::ToolEvent> {
    Box::new(move |event| {
        engine.flush_appends_deferred();
        bashkit::hooks::HookAction::Continue(event)
    })
}

/// Runs `job` to completion on the current (exec) thread's runtime.
pub(crate) async fn execute(mut job: Job) -> Finished {
    let cwd = resolve_cwd(&job.cwd);
    let budget = ExecBudget {
        memory: job.limits.memory_bytes,
        stop: Arc::clone(&job.stop),
        deadline: Instant::now()
            .checked_add(job.timeout)
            .map(|at| (at, job.timeout)),
        timed_out: Arc::default(),
    };
    // Busy execs of one computer share one computer's turns of idle CPU.
    agentcomputer_sched::join_group(job.fs.db_path());
    let engine = EngineFs::new(job.fs.clone()).with_budget(budget.clone());
    let limits = job.limits.execution(job.timeout, job.gate.cap());
    let loads = dup_input::Loads::new(limits.max_ast_depth, limits.max_parser_operations);
    let sandbox = SandboxFs::new(engine.clone(), job.limits.scratch(), &home())
        .with_stderr(stderr::Sink::new(
            Arc::clone(&job.gate),
            Arc::clone(&job.stop),
        ))
        .with_loads(loads.clone());
    // `exec 9<&$fd` written so bashkit reads its target (the `dup_input`
    // module), or not run at all.
    match dup_input::mend(
        &job.script,
        limits.max_ast_depth,
        limits.max_parser_operations,
    ) {
        Ok(Some(mended)) => job.script = mended,
        Ok(None) => {}
        Err(refusal) => {
            return Finished {
                exit_code: EXIT_REFUSED,
                stop: Some(Stop::Refused(refusal.message())),
            };
        }
    }
    // A script that would give a silent wrong answer is not run at all.
    let (ordered, guarded, filters) = match refuse::check(
        &job.script,
        limits.max_ast_depth,
        limits.max_parser_operations,
    ) {
        refuse::Verdict::Refuse(refusal) => {
            return Finished {
                exit_code: EXIT_REFUSED,
                stop: Some(Stop::Refused(refusal.message())),
            };
        }
        refuse::Verdict::Run {
            flat,
            script,
            filters,
        } => (flat, script, filters),
        refuse::Verdict::Unparsed => (false, None, Vec::new()),
    };
    // The script as it runs: with `[[ -e $v ]]` operands guarded against
    // the empty value where that was needed (see the `refuse` module).
    let source = guarded.unwrap_or_else(|| job.script.clone());
    // With stdin, the script reads it through a pipe fed by the runtime
    // (see the `stdin` module); a script that must run as written gets it
    // whole, as bashkit hands it over; no stdin leaves the script alone.
    let streamed = job.stdin_stream.take();
    let wrapped = match job.stdin.is_empty() && streamed.is_none() {
        true => None,
        false => {
            // Commands that never read stdin leave the pipe to the next
            // (see the `stdin_free` module).
            let source =
                stdin_free::rewrite(&source, limits.max_ast_depth, limits.max_parser_operations)
                    .unwrap_or_else(|| source.clone());
            stdin::wrap(&source, &limits)
        }
    };
    // What bashkit gathers whole from the feeder's pipe is counted as it
    // is fed (see the `gathered` module).
    let gathered = Gathered::new();
    let (wrapped, feed, options) = match wrapped {
        Some(wrapped) => (
            Some(wrapped),
            Some(stdin::Feed::new(
                job.stdin,
                streamed,
                budget.clone(),
                Arc::clone(&gathered),
            )),
            ExecOptions::new(),
        ),
        None => {
            // Unwrapped, the script gets its input whole: streamed input
            // is gathered first, within the exec's memory budget.
            let mut input = job.stdin;
            if let Some(mut rest) = streamed {
                loop {
                    match stdin::next_chunk(&mut rest, &budget).await {
                        Ok(Some(chunk)) => {
                            let held = (input.len() + chunk.len()) as u64;
                            if let Err(e) = budget.admit(held, "the standard input") {
                                return Finished {
                                    exit_code: crate::runtime::EXIT_LIMIT,
                                    stop: Some(Stop::Limit(e.to_string())),
                                };
                            }
                            input.extend_from_slice(&chunk);
                        }
                        Ok(None) => break,
                        Err(e) => return failure(e, &job.gate, &source).await,
                    }
                }
            }
            (None, None, ExecOptions::new().stdin(input))
        }
    };
    // stderr through the ordered sink (see the `stderr` module) where
    // bashkit routes it per command: not inside the stdin wrapper, which
    // makes the whole script one compound command (and whose script stage
    // would hand all of stdin to the `exec`). A script that does not parse
    // runs as written, so its syntax report is bash's.
    let script = match (wrapped, ordered) {
        (Some(wrapped), _) => wrapped,
        (None, true) => stderr::wrap(&source),
        (None, false) => source,
    };
    let nested_limits = limits.clone();
    let network = builtins::http::Network {
        policy: job.egress,
        max_download_bytes: job.limits.max_download_bytes,
    };
    let mut builder = commands(
        &engine,
        &budget,
        network,
        &job.limits,
        job.timeout,
        job.gate.cap(),
    )
    .fs(Arc::new(sandbox))
    .limits(limits)
    .memory_limits(job.limits.memory())
    .session_limits(job.limits.session())
    .cwd(&cwd)
    .before_tool(checkpoint_hook(Arc::clone(&job.stop)))
    // Buffered appends (engine_fs::appends) reach the engine before every
    // command, so the next one, and the engine-direct commands, see them
    // (bashkit's live execution has no hook after a command).
    .before_tool(flush_hook(engine.clone()))
    .before_tool(loads.hook());
    for (key, value) in job.env {
        builder = builder.env(key, value);
    }
    if let Some(feed) = feed {
        builder = builder
            .command(stdin::END_COMMAND, feed.end())
            .command(stdin::FEED_COMMAND, feed)
            .before_tool(gathered.hook(filters.clone()));
        // The exec's stdin is consumed once by bashkit's whole-input
        // commands too (see the `whole_input` module).
        let cancel = Arc::new(AtomicBool::new(false));
        job.stop.link(Arc::clone(&cancel));
        let shared = whole_input::Shared {
            budget: budget.clone(),
            limits: nested_limits,
            memory: job.limits.memory(),
            cancel,
        };
        builder = whole_input::install(builder, &shared, &filters);
    }
    let mut bash = builder.build();
    builtins::set_startup_variables(&mut bash);
    // The interpreter checks its own token before every command (and its
    // long builtins poll it): raising the exec's flag raises it too, so a
    // stopped script ends at its next statement.
    let token = bash.cancellation_token();
    job.stop.link(Arc::clone(&token));

    if let Err(reason) = check_cwd(&bash, &cwd).await {
        let message = format!("cd: {cwd}: {reason}");
        return Finished {
            exit_code: 1,
            stop: Some(Stop::BadCwd(message)),
        };
    }

    let gate_out = Arc::clone(&job.gate);
    let gate_err = Arc::clone(&job.gate);
    let result = bash
        .execute(&script)
        .stdout_fn(move |bytes| {
            let gate = Arc::clone(&gate_out);
            async move { gate.deliver(false, bytes).await.map_err(refusal_error) }
        })
        .stderr_fn(move |bytes| {
            let gate = Arc::clone(&gate_err);
            async move { gate.deliver(true, bytes).await.map_err(refusal_error) }
        })
        .cancel_with(token)
        .options(options)
        .await;
    // What the script wrote is in the engine before the run is answered,
    // however it ended; a buffered write that failed is the script's error.
    engine.flush_appends_deferred();
    let deferred = engine.deferred_error();
    if let Some((path, reason)) = &deferred {
        let shown = format!("{}{}", crate::sandbox_fs::WORKSPACE, path.display());
        let _ = job
            .gate
            .deliver(
                true,
                format!("{SHELL_NAME}: {shown}: {reason}\n").into_bytes(),
            )
            .await;
    }
    let failed = |code: i32| {
        if deferred.is_some() && code == 0 {
            1
        } else {
            code
        }
    };

    match result {
        // A long call (a copy, a streaming read) was cut by the deadline
        // and the script went on to its end: the run ended by its timeout.
        Ok(_) if budget.timed_out() => Finished {
            exit_code: 1,
            stop: Some(Stop::Timeout),
        },
        Ok(done) => Finished {
            exit_code: failed(done.exit_code),
            stop: None,
        },
        // Stopped after a long call saw the deadline pass (it raised the
        // stop flag, which the interpreter reports as a cancellation).
        Err(_) if budget.timed_out() && !job.gate.cap_reached() => Finished {
            exit_code: 1,
            stop: Some(Stop::Timeout),
        },
        Err(err) => failure(err, &job.gate, &job.script).await,
    }
}

/// bashkit's commands as the runtime offers them: without the ones it
/// leaves to the container runtime ([`configure`]), with the runtime's own
/// commands, `curl` and `wget` over `network`, and `python3` when the
/// crate is built with a Python feature.
pub(crate) fn commands(
    engine: &EngineFs,
    budget: &ExecBudget,
    network: builtins::http::Network,
    limits: &ShellLimits,
    timeout: Duration,
    output_cap: u64,
) -> bashkit::BashBuilder {
    // bashkit's own commands run by the runtime's (`tar`'s other forms)
    // stop with the exec.
    let cancel = Arc::new(AtomicBool::new(false));
    budget.stop.link(Arc::clone(&cancel));
    let fallback = whole_input::Shared {
        budget: budget.clone(),
        limits: limits.execution(timeout, output_cap),
        memory: limits.memory(),
        cancel,
    };
    let builder = builtins::install(
        configure(Bash::builder()),
        engine,
        budget,
        &home(),
        limits.scratch_bytes,
        fallback,
        &network,
    );
    let builder = builtins::http::install(builder, network);
    crate::python::install(builder, limits, timeout, output_cap)
}

/// bashkit's commands the shell runtime does not offer: `make` runs the
/// recipes of a Makefile, whose commands (compilers, interpreters) no
/// reading of the script can see, so it runs where they exist, in the
/// container runtime.
pub(crate) const LEFT_TO_THE_CONTAINER: &[&str] = &["make"];

/// The part of the interpreter's configuration that decides which command
/// names exist: bashkit's own commands less [`LEFT_TO_THE_CONTAINER`], and
/// one answer for every other name (see the `not_found` module).
pub(crate) fn configure(builder: bashkit::BashBuilder) -> bashkit::BashBuilder {
    builder
        .builtin_filter(|name| !LEFT_TO_THE_CONTAINER.contains(&name))
        .command_resolver(Arc::new(crate::not_found::NotFound))
}

/// `Ok` when `cwd` is a directory; else the strerror text.
async fn check_cwd(bash: &Bash, cwd: &str) -> Result<(), &'static str> {
    match bash.fs().stat(Path::new(cwd)).await {
        Ok(meta) if meta.file_type.is_dir() => Ok(()),
        Ok(_) => Err("Not a directory"),
        Err(_) => Err("No such file or directory"),
    }
}

fn refusal_error(refusal: Refusal) -> bashkit::Error {
    match refusal {
        Refusal::CapReached => bashkit::Error::Execution("output limit reached".into()),
        Refusal::Closed => bashkit::Error::Cancelled,
    }
}

/// Maps an interpreter error to how the run ended. Script faults (syntax
/// errors, internal failures) get bash's exit status and a diagnostic on
/// stderr; runtime stops are reported by the caller.
async fn failure(err: bashkit::Error, gate: &OutputGate, script: &str) -> Finished {
    let stop = |s| Finished {
        exit_code: 1,
        stop: Some(s),
    };
    if gate.cap_reached() {
        return stop(Stop::OutputCap);
    }
    match err {
        bashkit::Error::Cancelled => stop(Stop::Cancelled),
        bashkit::Error::ResourceLimit(LimitExceeded::Timeout(_)) => stop(Stop::Timeout),
        bashkit::Error::ResourceLimit(LimitExceeded::ExecutionBudget(e)) => match e {
            bashkit::ExecutionBudgetExceeded::Deadline { .. } => stop(Stop::Timeout),
            bashkit::ExecutionBudgetExceeded::Cancelled
            | bashkit::ExecutionBudgetExceeded::RequestClosed => stop(Stop::Cancelled),
            other => stop(Stop::Limit(other.to_string())),
        },
        bashkit::Error::ResourceLimit(limit) => stop(Stop::Limit(limit.to_string())),
        err @ bashkit::Error::Parse { .. } => {
            let report = err
                .syntax_report(SHELL_NAME, script)
                .unwrap_or_else(|| format!("{SHELL_NAME}: {err}\n"));
            let _ = gate.deliver(true, report.into_bytes()).await;
            Finished {
                exit_code: 2,
                stop: None,
            }
        }
        // bashkit reports some budgets (substitution depth) as plain
        // execution errors; their text says "exceeded".
        bashkit::Error::Execution(what) if what.contains("exceeded") => stop(Stop::Limit(what)),
        other => {
            let text = match other {
                bashkit::Error::Execution(what) => what,
                other => other.to_string(),
            };
            let _ = gate
                .deliver(true, format!("{SHELL_NAME}: {text}\n").into_bytes())
                .await;
            Finished {
                exit_code: 1,
                stop: None,
            }
        }
    }
}
