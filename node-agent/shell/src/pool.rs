//! Threads that run scripts.
//!
//! A script runs on a blocking thread with a single-threaded runtime of its
//! own: bashkit's interpreter does not yield inside CPU-bound loops and the
//! engine's calls are synchronous SQLite transactions, so neither may run on
//! the caller's async workers. Spawning a fresh OS thread per exec costs
//! ~100 µs on a busy two-core node; reusing threads from tokio's blocking
//! pool costs ~10 µs. The pool belongs to a runtime private to this crate,
//! so its threads get the stack size bashkit wants whatever runtime the
//! caller built, and a runaway script never holds up the caller's shutdown.

use std::sync::OnceLock;
use std::time::Duration;
use tokio::runtime::{Builder, Runtime};

/// Native stack of an exec thread. bashkit's evaluator recurses on the
/// stack; 8 MiB is Linux's main-thread default and is only reserved, not
/// committed, until used.
const EXEC_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Scripts running at once; more wait for a thread (their timeout runs).
const MAX_EXEC_THREADS: usize = 512;

/// How long an idle exec thread is kept for the next script.
const IDLE_KEEP: Duration = Duration::from_secs(30);

fn pool() -> Option<&'static Runtime> {
    static POOL: OnceLock<Option<Runtime>> = OnceLock::new();
    POOL.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("shell-exec")
            .thread_stack_size(EXEC_STACK_BYTES)
            .max_blocking_threads(MAX_EXEC_THREADS)
            .thread_keep_alive(IDLE_KEEP)
            .build()
            .map_err(
                |e| tracing::warn!(error = %e, "shell exec pool unavailable; using plain threads"),
            )
            .ok()
    })
    .as_ref()
}

/// Runs `job` on an exec thread. Fails only when no thread can be started.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    match pool() {
        Some(rt) => {
            // The handle is not awaited: the caller hears back through the
            // job's own channel, also when it abandons the job.
            drop(rt.spawn_blocking(job));
            Ok(())
        }
        None => std::thread::Builder::new()
            .name("shell-exec".into())
            .stack_size(EXEC_STACK_BYTES)
            .spawn(job)
            .map(drop),
    }
}
