//! The shell runtime of Agent Computer: bash scripts run in-process over a
//! computer's filesystem engine, with no process spawned.
//!
//! The interpreter is the `bashkit` crate (bash syntax, ~150 builtins such
//! as `grep`, `sed`, `awk`, `jq`, `tar`). This crate gives it a filesystem
//! namespace ([`SandboxFs`]): the computer's files at `/workspace`
//! ([`EngineFs`] over the engine's inode API), an in-memory scratch tree
//! for `/tmp` and `$HOME` that lives for one exec, and nothing of the host.
//!
//! [`run`] executes one [`ExecRequest`]: output streams to a channel as it
//! is produced, and the [`ExecOutcome`] carries bash's exit status, or the
//! reason the runtime stopped the script (timeout, cancellation, output
//! cap, a budget of [`ShellLimits`]).
//!
//! Design notes and measurements: `docs/shell-runtime.md`.

pub mod auto;
mod bash_command;
mod budget;
mod builtins;
mod dup_input;
mod engine_fs;
mod errno;
mod gathered;
mod limits;
mod not_found;
mod output;
mod paths;
mod pool;
mod python;
mod refuse;
mod runtime;
mod sandbox_fs;
mod session;
mod stderr;
mod stdin;
mod stdin_free;
mod stop;
mod whole_input;

pub use agentcomputer_egress::{EgressConfig, Policy as EgressPolicy};
pub use engine_fs::{EngineFs, SHELL_OWNER};
pub use limits::{
    DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_TIMEOUT,
    ShellLimits,
};
pub use not_found::{EXIT_NOT_FOUND, not_found_message};
pub use paths::resolve_cwd;
pub use runtime::{
    EXIT_CANCELLED, EXIT_LIMIT, EXIT_OUTPUT_CAP, EXIT_REFUSED, EXIT_TIMEOUT, ExecOutcome,
    ExecRequest, OutputChunk, run, run_with_limits,
};
pub use sandbox_fs::{SandboxFs, WORKSPACE};
pub use stdin::StdinStream;
