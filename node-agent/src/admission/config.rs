//! The admission limits of one agent, derived from its machine or its
//! container's memory limit.

use std::time::Duration;

use agentcomputer_sched::CpuFairness;

use super::*;

/// Execs running at once on the whole agent, per CPU.
pub const EXECS_PER_CPU: usize = 128;
/// Execs running at once on one computer, per CPU.
pub const EXECS_PER_COMPUTER_PER_CPU: usize = 4;
/// Share of the memory available to the agent at start that execs may
/// reserve together, as a fraction `NUM / DEN`.
pub const EXEC_MEMORY_SHARE: (u64, u64) = (1, 2);
/// Default longest wait in the queue.
pub const DEFAULT_QUEUE_WAIT: Duration = Duration::from_secs(2);
/// Default floor of an exec's memory budget: what is held back for each
/// free exec slot, and the least an exec asking for the default budget is
/// given on a busy agent. A shell `echo` or a small JavaScript function
/// needs well under it (the shell's variables and scratch, QuickJS's heap).
pub const DEFAULT_MIN_EXEC_MEMORY: u64 = 32 << 20;
/// Default largest budget one exec may be given (the API's default and
/// maximum exec budget, 256 MiB): the agent keeps enough slots' reserve
/// away from the pool that one exec of this size fits on an idle agent.
pub const DEFAULT_LARGEST_EXEC_MEMORY: u64 = 256 << 20;
/// Default of [`AdmissionConfig::quiet_reserve_bytes`]: an exec's default
/// budget (256 MiB).
pub const DEFAULT_QUIET_RESERVE: u64 = 256 << 20;

/// The memory budget an exec asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryAsk {
    /// The client named this budget: it is reserved whole or the exec
    /// waits (and is refused after the queue wait).
    Exactly(u64),
    /// The client asked for no budget: the computer's default of this many
    /// bytes, lowered on a busy agent to what the reserve and the
    /// computer's fair share allow, never below the floor
    /// ([`AdmissionConfig::min_exec_memory_bytes`], or the default itself
    /// when that is smaller).
    AtMost(u64),
}

impl MemoryAsk {
    /// The most this ask reserves.
    pub fn most(self) -> u64 {
        match self {
            MemoryAsk::Exactly(n) | MemoryAsk::AtMost(n) => n,
        }
    }

    /// The least this ask accepts, given the floor.
    pub(super) fn least(self, floor: u64) -> u64 {
        match self {
            MemoryAsk::Exactly(n) => n,
            MemoryAsk::AtMost(n) => n.min(floor),
        }
    }
}

/// The limits of admission. [`AdmissionConfig::for_node`] derives defaults
/// from the machine; local mode sets them from its flags and cluster mode
/// from its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Execs running at once on the agent (flag `--max-execs`).
    pub max_execs: usize,
    /// Execs running at once on one computer (`--max-execs-per-computer`).
    pub max_execs_per_computer: usize,
    /// Bytes the memory budgets of all running execs may add up to
    /// (`--exec-memory`).
    pub exec_memory_bytes: u64,
    /// Floor of an exec's budget and what is held back for each free slot
    /// (`--min-exec-memory`, [`DEFAULT_MIN_EXEC_MEMORY`]). The agent runs at
    /// most `(exec_memory_bytes - largest_exec_memory_bytes) /
    /// min_exec_memory_bytes + 1` execs at once even when `max_execs` is
    /// higher, so that every slot has its floor.
    pub min_exec_memory_bytes: u64,
    /// The largest budget one exec is expected to ask for
    /// ([`DEFAULT_LARGEST_EXEC_MEMORY`]); it fits on an idle agent.
    pub largest_exec_memory_bytes: u64,
    /// Memory and one slot held back from computers that run execs, for a
    /// computer that runs none: its first exec gets its default budget (up
    /// to this much) however much the busy ones ask
    /// ([`DEFAULT_QUIET_RESERVE`]; 0 holds nothing back; at most half of
    /// `exec_memory_bytes`, see [`AdmissionConfig::quiet_reserve`]).
    pub quiet_reserve_bytes: u64,
    /// Execs that may wait for admission at once (`--exec-queue`); 0
    /// refuses at once whatever does not fit.
    pub max_queued: usize,
    /// Longest time an exec waits for admission (`--exec-queue-wait`).
    pub queue_wait: Duration,
    /// How exec threads share the CPU (`--cpu-fairness`, `--cpu-slice`);
    /// process-wide, applied by [`Admission::new`].
    pub cpu: CpuFairness,
}

