//! The JavaScript runtime of a computer: one ES module run in a fresh
//! QuickJS-ng runtime (through `rquickjs`) per exec, in-process, directly on the
//! computer's filesystem engine.
//!
//! * No process and no container: an exec is one OS thread running one
//!   QuickJS runtime; a cold exec of a trivial module takes well under a
//!   millisecond (see `docs/js-runtime.md` for the measured numbers).
//! * Module contract: [`JsRequest::source`] is an ES module. When its default
//!   export is a function it is called with [`JsRequest::input`] and its awaited
//!   return value becomes [`JsOutcome::result`] (through `JSON.stringify`).
//!   Top-level await works.
//! * Path convention: the computer's files are at `/workspace`, code starts in
//!   `/workspace` (or [`JsRequest::cwd`]), `/tmp` is per-exec scratch space that
//!   disappears with the exec, and nothing of the host is visible.
//! * APIs: `node:fs` / `node:fs/promises` over the engine, `node:path`,
//!   `Buffer`, `TextEncoder`/`TextDecoder`, `URL`, timers, `crypto`,
//!   `process`, `structuredClone` and `fetch` through a [`Fetcher`] hook that
//!   denies all egress by default.
//! * Limits: wall-clock timeout, memory limit, stack limit, output cap and
//!   cancellation each end only their own exec with a clear error.

mod alloc;
mod errno;
mod event_loop;
mod exec;
mod fetch;
mod fsops;
mod internal;
mod loader;
mod natives;
mod output;
mod state;
mod stop;
mod vfs;

use std::sync::Arc;
use std::time::Duration;

pub use agentcomputer_fs::Owner;
pub use fetch::{DenyAllEgress, EGRESS_DENIED, FetchError, FetchRequest, FetchResponse, Fetcher};
pub use loader::{MAX_MODULE_BYTES, MAX_MODULE_DEPTH, MAX_MODULES};

/// Timeout used when [`JsRequest::timeout`] is zero.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Output cap (stdout and stderr together, bytes) used when
/// [`JsRequest::max_output_bytes`] is zero.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;
/// Heap limit of one runtime (bytes) used when
/// [`JsRequest::memory_limit_bytes`] is zero.
pub const DEFAULT_MEMORY_LIMIT_BYTES: usize = 256 * 1024 * 1024;
/// JavaScript stack limit (bytes) used when [`JsRequest::stack_limit_bytes`]
/// is zero; QuickJS's own default is 1 MiB.
pub const DEFAULT_STACK_LIMIT_BYTES: usize = 1024 * 1024;
/// Largest stack limit accepted (bytes); larger requests are clamped.
pub const MAX_STACK_LIMIT_BYTES: usize = 64 * 1024 * 1024;
/// Byte quota of the per-exec `/tmp` scratch filesystem.
pub const SCRATCH_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Exit code of an exec that ended with an uncaught error, or at the memory
/// or stack limit.
pub const EXIT_FAILURE: i32 = 1;
/// Exit codes of a run the runtime stopped, and the output chunks it
/// sends: those of every runtime.
pub use agentcomputer_runtime_contract::{
    EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_TIMEOUT, OutputChunk,
};

/// One JavaScript exec.
///
/// Zero in any of the limit fields means "use the default" (the `DEFAULT_*`
/// constants), matching how unset proto3 fields arrive.
#[derive(Debug, Clone)]
pub struct JsRequest {
    /// The ES module to run (UTF-8 source text).
    pub source: String,
    /// The argument of the default-exported function; it reaches JS as the
    /// value `JSON.parse` would make of it.
    pub input: serde_json::Value,
    /// Working directory: absolute (`/workspace/src`, `/tmp`) or relative to
    /// `/workspace`; empty means `/workspace`. It must name a directory.
    pub cwd: String,
    /// The whole of `process.env`; nothing of the host's environment leaks in.
    pub env: Vec<(String, String)>,
    /// Arguments: `process.argv` is `["node", "<main module>", ...argv]`, as in
    /// Node, so `process.argv.slice(2)` gives these.
    pub argv: Vec<String>,
    /// Bytes readable from `process.stdin` and `fs.readFileSync(0)`, once:
    /// the first read takes them all, as from a pipe, and a later read
    /// gets what is left (nothing).
    pub stdin: Vec<u8>,
    /// Wall-clock budget of the whole exec.
    pub timeout: Duration,
    /// Cap on stdout plus stderr, in bytes; output past it ends the exec.
    pub max_output_bytes: u64,
    /// Heap limit of the QuickJS runtime, in bytes.
    pub memory_limit_bytes: usize,
    /// Limit of the JavaScript call stack, in bytes.
    pub stack_limit_bytes: usize,
}

