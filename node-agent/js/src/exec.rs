//! One exec: a dedicated OS thread owning a fresh QuickJS runtime, and the
//! async side that waits for it, forwards cancellation and enforces the
//! deadline even if the thread is stuck in a host call.

use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Function, Module, Object, Promise, Runtime, Value, qjs};
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;

use crate::event_loop::{LoopError, Timers, run_until};
use crate::fsops::FsOps;
use crate::loader::{Graph, ModuleLoader, ModuleResolver};
use crate::output::{OutputSink, Stream};
use crate::state::{ExecState, StateRef};
use crate::stop::{StopReason, Stopper, human_secs};
use crate::vfs::Vfs;
use crate::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MEMORY_LIMIT_BYTES, DEFAULT_STACK_LIMIT_BYTES,
    DEFAULT_TIMEOUT, EXIT_CANCELLED, EXIT_FAILURE, EXIT_OUTPUT_CAP, EXIT_TIMEOUT, JsOutcome,
    JsRequest, MAX_STACK_LIMIT_BYTES, OutputChunk, RunOptions, internal,
};
use agentcomputer_runtime_contract::human_bytes;

/// Native stack beyond the JavaScript limit, for host calls (SQLite, ...)
/// made at the deepest JavaScript frame.
const STACK_MARGIN: usize = 4 * 1024 * 1024;
/// Extra heap granted after a failure, to build the error report.
const REPORT_HEAP: usize = 8 * 1024 * 1024;
/// How long past the deadline the caller waits for a thread stuck in a
/// host call before answering without it (the write fence then keeps that
/// thread from changing the computer; docs/isolation.md).
const STUCK_GRACE: Duration = Duration::from_millis(500);

fn failure(error: String) -> JsOutcome {
    JsOutcome {
        exit_code: EXIT_FAILURE,
        result: None,
        error: Some(error),
    }
}

/// The effective limits of a request (zero means default).
struct Limits {
    timeout: Duration,
    output: u64,
    memory: usize,
    stack: usize,
}

impl Limits {
    fn of(req: &JsRequest) -> Limits {
        let or = |v: usize, d: usize| if v == 0 { d } else { v };
        Limits {
            timeout: if req.timeout.is_zero() {
                DEFAULT_TIMEOUT
            } else {
                req.timeout
            },
            output: if req.max_output_bytes == 0 {
                DEFAULT_MAX_OUTPUT_BYTES
            } else {
                req.max_output_bytes
            },
            memory: or(req.memory_limit_bytes, DEFAULT_MEMORY_LIMIT_BYTES),
            stack: or(req.stack_limit_bytes, DEFAULT_STACK_LIMIT_BYTES).min(MAX_STACK_LIMIT_BYTES),
        }
    }
}

/// Runs `req` on an exec thread of its own. Every change the program
/// makes to `fs` goes through a write fence closed before the outcome is
/// returned: a thread left running past its timeout (stuck in a host call)
/// cannot change the computer after the caller was told the run ended.
pub(crate) async fn spawn(
    fs: agentcomputer_fs::Fs,
    req: JsRequest,
    out: Sender<OutputChunk>,
    cancel: CancellationToken,
    options: RunOptions,
) -> JsOutcome {
    let fence = agentcomputer_fs::Fence::new();
    let outcome = spawn_thread(fs.fenced(Arc::clone(&fence)), req, out, cancel, options).await;
    // Waits for one engine call in flight at most.
    if let Err(e) = tokio::task::spawn_blocking(move || fence.close()).await {
        tracing::error!(error = %e, "closing the exec's write fence failed");
    }
    outcome
}