impl AdmissionConfig {
    /// Defaults that fit this machine: `max_execs` = [`EXECS_PER_CPU`] × CPUs,
    /// `max_execs_per_computer` = [`EXECS_PER_COMPUTER_PER_CPU`] × CPUs,
    /// `exec_memory_bytes` = [`EXEC_MEMORY_SHARE`] of the memory available
    /// ([`available_memory`]), `max_queued` = `max_execs`, `queue_wait` =
    /// [`DEFAULT_QUEUE_WAIT`]. The CPU count is the one the process may run
    /// on (`std::thread::available_parallelism`, which honours affinity and
    /// cgroup CPU quotas).
    pub fn for_node() -> AdmissionConfig {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory = available_memory().unwrap_or(4 << 30);
        AdmissionConfig::derive(cpus, memory)
    }

    /// [`AdmissionConfig::for_node`] for an agent in a cluster, which must
    /// stay under its container's memory limit: every tenant on the node
    /// loses its execs when the kernel kills the agent. Without a limit to
    /// be found (a container without `resources.limits.memory`, or cgroup
    /// files this process cannot read) the execs' memory is
    /// [`CLUSTER_EXEC_MEMORY_WITHOUT_LIMIT`], with a warning.
    pub fn for_cluster() -> AdmissionConfig {
        let mut config = AdmissionConfig::for_node();
        match crate::cgroup_memory::own() {
            Some(cgroup) => tracing::info!(
                exec_memory = %human_bytes(config.exec_memory_bytes),
                limit = %human_bytes(cgroup.limit),
                used = %human_bytes(cgroup.usage),
                cgroup = %cgroup.dir.display(),
                version = cgroup.version,
                "exec memory sized from the agent's memory cgroup"
            ),
            None => {
                config.exec_memory_bytes = config
                    .exec_memory_bytes
                    .min(CLUSTER_EXEC_MEMORY_WITHOUT_LIMIT);
                tracing::warn!(
                    exec_memory = %human_bytes(config.exec_memory_bytes),
                    "no memory limit found for the agent's cgroup (cgroup v1 or v2, \
                     /proc/self/cgroup and /proc/self/mountinfo); execs may reserve only this much \
                     together: give the agent container resources.limits.memory"
                );
            }
        }
        config
    }

    /// The defaults for `cpus` CPUs and `available` bytes of memory.
    pub fn derive(cpus: usize, available: u64) -> AdmissionConfig {
        let cpus = cpus.max(1);
        let max_execs = EXECS_PER_CPU * cpus;
        AdmissionConfig {
            max_execs,
            max_execs_per_computer: EXECS_PER_COMPUTER_PER_CPU * cpus,
            exec_memory_bytes: available / EXEC_MEMORY_SHARE.1 * EXEC_MEMORY_SHARE.0,
            min_exec_memory_bytes: DEFAULT_MIN_EXEC_MEMORY,
            largest_exec_memory_bytes: DEFAULT_LARGEST_EXEC_MEMORY,
            quiet_reserve_bytes: DEFAULT_QUIET_RESERVE,
            max_queued: max_execs,
            queue_wait: DEFAULT_QUEUE_WAIT,
            cpu: CpuFairness::default(),
        }
    }

    /// The quiet reserve in effect: `quiet_reserve_bytes`, at most half of
    /// `exec_memory_bytes`.
    pub fn quiet_reserve(&self) -> u64 {
        self.quiet_reserve_bytes.min(self.exec_memory_bytes / 2)
    }

    /// Execs that may run at once: `max_execs`, lowered so that every slot
    /// keeps its floor of `exec_memory_bytes` beside one exec of
    /// `largest_exec_memory_bytes` and, when there is one, the quiet
    /// reserve's slot with its reserve; at least 1.
    pub fn slots(&self) -> usize {
        let floor = self.min_exec_memory_bytes.max(1);
        let reserve = self.quiet_reserve();
        let beside = self
            .exec_memory_bytes
            .saturating_sub(self.largest_exec_memory_bytes)
            .saturating_sub(reserve)
            / floor;
        let held = 1 + u64::from(reserve > 0);
        let by_memory = usize::try_from(beside.saturating_add(held)).unwrap_or(usize::MAX);
        self.max_execs.min(by_memory).max(1)
    }
}

/// Bytes of memory the agent may still use: `MemAvailable` of
/// `/proc/meminfo` (proc(5)), lowered to the room left under the agent's
/// memory cgroup when it has a limit ([`crate::cgroup_memory`]: v1 or v2,
/// on a host or inside a container). `None` when `/proc/meminfo` cannot be
/// read.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut available = meminfo.lines().find_map(|l| {
        let kib = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok().map(|k| k * 1024)
    })?;
    if let Some(cgroup) = crate::cgroup_memory::own() {
        available = available.min(cgroup.room());
    }
    Some(available)
}

/// The memory all execs of a cluster agent may reserve together when no
/// limit of its container can be found (512 MiB).
pub const CLUSTER_EXEC_MEMORY_WITHOUT_LIMIT: u64 = 512 << 20;