impl Default for JsRequest {
    fn default() -> Self {
        JsRequest {
            source: String::new(),
            input: serde_json::Value::Null,
            cwd: String::new(),
            env: Vec::new(),
            argv: Vec::new(),
            stdin: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            stack_limit_bytes: DEFAULT_STACK_LIMIT_BYTES,
        }
    }
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq)]
pub struct JsOutcome {
    /// 0 on success, [`EXIT_FAILURE`] on an uncaught error or the memory/stack
    /// limits, [`EXIT_TIMEOUT`], [`EXIT_CANCELLED`] or [`EXIT_OUTPUT_CAP`] when
    /// the run was stopped, or the
    /// code given to `process.exit`.
    pub exit_code: i32,
    /// The JSON result of the default export; `None` when the exec failed,
    /// `Some(Null)` when there was no default-exported function.
    pub result: Option<serde_json::Value>,
    /// One line saying why the exec failed (for example
    /// `"Error: boom"` or `"javascript: timed out after 2s"`).
    pub error: Option<String>,
}

/// Host-side settings of an exec that do not come from the caller's request.
#[derive(Clone)]
pub struct RunOptions {
    /// Performs `fetch` after the egress policy; [`DenyAllEgress`] by default.
    pub fetcher: Arc<dyn Fetcher>,
    /// Owner of the files and directories the code creates.
    pub owner: Owner,
    /// Directory under which the exec's `/tmp` database is made (in a
    /// fresh subdirectory of mode 0700, its files 0600, removed when the
    /// exec ends). The node agent passes a directory of its own data
    /// directory, which it empties at start (leftovers of a crash). `None`:
    /// the system's temporary directory.
    pub scratch_dir: Option<std::path::PathBuf>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            fetcher: Arc::new(DenyAllEgress),
            owner: Owner::ROOT,
            scratch_dir: None,
        }
    }
}

/// Runs one exec with the default [`RunOptions`] (all egress denied).
///
/// Output is streamed on `out` as it is produced; when `out`'s receiver is
/// dropped or `cancel` fires, the exec stops with exit code 1 and the error
/// `"javascript: cancelled"`. The JavaScript runs on its own OS thread, so a
/// tight loop never stalls the async runtime. Must be called inside a Tokio
/// runtime.
pub async fn run(
    fs: agentcomputer_fs::Fs,
    req: JsRequest,
    out: tokio::sync::mpsc::Sender<OutputChunk>,
    cancel: tokio_util::sync::CancellationToken,
) -> JsOutcome {
    run_with(fs, req, out, cancel, RunOptions::default()).await
}

/// Runs one exec like [`run`] with host-side options (egress hook, owner).
pub async fn run_with(
    fs: agentcomputer_fs::Fs,
    req: JsRequest,
    out: tokio::sync::mpsc::Sender<OutputChunk>,
    cancel: tokio_util::sync::CancellationToken,
    options: RunOptions,
) -> JsOutcome {
    exec::spawn(fs, req, out, cancel, options).await
}

/// Compiles the built-in modules once for the whole process, so the first
/// exec does not pay for it (a few milliseconds). Calling it is optional.
pub fn warm_up() {
    internal::bytecode();
}