async fn spawn_thread(
    fs: agentcomputer_fs::Fs,
    req: JsRequest,
    out: Sender<OutputChunk>,
    cancel: CancellationToken,
    options: RunOptions,
) -> JsOutcome {
    let limits = Limits::of(&req);
    let stop = Arc::new(Stopper::new(limits.timeout));
    let handle = tokio::runtime::Handle::current();
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let thread_stop = stop.clone();
    let thread_cancel = cancel.clone();
    let stack = limits.stack + STACK_MARGIN;
    let spawned = std::thread::Builder::new()
        .name("js-exec".into())
        .stack_size(stack)
        .spawn(move || {
            // Demoted to SCHED_IDLE past its CPU slice; the thread ends
            // with the exec, so it is never reused demoted.
            let _exec_thread = agentcomputer_sched::exec_thread();
            let sink = OutputSink::new(
                out,
                handle,
                thread_stop.clone(),
                thread_cancel,
                limits.output,
            );
            let mut answer = Some(tx);
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                exec_blocking(fs, req, options, sink, thread_stop, &limits, &mut answer)
            }))
            .unwrap_or_else(|_| {
                failure("javascript: internal error (the runtime panicked)".into())
            });
            if let Some(tx) = answer {
                let _ = tx.send(outcome);
            }
        });
    let thread = match spawned {
        Ok(h) => h.thread().clone(),
        Err(e) => return failure(format!("javascript: cannot start the exec thread: {e}")),
    };
    let deadline = tokio::time::Instant::from_std(stop.deadline);
    tokio::select! {
        r = &mut rx => return r.unwrap_or_else(|_| failure("javascript: internal error".into())),
        _ = cancel.cancelled() => {
            stop.stop(StopReason::Cancelled);
            thread.unpark();
        }
        _ = tokio::time::sleep_until(deadline) => {
            stop.stop(StopReason::Timeout);
            thread.unpark();
        }
    }
    // The thread sees the stop at its next interrupt check; one stuck in a
    // host call is left to finish on its own.
    match tokio::time::timeout(STUCK_GRACE, rx).await {
        Ok(Ok(outcome)) => outcome,
        _ => {
            let reason = stop.reason().unwrap_or(StopReason::Timeout);
            stopped_outcome(reason, stop_message(&stop, reason))
        }
    }
}

/// The outcome of a run stopped by a limit or by cancellation; exit codes
/// match the shell runtime's.
fn stopped_outcome(reason: StopReason, error: String) -> JsOutcome {
    let exit_code = match reason {
        StopReason::Timeout => EXIT_TIMEOUT,
        StopReason::Cancelled => EXIT_CANCELLED,
        StopReason::OutputCap => EXIT_OUTPUT_CAP,
        StopReason::Exit(code) => code,
    };
    JsOutcome {
        exit_code,
        result: None,
        error: Some(error),
    }
}

fn stop_message(stop: &Stopper, fallback: StopReason) -> String {
    match stop.reason().unwrap_or(fallback) {
        StopReason::Timeout => format!("javascript: timed out after {}", human_secs(stop.timeout)),
        StopReason::Cancelled => "javascript: cancelled".to_string(),
        StopReason::OutputCap => "javascript: output limit exceeded".to_string(),
        StopReason::Exit(code) => format!("process.exit({code})"),
    }
}

