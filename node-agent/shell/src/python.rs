//! `python3` and `python` in the shell runtime, when the crate is built with
//! one of its Python features (both off by default):
//!
//! - `cpython`: bashkit's CPython 3.14 compiled to WebAssembly and run by
//!   wasmtime's Pulley interpreter (`bashkit::BashBuilder::cpython_with_limits`).
//! - `python`: bashkit's embedded interpreter of a Python subset, monty
//!   (`bashkit::BashBuilder::python_with_limits`).
//!
//! With both, CPython is the one registered. Either reads and writes files
//! through bashkit's outermost filesystem, which is this crate's
//! [`crate::SandboxFs`]: `/workspace` is the engine, `/tmp` the exec's
//! scratch tree. Each call gets the exec's memory budget and its remaining
//! time (bashkit's deadline); CPython also gets the exec's output cap. The measurements that
//! decide whether one of them ships are in `docs/shell-runtime.md`
//! (section "python3") and `bench/python-eval`.

use crate::limits::ShellLimits;
use bashkit::BashBuilder;
use std::time::Duration;

/// Registers `python3` and `python` on `builder` for one exec of at most
/// `timeout`, whose stdout and stderr together may carry `output_cap`
/// bytes. Without a Python feature this returns `builder` unchanged, and
/// both names stay `command not found` (exit 127).
#[allow(unused_variables, unused_mut)]
pub(crate) fn install(
    mut builder: BashBuilder,
    limits: &ShellLimits,
    timeout: Duration,
    output_cap: u64,
) -> BashBuilder {
    let memory = usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX);
    #[cfg(all(feature = "python", not(feature = "cpython")))]
    {
        let python = bashkit::PythonLimits::default()
            .max_duration(timeout)
            .max_memory(memory);
        // monty runs in-process without a sandbox boundary of its own;
        // bashkit asks embedders to opt in at build time.
        builder = builder
            .env("BASHKIT_ALLOW_INPROCESS_PYTHON", "1")
            .python_with_limits(python);
    }
    #[cfg(feature = "cpython")]
    {
        let output = usize::try_from(output_cap).unwrap_or(usize::MAX);
        let cpython = bashkit::CPythonLimits::default()
            .max_duration(timeout)
            .max_memory(memory)
            .max_output(output);
        builder = builder.cpython_with_limits(cpython);
    }
    builder
}
