//! Threads that run scripts.
//!
//! A script runs on an exec thread with a single-threaded runtime of its
//! own: bashkit's interpreter does not yield inside CPU-bound loops and the
//! engine's calls are synchronous SQLite transactions, so neither may run on
//! the caller's async workers. Spawning a fresh OS thread per exec costs
//! ~100 µs on a busy two-core node; reusing a pooled thread costs ~10 µs.
//! The pool is `agentcomputer_sched::Pool`: its threads get the stack size
//! bashkit wants whatever runtime the caller built, a runaway script never
//! holds up the caller's shutdown, each script's thread is demoted to
//! `SCHED_IDLE` once it has used its CPU slice (so other execs stay fast),
//! and a thread that cannot return to normal priority is not reused.

use std::sync::OnceLock;
use std::time::Duration;

use agentcomputer_sched::Pool;

/// Native stack of an exec thread. bashkit's evaluator recurses on the
/// stack; 8 MiB is Linux's main-thread default and is only reserved, not
/// committed, until used.
const EXEC_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Scripts running at once; more wait for a thread (their timeout runs).
const MAX_EXEC_THREADS: usize = 512;

/// How long an idle exec thread is kept for the next script.
const IDLE_KEEP: Duration = Duration::from_secs(30);

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::new("shell-exec", EXEC_STACK_BYTES, MAX_EXEC_THREADS, IDLE_KEEP))
}

/// Runs `job` on an exec thread. Fails only when no thread can be started.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    pool().spawn(job)
}