fn exec_blocking(
    fs: agentcomputer_fs::Fs,
    mut req: JsRequest,
    options: RunOptions,
    out: OutputSink,
    stop: Arc<Stopper>,
    limits: &Limits,
    answer: &mut Option<tokio::sync::oneshot::Sender<JsOutcome>>,
) -> JsOutcome {
    // Busy execs of one computer share one computer's turns of idle CPU.
    agentcomputer_sched::join_group(fs.db_path());
    let vfs = Vfs::new(fs, options.owner).with_scratch_dir(options.scratch_dir.clone());
    let cwd = if req.cwd.is_empty() {
        "/workspace"
    } else {
        req.cwd.as_str()
    };
    if let Err(e) = vfs.chdir(cwd) {
        let msg = format!(
            "javascript: cannot use '{cwd}' as the working directory: {}",
            crate::errno::SysError::new(e, "chdir", cwd).message()
        );
        out.write_final(Stream::Stderr, format!("{msg}\n").as_bytes());
        return failure(msg);
    }
    let main_name = format!("{}/[eval]", vfs.cwd().trim_end_matches('/'));
    let rt = match Runtime::new_with_alloc(crate::alloc::ExecAllocator::new(stop.clone())) {
        Ok(rt) => rt,
        Err(e) => return failure(format!("javascript: cannot create a runtime: {e}")),
    };
    rt.set_memory_limit(limits.memory);
    rt.set_max_stack_size(limits.stack);
    let s = stop.clone();
    // The interrupt check is also where a demoted exec waits for its
    // computer's turn of idle CPU (agentcomputer_sched::checkpoint).
    rt.set_interrupt_handler(Some(Box::new(move || {
        agentcomputer_sched::checkpoint(|| s.should_stop());
        s.interrupt()
    })));
    let st = Rc::new(ExecState {
        ops: FsOps::new(vfs),
        out,
        stop: stop.clone(),
        timers: std::cell::RefCell::new(Timers::default()),
        env: req.env.clone(),
        argv: req.argv.clone(),
        stdin: std::cell::RefCell::new(std::mem::take(&mut req.stdin)),
        fetcher: options.fetcher.clone(),
        graph: std::cell::RefCell::new(Graph::default()),
        main_name,
        memory_limit: limits.memory,
        stack_limit: limits.stack,
        rejections: Default::default(),
        timer_hook: Default::default(),
        internals: Default::default(),
        loading: Default::default(),
    });
    rt.set_loader(ModuleResolver(st.clone()), ModuleLoader(st.clone()));
    let tracker_st = st.clone();
    rt.set_host_promise_rejection_tracker(Some(Box::new(move |ctx, promise, reason, handled| {
        tracker_st.track_rejection(&ctx, promise, reason, handled)
    })));
    let ctx = match Context::full(&rt) {
        Ok(c) => c,
        Err(e) => return failure(format!("javascript: cannot create a context: {e}")),
    };
    let outcome = ctx.with(|ctx| {
        if ctx.store_userdata(StateRef(st.clone())).is_err() {
            return failure("javascript: internal error (userdata)".into());
        }
        let outcome = run_module(&ctx, &st, &req);
        st.clear_js();
        let _ = ctx.remove_userdata::<StateRef>();
        outcome
    });
    // All output is queued by now; answer before freeing the runtime, which
    // is work the caller need not wait for.
    if let Some(tx) = answer.take() {
        let _ = tx.send(outcome.clone());
    }
    rt.set_host_promise_rejection_tracker(None);
    drop(ctx);
    drop(rt);
    outcome
}

/// What ended the module before it produced a result.
enum Failure<'js> {
    Uncaught(Value<'js>),
    Loop(LoopError<'js>),
    Stalled(&'static str),
    Internal(String),
}

impl<'js> From<LoopError<'js>> for Failure<'js> {
    fn from(e: LoopError<'js>) -> Self {
        Failure::Loop(e)
    }
}

/// The pending exception after a failed call (QuickJS keeps it on `ctx`).
fn caught<'js>(ctx: &Ctx<'js>) -> Failure<'js> {
    Failure::Uncaught(ctx.catch())
}

/// Waits for `promise` and gives its value, or why it failed.
fn settle<'js>(
    ctx: &Ctx<'js>,
    st: &ExecState,
    promise: &Promise<'js>,
    stalled: &'static str,
) -> Result<Value<'js>, Failure<'js>> {
    match run_until(ctx, st, Some(promise)) {
        Ok(PromiseState::Resolved) => promise
            .result::<Value>()
            .unwrap_or_else(|| Ok(Value::new_undefined(ctx.clone())))
            .map_err(|_| caught(ctx)),
        Ok(_) => match promise.result::<Value>() {
            Some(Err(_)) => Err(caught(ctx)),
            _ => Err(Failure::Internal("promise state".into())),
        },
        Err(LoopError::Stalled) => Err(Failure::Stalled(stalled)),
        Err(e) => Err(e.into()),
    }
}

fn run_module(ctx: &Ctx<'_>, st: &ExecState, req: &JsRequest) -> JsOutcome {
    let boot = match bootstrap(ctx, st) {
        Ok(b) => b,
        Err(f) => return report(ctx, st, None, f),
    };
    let format: Option<Function> = boot.get("formatError").ok();
    match evaluate(ctx, st, req) {
        Ok(result) => {
            let code = exit_code_set(ctx, st);
            JsOutcome {
                exit_code: code,
                result: Some(result),
                error: (code != 0).then(|| format!("process.exitCode = {code}")),
            }
        }
        Err(f) => report(ctx, st, format, f),
    }
}

