//! CPU fairness between the execs of one node agent.
//!
//! The shell and JavaScript runtimes run every exec on an OS thread of its
//! own inside the agent. Linux's fair scheduler (EEVDF since 6.6) gives
//! every runnable thread of equal weight the same share and no wake-up
//! bonus, so with 200 spinning exec threads a short exec waits for a large
//! part of 200 time slices at each thread hand-over on its way (gRPC worker,
//! blocking pool, exec thread): seconds (docs/benchmarks.md).
//!
//! The fix is to tell the kernel which threads are the hogs. An exec thread
//! registers itself with [`exec_thread`] for the time of one exec; a
//! governor thread samples the CPU clock of every registered thread
//! (`pthread_getcpuclockid(3)`, `clock_gettime(2)`) and, once a thread has
//! used more than its slice of CPU in this exec, moves it to `SCHED_IDLE`
//! (`sched(7)`): it then runs only on CPU time no normal thread wants, and
//! a normal thread waking up preempts it at once. Short execs, the agent's
//! own serving threads and FUSE keep their normal priority. When the exec
//! ends the thread asks to be normal again; without `CAP_SYS_NICE` or a
//! large enough `RLIMIT_NICE` (setrlimit(2)) the kernel refuses, and such a
//! thread must not run another exec: [`Pool`] retires it.
//!
//! Demotion alone leaves a gap: every new exec runs at normal priority
//! until it has used its slice, so 200 execs starting together are 200
//! normal threads for a while (seconds on two cores). So at most
//! [`CpuFairness::foreground`] execs are in their normal-priority slice at
//! once; the others wait, blocked, in a first-come-first-served line, and a
//! place frees at the latest every slice of CPU per CPU.
//!
//! Demoted threads share what CPU is left per computer, not per thread:
//! at most [`CpuFairness::background`] of them run at once, each for a
//! turn of a few slices, the turns going round the computers (the
//! [`join_group`] of each exec) and, within one computer, round its
//! threads. The others wait, blocked, at their next [`checkpoint`]: the
//! runtimes call it between shell commands and in QuickJS's interrupt
//! handler. So a computer with 200 busy execs gets no more of the idle CPU
//! than a computer with one, and the kernel sees a handful of runnable
//! demoted threads instead of hundreds, which keeps a lock one of them
//! holds from waiting behind all the others.
//!
//! If `SCHED_IDLE` is refused (a seccomp profile), the governor falls back
//! to nice 19 (`setpriority(2)` on the thread id), which is weaker (weight
//! 15 against 1024 instead of 3) but still keeps short execs fast.

mod governor;
mod pool;

use std::time::Duration;

pub use governor::{ExecThread, checkpoint, exec_thread, join_group, thread_is_clean};
pub use pool::Pool;

/// CPU time an exec may use before its thread is demoted, by default.
/// `echo ok` takes well under 1 ms of CPU in a release build, 2–3 ms in a debug
/// build; a script parsing megabytes of JSON
/// takes hundreds.
pub const DEFAULT_SLICE: Duration = Duration::from_millis(5);

/// Execs in their normal-priority slice at once, per CPU, by default.
pub const FOREGROUND_PER_CPU: usize = 2;

/// Demoted exec threads that run at once, per CPU, by default.
pub const BACKGROUND_PER_CPU: usize = 1;

/// How exec threads share the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFairness {
    /// Whether threads past their slice are demoted; when off, every exec
    /// thread keeps normal priority (the kernel's plain per-thread share).
    pub enabled: bool,
    /// CPU time (user plus system) an exec may use at normal priority.
    pub slice: Duration,
    /// Execs that may be in their normal-priority slice at once; a new
    /// exec waits (first come, first served) until one of them ends, is
    /// demoted, or has been in the foreground for [`FOREGROUND_WALL`]
    /// slices of wall time (it sleeps or waits on I/O: it keeps normal
    /// priority until it has used its slice, but stops holding a place).
    pub foreground: usize,
    /// Demoted threads that may run at once (background turns handed
    /// round the computers); the others wait at their next
    /// [`checkpoint`]. 0 lets every demoted thread run (the kernel's
    /// per-thread share of idle time).
    pub background: usize,
}

/// Slices of wall time after which an exec gives up its foreground place
/// even though it has not used its slice of CPU.
pub const FOREGROUND_WALL: u32 = 5;

impl Default for CpuFairness {
    /// On, [`DEFAULT_SLICE`], [`FOREGROUND_PER_CPU`] and
    /// [`BACKGROUND_PER_CPU`] × the CPUs this process may run on.
    fn default() -> CpuFairness {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuFairness {
            enabled: true,
            slice: DEFAULT_SLICE,
            foreground: FOREGROUND_PER_CPU * cpus,
            background: BACKGROUND_PER_CPU * cpus,
        }
    }
}

/// Sets how exec threads registered from now on share the CPU. Call once
/// at start; the default is [`CpuFairness::default`].
pub fn configure(fairness: CpuFairness) {
    governor::configure(fairness);
}

/// Exec threads demoted since start, and threads retired by pools because
/// they could not return to normal priority.
pub fn stats() -> (u64, u64) {
    governor::stats()
}