/// `process.exitCode`, if the code loaded `process` and set it.
fn exit_code_set(ctx: &Ctx<'_>, st: &ExecState) -> i32 {
    let ns = st.internals.borrow().get("ac:process").cloned();
    ns.and_then(|ns| ns.restore(ctx).ok())
        .and_then(|ns| ns.get::<_, Object>("process").ok())
        .and_then(|p| p.get::<_, Option<i32>>("exitCode").ok().flatten())
        .unwrap_or(0)
}

/// Installs the globals; returns the bootstrap module's namespace.
fn bootstrap<'js>(ctx: &Ctx<'js>, st: &ExecState) -> Result<Object<'js>, Failure<'js>> {
    let module = internal::load(ctx, "ac:bootstrap").map_err(|_| caught(ctx))?;
    let (module, promise) = module.eval().map_err(|_| caught(ctx))?;
    settle(ctx, st, &promise, "the bootstrap never settled")?;
    module.namespace().map_err(|_| caught(ctx))
}

/// Runs the main module and its default export; gives the JSON result.
fn evaluate<'js>(
    ctx: &Ctx<'js>,
    st: &ExecState,
    req: &JsRequest,
) -> Result<serde_json::Value, Failure<'js>> {
    st.graph.borrow_mut().add_main(&st.main_name);
    let module = Module::declare(ctx.clone(), st.main_name.as_str(), req.source.as_str())
        .map_err(|_| caught(ctx))?;
    let (module, promise) = module.eval().map_err(|_| caught(ctx))?;
    settle(
        ctx,
        st,
        &promise,
        "the module's top-level await never settled",
    )?;
    let ns = module.namespace().map_err(|_| caught(ctx))?;
    let default: Value = ns.get("default").map_err(|_| caught(ctx))?;
    let mut result = Value::new_null(ctx.clone());
    if let Some(f) = default.as_function() {
        let input = ctx
            .json_parse(req.input.to_string())
            .map_err(|_| caught(ctx))?;
        let returned: Value = f.call((input,)).map_err(|_| caught(ctx))?;
        let promise_ctor: Object = ctx.globals().get("Promise").map_err(|_| caught(ctx))?;
        let resolve: Function = promise_ctor.get("resolve").map_err(|_| caught(ctx))?;
        let promise: Promise = resolve
            .call((rquickjs::function::This(promise_ctor), returned))
            .map_err(|_| caught(ctx))?;
        result = settle(
            ctx,
            st,
            &promise,
            "the promise of the default export never settled",
        )?;
    }
    // Like Node, run what is left (timers, pending reactions) before exiting.
    run_until(ctx, st, None)?;
    let json = ctx.json_stringify(result).map_err(|_| caught(ctx))?;
    Ok(match json {
        None => serde_json::Value::Null,
        Some(s) => {
            let s = s.to_string().map_err(|_| caught(ctx))?;
            serde_json::from_str(&s).map_err(|e| Failure::Internal(format!("result JSON: {e}")))?
        }
    })
}

/// Turns a failure into the outcome and the stderr report.
fn report<'js>(
    ctx: &Ctx<'js>,
    st: &ExecState,
    format: Option<Function<'js>>,
    f: Failure<'js>,
) -> JsOutcome {
    // Room to build the report, and no interrupts while doing it.
    st.stop.set_reporting();
    // SAFETY: the runtime is locked by the enclosing `Context::with`.
    unsafe {
        qjs::JS_SetMemoryLimit(
            qjs::JS_GetRuntime(ctx.as_raw().as_ptr()),
            st.memory_limit.saturating_add(REPORT_HEAP) as u64,
        )
    };
    let stopped = match &f {
        Failure::Loop(LoopError::Stopped(r)) => Some(*r),
        _ => st.stop.reason(),
    };
    if let Some(reason) = stopped {
        return match reason {
            StopReason::Exit(code) => JsOutcome {
                exit_code: code,
                result: if code == 0 {
                    Some(serde_json::Value::Null)
                } else {
                    None
                },
                error: (code != 0).then(|| format!("process.exit({code})")),
            },
            StopReason::OutputCap => {
                let msg = format!(
                    "javascript: output limit of {} exceeded",
                    human_bytes(st.out.cap())
                );
                st.out
                    .write_final(Stream::Stderr, format!("\n{msg}\n").as_bytes());
                stopped_outcome(StopReason::OutputCap, msg)
            }
            other => {
                let msg = stop_message(&st.stop, other);
                st.out
                    .write_final(Stream::Stderr, format!("{msg}\n").as_bytes());
                stopped_outcome(other, msg)
            }
        };
    }
    let value = match f {
        Failure::Uncaught(v) | Failure::Loop(LoopError::Uncaught(v)) => v,
        Failure::Loop(LoopError::Stalled) => {
            return stalled(st, "the module never settled");
        }
        Failure::Stalled(what) => return stalled(st, what),
        Failure::Internal(m) => {
            let msg = format!("javascript: internal error: {m}");
            st.out
                .write_final(Stream::Stderr, format!("{msg}\n").as_bytes());
            return failure(msg);
        }
        Failure::Loop(LoopError::Stopped(_)) => unreachable!("handled above"),
    };
    // QuickJS throws `null` when it cannot even allocate the error object
    // of an out-of-memory failure: with the heap at its limit, that is
    // what a `null` means, not a script's own `throw null`.
    if value.is_null() && heap_nearly_full(ctx, st.memory_limit) {
        let msg = format!(
            "javascript: memory limit of {} exceeded",
            human_bytes(st.memory_limit as u64)
        );
        st.out.write_final(
            Stream::Stderr,
            format!("InternalError: out of memory\n{msg}\n").as_bytes(),
        );
        return failure(msg);
    }
    let (name, message) = error_parts(&value);
    let text = format
        .and_then(|f| f.call::<_, String>((value.clone(),)).ok())
        .unwrap_or_else(|| match &message {
            Some(m) => format!("{}: {m}", name.as_deref().unwrap_or("Error")),
            None => "Uncaught exception".to_string(),
        });
    let _ = ctx.catch();
    let summary = match (name.as_deref(), message.as_deref()) {
        (Some("InternalError"), Some("out of memory")) => format!(
            "javascript: memory limit of {} exceeded",
            human_bytes(st.memory_limit as u64)
        ),
        (Some("RangeError"), Some("Maximum call stack size exceeded")) => format!(
            "javascript: stack limit of {} exceeded (RangeError: Maximum call stack size exceeded)",
            human_bytes(st.stack_limit as u64)
        ),
        (Some(n), Some(m)) if !m.is_empty() => format!("{n}: {m}"),
        (Some(n), _) => n.to_string(),
        _ => text
            .lines()
            .next()
            .unwrap_or("Uncaught exception")
            .to_string(),
    };
    let mut err_out = text.clone();
    if !summary.starts_with("javascript:") || summary == text {
        err_out.push('\n');
    } else {
        err_out = format!("{text}\n{summary}\n");
    }
    st.out.write_final(Stream::Stderr, err_out.as_bytes());
    failure(summary)
}

/// Whether the runtime's heap is within 1/64 of `limit` (at least 1 MiB)
/// of it: where an allocation as small as an error object fails.
fn heap_nearly_full(ctx: &Ctx<'_>, limit: usize) -> bool {
    let mut usage = std::mem::MaybeUninit::<qjs::JSMemoryUsage>::zeroed();
    // SAFETY: the runtime is locked by the enclosing `Context::with`, and
    // JS_ComputeMemoryUsage fills the whole struct.
    let usage = unsafe {
        qjs::JS_ComputeMemoryUsage(
            qjs::JS_GetRuntime(ctx.as_raw().as_ptr()),
            usage.as_mut_ptr(),
        );
        usage.assume_init()
    };
    let used = u64::try_from(usage.malloc_size).unwrap_or(0);
    let limit = limit as u64;
    used.saturating_add((limit / 64).max(1 << 20)) >= limit
}

fn stalled(st: &ExecState, what: &str) -> JsOutcome {
    let msg = format!("javascript: {what} (nothing left to wait for)");
    st.out
        .write_final(Stream::Stderr, format!("{msg}\n").as_bytes());
    failure(msg)
}

/// `name` and `message` of an error object.
fn error_parts(v: &Value<'_>) -> (Option<String>, Option<String>) {
    let Some(o) = v.as_object() else {
        return (None, None);
    };
    (
        o.get::<_, String>("name").ok(),
        o.get::<_, String>("message").ok(),
    )
}
