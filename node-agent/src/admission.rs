//! Admission control of execs: how many run at once on one computer and on
//! the whole agent, and how much memory they reserve together.
//!
//! Every exec asks for a [`Permit`] before it starts, reserving its memory
//! budget (the most its runtime lets it allocate). The reservation is sized
//! so that a computer with no exec running is never shut out by the others:
//! while an exec slot is free, at least [`AdmissionConfig::min_exec_memory_bytes`]
//! of the pool is held back for each free slot, and an exec that asked for
//! no particular budget ([`MemoryAsk::AtMost`]) is given the default budget
//! only as far as that reserve and its computer's fair share of the pool
//! (pool / computers running execs) allow, never less than the floor.
//! An exec that does not fit waits in a bounded queue for at most
//! [`AdmissionConfig::queue_wait`]; when a permit is released the waiting
//! execs of the computers running the fewest execs go first (round-robin
//! among equals, first come, first served within one computer). An exec
//! still waiting at the end of the wait, or finding the queue full, is
//! refused with RESOURCE_EXHAUSTED and a message naming the limit and its
//! value. The model is written in docs/isolation.md.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentcomputer_sched::CpuFairness;
use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts};
use tokio::sync::oneshot;
use tonic::Status;

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
    fn least(self, floor: u64) -> u64 {
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
                exec_memory = %bytes(config.exec_memory_bytes),
                limit = %bytes(cgroup.limit),
                used = %bytes(cgroup.usage),
                cgroup = %cgroup.dir.display(),
                version = cgroup.version,
                "exec memory sized from the agent's memory cgroup"
            ),
            None => {
                config.exec_memory_bytes = config
                    .exec_memory_bytes
                    .min(CLUSTER_EXEC_MEMORY_WITHOUT_LIMIT);
                tracing::warn!(
                    exec_memory = %bytes(config.exec_memory_bytes),
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

/// The limit that kept an exec out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `max_execs` execs were running on the agent.
    Execs,
    /// `max_execs_per_computer` execs were running on the computer.
    ExecsPerComputer,
    /// The running execs' budgets left too little of `exec_memory_bytes`.
    Memory,
    /// `max_queued` execs were already waiting.
    Queue,
}

impl Limit {
    /// The label of the limit in metrics, and its flag without dashes.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Execs => "max_execs",
            Limit::ExecsPerComputer => "max_execs_per_computer",
            Limit::Memory => "exec_memory",
            Limit::Queue => "exec_queue",
        }
    }

    const ALL: [Limit; 4] = [
        Limit::Execs,
        Limit::ExecsPerComputer,
        Limit::Memory,
        Limit::Queue,
    ];
}

/// Why an exec was refused; its `Display` is the message the client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The limit that kept it out.
    pub limit: Limit,
    message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

impl From<Refusal> for Status {
    /// RESOURCE_EXHAUSTED with the refusal's message.
    fn from(r: Refusal) -> Status {
        Status::resource_exhausted(r.message)
    }
}

/// Shows a byte count in binary units (`256 MiB`, `11.2 GiB`).
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Gauges and counters of admission, registered with
/// [`Admission::register_metrics`].
struct Metrics {
    running: IntGauge,
    queued: IntGauge,
    reserved: IntGauge,
    refused: IntCounterVec,
    limits: IntGaugeVec,
}

impl Metrics {
    fn new(config: &AdmissionConfig) -> Metrics {
        let m = Metrics {
            running: IntGauge::new(
                "agentcomputer_execs_running",
                "Execs admitted and not yet ended",
            )
            .expect("valid metric"),
            queued: IntGauge::new("agentcomputer_execs_queued", "Execs waiting for admission")
                .expect("valid metric"),
            reserved: IntGauge::new(
                "agentcomputer_exec_memory_reserved_bytes",
                "Memory budgets of the running execs, added up",
            )
            .expect("valid metric"),
            refused: IntCounterVec::new(
                Opts::new(
                    "agentcomputer_execs_refused_total",
                    "Execs refused with RESOURCE_EXHAUSTED, by the limit that kept them out",
                ),
                &["limit"],
            )
            .expect("valid metric"),
            limits: IntGaugeVec::new(
                Opts::new("agentcomputer_exec_limit", "Configured admission limits"),
                &["limit"],
            )
            .expect("valid metric"),
        };
        for limit in Limit::ALL {
            // Present from the start, so rates work before the first refusal.
            m.refused.with_label_values(&[limit.name()]);
            let value = match limit {
                Limit::Execs => config.slots() as i64,
                Limit::ExecsPerComputer => config.max_execs_per_computer as i64,
                Limit::Memory => i64::try_from(config.exec_memory_bytes).unwrap_or(i64::MAX),
                Limit::Queue => config.max_queued as i64,
            };
            m.limits.with_label_values(&[limit.name()]).set(value);
        }
        m
    }
}

/// One waiting exec.
struct Waiter {
    id: u64,
    ask: MemoryAsk,
    grant: oneshot::Sender<Permit>,
}

/// A computer's running count and its waiting execs.
#[derive(Default)]
struct PerComputer {
    running: usize,
    /// Memory reserved by its running execs.
    reserved: u64,
    waiting: VecDeque<Waiter>,
}

#[derive(Default)]
struct State {
    running: usize,
    reserved: u64,
    queued: usize,
    next_id: u64,
    computers: HashMap<String, PerComputer>,
    /// Computers with waiting execs, in the order they are served.
    turns: VecDeque<String>,
}

struct Inner {
    config: AdmissionConfig,
    /// [`AdmissionConfig::slots`].
    slots: usize,
    state: Mutex<State>,
    metrics: Metrics,
}

/// The admission controller of one agent. Cheap to clone; clones share
/// their state.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// A running exec's hold on its share of the limits; released on drop.
pub struct Permit {
    inner: Arc<Inner>,
    computer: String,
    memory: u64,
    armed: bool,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("computer", &self.computer)
            .field("memory", &self.memory)
            .finish()
    }
}

impl Permit {
    /// The memory budget reserved for the exec, bytes: what its runtime
    /// must be limited to.
    pub fn memory(&self) -> u64 {
        self.memory
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.inner.lock();
        self.inner.release(&mut state, &self.computer, self.memory);
        self.inner.dispatch(&mut state);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The budget an exec of `computer` asking `ask` is given if it starts
    /// now, or the limit it would exceed.
    ///
    /// With `n` execs running, `slots - n - 1` free slots remain after this
    /// one; their floors are held back, so the budget is at most
    /// `exec_memory - reserved - (slots - n - 1) × floor`. That is never
    /// below the floor while a slot is free, so memory never keeps a
    /// default-budget exec out: slots do. An [`MemoryAsk::AtMost`] budget is
    /// further capped by the computer's fair share, `exec_memory / C`
    /// minus what the computer already reserves, `C` counting the
    /// computers with running execs and this one.
    fn grant(&self, state: &State, computer: &str, ask: MemoryAsk) -> Result<u64, Limit> {
        let c = &self.config;
        let floor = c.min_exec_memory_bytes;
        let (running_here, reserved_here) = state
            .computers
            .get(computer)
            .map_or((0, 0), |p| (p.running, p.reserved));
        if running_here >= c.max_execs_per_computer {
            return Err(Limit::ExecsPerComputer);
        }
        if state.running >= self.slots {
            return Err(Limit::Execs);
        }
        let free_after = (self.slots - state.running - 1) as u64;
        let whole = c
            .exec_memory_bytes
            .saturating_sub(state.reserved)
            .saturating_sub(free_after.saturating_mul(floor));
        // Computers that run execs see the agent without the quiet
        // reserve: one slot and `reserve` bytes fewer. A quiet computer
        // sees that, or takes from the reserve up to the reserve.
        let reserve = c.quiet_reserve();
        let busy_view = if reserve == 0 {
            Some(whole)
        } else if free_after >= 1 {
            Some(
                c.exec_memory_bytes
                    .saturating_sub(reserve)
                    .saturating_sub(state.reserved)
                    .saturating_sub((free_after - 1).saturating_mul(floor)),
            )
        } else {
            None
        };
        let headroom = if running_here > 0 {
            busy_view.ok_or(Limit::Execs)?
        } else {
            busy_view.unwrap_or(0).max(whole.min(reserve))
        };
        let least = ask.least(floor);
        if least > headroom {
            return Err(Limit::Memory);
        }
        // While another computer waits, one that runs execs takes no more
        // than its fair share of the whole.
        if running_here > 0 {
            let others_wait = state
                .computers
                .iter()
                .any(|(name, p)| name != computer && !p.waiting.is_empty());
            let active = state
                .computers
                .values()
                .filter(|p| p.running > 0 || !p.waiting.is_empty())
                .count()
                .max(1) as u64;
            if others_wait && reserved_here.saturating_add(least) > c.exec_memory_bytes / active {
                return Err(Limit::Memory);
            }
        }
        let budget = match ask {
            MemoryAsk::Exactly(n) => n,
            MemoryAsk::AtMost(n) => {
                let computers = state.computers.values().filter(|p| p.running > 0).count()
                    + usize::from(running_here == 0);
                let share =
                    (c.exec_memory_bytes / computers.max(1) as u64).saturating_sub(reserved_here);
                n.min(headroom).min(share).max(least)
            }
        };
        Ok(budget)
    }

    /// Counts an exec as running and makes its permit.
    fn take(self: &Arc<Self>, state: &mut State, computer: &str, memory: u64) -> Permit {
        state.running += 1;
        state.reserved += memory;
        let here = state.computers.entry(computer.to_string()).or_default();
        here.running += 1;
        here.reserved += memory;
        self.metrics.running.set(state.running as i64);
        self.metrics.reserved.set(state.reserved as i64);
        Permit {
            inner: self.clone(),
            computer: computer.to_string(),
            memory,
            armed: true,
        }
    }

    fn release(&self, state: &mut State, computer: &str, memory: u64) {
        state.running -= 1;
        state.reserved -= memory;
        if let Some(p) = state.computers.get_mut(computer) {
            p.running -= 1;
            p.reserved -= memory;
            if p.running == 0 && p.waiting.is_empty() {
                state.computers.remove(computer);
            }
        }
        self.metrics.running.set(state.running as i64);
        self.metrics.reserved.set(state.reserved as i64);
    }

    /// Admits waiting execs while they fit. Each grant goes to the head
    /// of the computer, among those whose head fits, that runs the fewest
    /// execs (the first in turn order among equals); the computer then
    /// goes to the back of the turns.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        loop {
            let mut best: Option<(usize, usize, u64)> = None;
            for (i, computer) in state.turns.iter().enumerate() {
                let p = &state.computers[computer];
                let Some(head) = p.waiting.front() else {
                    continue;
                };
                if best.is_some_and(|(_, running, _)| running <= p.running) {
                    continue;
                }
                if let Ok(memory) = self.grant(state, computer, head.ask) {
                    best = Some((i, p.running, memory));
                }
            }
            let Some((i, _, memory)) = best else {
                break;
            };
            let computer = state.turns.remove(i).expect("index from the loop");
            let waiter = state
                .computers
                .get_mut(&computer)
                .and_then(|p| p.waiting.pop_front())
                .expect("head waiter");
            state.queued -= 1;
            let permit = self.take(state, &computer, memory);
            if let Err(mut unused) = waiter.grant.send(permit) {
                // The waiter gave up just now: undo without re-entering.
                unused.armed = false;
                self.release(state, &computer, memory);
            }
            if state
                .computers
                .get(&computer)
                .is_some_and(|p| !p.waiting.is_empty())
            {
                state.turns.push_back(computer);
            }
        }
        self.metrics.queued.set(state.queued as i64);
    }

    /// Removes waiter `id` of `computer` if it is still waiting; returns
    /// whether it was.
    fn withdraw(&self, state: &mut State, computer: &str, id: u64) -> bool {
        let Some(p) = state.computers.get_mut(computer) else {
            return false;
        };
        let Some(pos) = p.waiting.iter().position(|w| w.id == id) else {
            return false;
        };
        p.waiting.remove(pos);
        if p.waiting.is_empty() {
            state.turns.retain(|c| c != computer);
            if p.running == 0 {
                state.computers.remove(computer);
            }
        }
        state.queued -= 1;
        self.metrics.queued.set(state.queued as i64);
        true
    }

    fn refusal(&self, limit: Limit, memory: u64, waited: bool) -> Refusal {
        let c = &self.config;
        let wait = if waited {
            format!(
                "; waited {} for room",
                humantime::format_duration(c.queue_wait)
            )
        } else {
            String::new()
        };
        let message = match limit {
            Limit::ExecsPerComputer => format!(
                "exec refused: this computer already runs {} execs, its limit (max_execs_per_computer = {}){wait}",
                c.max_execs_per_computer, c.max_execs_per_computer
            ),
            Limit::Execs if self.slots < c.max_execs => format!(
                "exec refused: the node agent already runs {} execs, as many as its exec memory holds at {} each (exec_memory = {}, min_exec_memory = {}, max_execs = {}){wait}",
                self.slots,
                bytes(c.min_exec_memory_bytes),
                bytes(c.exec_memory_bytes),
                bytes(c.min_exec_memory_bytes),
                c.max_execs
            ),
            Limit::Execs => format!(
                "exec refused: the node agent already runs {} execs, its limit (max_execs = {}){wait}",
                c.max_execs, c.max_execs
            ),
            Limit::Memory if memory > c.exec_memory_bytes => format!(
                "exec refused: its memory budget of {} is more than all execs may reserve together (exec_memory = {})",
                bytes(memory),
                bytes(c.exec_memory_bytes)
            ),
            Limit::Memory => format!(
                "exec refused: its memory budget of {} does not fit beside what the running execs reserve and the floor held back for each free exec slot (exec_memory = {}, min_exec_memory = {}); an exec that asks for no budget is given what fits{wait}",
                bytes(memory),
                bytes(c.exec_memory_bytes),
                bytes(c.min_exec_memory_bytes)
            ),
            Limit::Queue => format!(
                "exec refused: {} execs already wait for admission, the queue's limit (exec_queue = {})",
                c.max_queued, c.max_queued
            ),
        };
        self.metrics
            .refused
            .with_label_values(&[limit.name()])
            .inc();
        Refusal { limit, message }
    }
}

/// Removes a waiter that stops waiting (timed out, or its call dropped).
struct Withdraw<'a> {
    inner: &'a Arc<Inner>,
    computer: &'a str,
    id: u64,
    active: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.active {
            let mut state = self.inner.lock();
            self.inner.withdraw(&mut state, self.computer, self.id);
        }
    }
}

impl Admission {
    /// A controller enforcing `config`. Also sets the process-wide CPU
    /// fairness of exec threads to `config.cpu`
    /// ([`agentcomputer_sched::configure`]).
    pub fn new(config: AdmissionConfig) -> Admission {
        agentcomputer_sched::configure(config.cpu);
        let metrics = Metrics::new(&config);
        Admission {
            inner: Arc::new(Inner {
                slots: config.slots(),
                config,
                state: Mutex::new(State::default()),
                metrics,
            }),
        }
    }

    /// The limits enforced.
    pub fn config(&self) -> &AdmissionConfig {
        &self.inner.config
    }

    /// Admits an exec on `computer` asking for `ask`: at once when it fits
    /// and no exec of the same computer waits before it, else after waiting
    /// in the queue. The permit tells the budget given
    /// ([`Permit::memory`]). Errors ([`Refusal`], RESOURCE_EXHAUSTED): the
    /// least budget it accepts exceeds `exec_memory_bytes` alone; the
    /// queue is full; no room within `queue_wait`. Dropping the future
    /// withdraws the exec.
    pub async fn admit(&self, computer: &str, ask: MemoryAsk) -> Result<Permit, Refusal> {
        let inner = &self.inner;
        let least = ask.least(inner.config.min_exec_memory_bytes);
        let (id, rx) = {
            let mut state = inner.lock();
            if least > inner.config.exec_memory_bytes {
                return Err(inner.refusal(Limit::Memory, least, false));
            }
            let queue_ahead = state
                .computers
                .get(computer)
                .is_some_and(|p| !p.waiting.is_empty());
            let now = inner.grant(&state, computer, ask);
            if !queue_ahead && let Ok(memory) = now {
                return Ok(inner.take(&mut state, computer, memory));
            }
            if state.queued >= inner.config.max_queued || inner.config.queue_wait.is_zero() {
                let limit = if state.queued >= inner.config.max_queued {
                    Limit::Queue
                } else {
                    now.err().unwrap_or(Limit::ExecsPerComputer)
                };
                return Err(inner.refusal(limit, least, false));
            }
            let id = state.next_id;
            state.next_id += 1;
            let (tx, rx) = oneshot::channel();
            let p = state.computers.entry(computer.to_string()).or_default();
            p.waiting.push_back(Waiter { id, ask, grant: tx });
            if p.waiting.len() == 1 {
                state.turns.push_back(computer.to_string());
            }
            state.queued += 1;
            inner.metrics.queued.set(state.queued as i64);
            // Room may have freed between the check and now only under
            // this lock, so nothing to dispatch yet.
            (id, rx)
        };
        let mut rx = rx;
        let mut guard = Withdraw {
            inner,
            computer,
            id,
            active: true,
        };
        if let Ok(Ok(permit)) = tokio::time::timeout(inner.config.queue_wait, &mut rx).await {
            guard.active = false;
            return Ok(permit);
        }
        let mut state = inner.lock();
        guard.active = false;
        let limit_now = |state: &State| {
            inner
                .grant(state, computer, ask)
                .err()
                .unwrap_or(Limit::ExecsPerComputer)
        };
        if inner.withdraw(&mut state, computer, id) {
            let limit = limit_now(&state);
            return Err(inner.refusal(limit, least, true));
        }
        // Granted as the wait ended: the permit is in the channel.
        drop(state);
        rx.try_recv().map_err(|_| {
            let state = inner.lock();
            let limit = limit_now(&state);
            inner.refusal(limit, least, true)
        })
    }

    /// Registers the admission metrics with `registry`:
    /// `agentcomputer_execs_running` and `agentcomputer_execs_queued`
    /// (gauges), `agentcomputer_exec_memory_reserved_bytes` (gauge, bytes),
    /// `agentcomputer_execs_refused_total{limit}` (counter; `limit` is one
    /// of `max_execs`, `max_execs_per_computer`, `exec_memory`,
    /// `exec_queue`) and `agentcomputer_exec_limit{limit}` (gauge, the
    /// configured values). Errors: a metric of the same name is registered
    /// already.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        let m = &self.inner.metrics;
        registry.register(Box::new(m.running.clone()))?;
        registry.register(Box::new(m.queued.clone()))?;
        registry.register(Box::new(m.reserved.clone()))?;
        registry.register(Box::new(m.refused.clone()))?;
        registry.register(Box::new(m.limits.clone()))?;
        Ok(())
    }

    /// Execs running and execs waiting, now.
    pub fn load(&self) -> (usize, usize) {
        let state = self.inner.lock();
        (state.running, state.queued)
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryAsk::{AtMost, Exactly};
    use super::*;

    fn config(max_execs: usize, per_computer: usize, memory: u64) -> AdmissionConfig {
        AdmissionConfig {
            max_execs,
            max_execs_per_computer: per_computer,
            exec_memory_bytes: memory,
            // No floor: these tests check the plain limits.
            min_exec_memory_bytes: 0,
            largest_exec_memory_bytes: 0,
            quiet_reserve_bytes: 0,
            max_queued: 16,
            queue_wait: Duration::from_secs(5),
            cpu: CpuFairness::default(),
        }
    }

    #[test]
    fn defaults_follow_the_formula() {
        let c = AdmissionConfig::derive(2, 24 << 30);
        assert_eq!(
            (
                c.max_execs,
                c.max_execs_per_computer,
                c.exec_memory_bytes,
                c.max_queued
            ),
            (256, 8, 12 << 30, 256)
        );
        assert!(available_memory().is_some_and(|m| m > 0));
    }

    #[tokio::test]
    async fn each_limit_refuses_with_its_name_and_value() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(50),
            ..config(2, 1, 300)
        });
        let _p1 = a.admit("a", Exactly(100)).await.unwrap();
        let e = a.admit("a", Exactly(100)).await.unwrap_err();
        assert_eq!(e.limit, Limit::ExecsPerComputer);
        assert!(e.to_string().contains("max_execs_per_computer = 1"), "{e}");
        let _p2 = a.admit("b", Exactly(100)).await.unwrap();
        let e = a.admit("c", Exactly(100)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        assert!(e.to_string().contains("max_execs = 2"), "{e}");
        let e = a.admit("c", Exactly(301)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory);
        assert!(e.to_string().contains("exec_memory = 300 bytes"), "{e}");
        let status = Status::from(e);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(a.load(), (2, 0));
    }

    #[tokio::test]
    async fn memory_reservations_add_up() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(20),
            ..config(10, 10, 1 << 30)
        });
        let p = a.admit("a", Exactly(768 << 20)).await.unwrap();
        let e = a.admit("b", Exactly(512 << 20)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory);
        assert!(e.to_string().contains("budget of 512 MiB"), "{e}");
        assert!(e.to_string().contains("exec_memory = 1 GiB"), "{e}");
        drop(p);
        let _p = a.admit("b", Exactly(512 << 20)).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 1,
            ..config(1, 1, 1 << 30)
        });
        let _p = a.admit("a", Exactly(1)).await.unwrap();
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", Exactly(1)).await.map(drop) })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        let e = a.admit("b", Exactly(1)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Queue);
        assert!(e.to_string().contains("exec_queue = 1"), "{e}");
        waiting.abort();
    }

    #[tokio::test]
    async fn a_queued_exec_starts_when_a_permit_is_released() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", Exactly(1)).await.unwrap();
        let second = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", Exactly(1)).await })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(a.load(), (1, 1));
        drop(first);
        let permit = second.await.unwrap().unwrap();
        assert_eq!(a.load(), (1, 0));
        drop(permit);
        assert_eq!(a.load(), (0, 0));
    }

    #[tokio::test]
    async fn the_queue_serves_computers_in_turn() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 100,
            ..config(1, 1, 1 << 30)
        });
        let running = a.admit("busy", Exactly(1)).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // Five execs of "busy" queue up before one of "quiet".
        for name in ["busy", "busy", "busy", "busy", "busy", "quiet"] {
            let queue = a.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = queue.admit(name, Exactly(1)).await.unwrap();
                tx.send(name).unwrap();
                tokio::task::yield_now().await;
                drop(permit);
            }));
            while a.load().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(running);
        let mut order = Vec::new();
        for _ in 0..6 {
            order.push(rx.recv().await.unwrap());
        }
        // "quiet" is served on its first turn, after one "busy".
        assert_eq!(order[..2], ["busy", "quiet"], "{order:?}");
    }

    const MIB: u64 = 1 << 20;

    /// The defaults' shape on a small pool: 4 GiB, a 32 MiB floor, 256 MiB
    /// budgets, 64 execs, 8 per computer.
    fn pooled(max_execs: usize) -> AdmissionConfig {
        AdmissionConfig {
            min_exec_memory_bytes: 32 * MIB,
            largest_exec_memory_bytes: 256 * MIB,
            queue_wait: Duration::from_millis(50),
            ..config(max_execs, 8, 4096 * MIB)
        }
    }

    #[tokio::test]
    async fn a_quiet_computer_is_admitted_beside_many_busy_ones() {
        let a = Admission::new(pooled(64));
        assert_eq!(a.inner.slots, 64);
        let mut held = Vec::new();
        // 63 computers each start one exec asking for the default budget:
        // all are admitted, the pool is never overdrawn, and the budgets
        // shrink towards the floor as the pool fills.
        for i in 0..63 {
            let p = a
                .admit(&format!("busy{i}"), AtMost(256 * MIB))
                .await
                .unwrap();
            assert!((32 * MIB..=256 * MIB).contains(&p.memory()), "{i}: {p:?}");
            held.push(p);
            let reserved: u64 = held.iter().map(Permit::memory).sum();
            assert!(reserved <= 4096 * MIB, "{i}: {reserved}");
        }
        assert_eq!(held[0].memory(), 256 * MIB);
        assert_eq!(held[62].memory(), 32 * MIB);
        // The last slot still has its floor for a newcomer, at once.
        let quiet = a.admit("quiet", AtMost(256 * MIB)).await.unwrap();
        assert!(quiet.memory() >= 32 * MIB, "{quiet:?}");
        // Then the slots are full: the next one waits and is refused.
        let e = a.admit("late", AtMost(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        // A budget asked for exactly is not shrunk: refused while the
        // reserve holds, given whole once room is back.
        drop(quiet);
        let e = a.admit("exact", Exactly(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory, "{e}");
        assert!(e.to_string().contains("min_exec_memory = 32 MiB"), "{e}");
        held.truncate(5);
        let p = a.admit("exact", Exactly(256 * MIB)).await.unwrap();
        assert_eq!(p.memory(), 256 * MIB);
    }

    #[tokio::test]
    async fn slots_are_bounded_by_the_floor_and_a_default_budget_on_an_idle_agent() {
        // 1 GiB: 24 floors of 32 MiB beside one 256 MiB budget.
        let c = AdmissionConfig {
            exec_memory_bytes: 1024 * MIB,
            ..pooled(256)
        };
        assert_eq!(c.slots(), 25);
        let a = Admission::new(c);
        let first = a.admit("a", Exactly(256 * MIB)).await.unwrap();
        assert_eq!(first.memory(), 256 * MIB);
        let mut rest = Vec::new();
        for i in 0..24 {
            rest.push(a.admit(&format!("c{i}"), AtMost(256 * MIB)).await.unwrap());
        }
        assert!(rest.iter().all(|p| p.memory() == 32 * MIB));
        let e = a.admit("z", AtMost(256 * MIB)).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        assert!(e.to_string().contains("runs 25 execs"), "{e}");
        assert!(e.to_string().contains("max_execs = 256"), "{e}");
    }

    #[tokio::test]
    async fn a_computer_gets_no_more_than_its_fair_share_of_the_pool() {
        // 16 GiB, 65 slots: the reserve does not bite before the share.
        let a = Admission::new(AdmissionConfig {
            exec_memory_bytes: 16384 * MIB,
            ..pooled(65)
        });
        let mut held = Vec::new();
        for i in 0..63 {
            held.push(a.admit(&format!("c{i}"), AtMost(256 * MIB)).await.unwrap());
        }
        assert!(held.iter().all(|p| p.memory() == 256 * MIB));
        // 63 computers share the pool: 16384 / 63 = 260 MiB each. c0
        // already holds 256 MiB, so its second exec gets the floor.
        let second = a.admit("c0", AtMost(256 * MIB)).await.unwrap();
        assert_eq!(second.memory(), 32 * MIB);
        // A newcomer's share is 256 MiB; it gets what is left, 224 MiB.
        let newcomer = a.admit("c63", AtMost(256 * MIB)).await.unwrap();
        assert_eq!(newcomer.memory(), 224 * MIB);
    }

    #[tokio::test]
    async fn the_computer_running_fewest_is_served_first() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 100,
            queue_wait: Duration::from_secs(5),
            ..config(2, 2, 1 << 30)
        });
        let busy = a.admit("busy", Exactly(1)).await.unwrap();
        let other = a.admit("other", Exactly(1)).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // "busy" (one running) queues first, then "quiet" (none running).
        for name in ["busy", "quiet"] {
            let queue = a.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = queue.admit(name, Exactly(1)).await.unwrap();
                tx.send(name).unwrap();
                permit
            }));
            while a.load().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(other);
        assert_eq!(rx.recv().await.unwrap(), "quiet");
        drop(busy);
        assert_eq!(rx.recv().await.unwrap(), "busy");
    }

    #[tokio::test]
    async fn a_withdrawn_waiter_frees_its_place() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", Exactly(1)).await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("b", Exactly(1)).await.map(drop) })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(a.load(), (1, 0));
        drop(first);
        assert_eq!(a.load(), (0, 0));
    }

    #[tokio::test]
    async fn metrics_show_running_queued_and_refusals() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_millis(10),
            ..config(4, 1, 1 << 30)
        });
        let registry = prometheus::Registry::new();
        a.register_metrics(&registry).unwrap();
        let _p = a.admit("a", Exactly(1000)).await.unwrap();
        a.admit("a", Exactly(1)).await.unwrap_err();
        let families = registry.gather();
        let value = |name: &str, label: Option<&str>| -> f64 {
            let f = families.iter().find(|f| f.name() == name).unwrap();
            let m = f
                .get_metric()
                .iter()
                .find(|m| label.is_none_or(|l| m.get_label().iter().any(|p| p.value() == l)))
                .unwrap();
            if m.get_counter().get_value() != 0.0 {
                m.get_counter().get_value()
            } else {
                m.get_gauge().get_value()
            }
        };
        assert_eq!(value("agentcomputer_execs_running", None), 1.0);
        assert_eq!(value("agentcomputer_execs_queued", None), 0.0);
        assert_eq!(
            value("agentcomputer_exec_memory_reserved_bytes", None),
            1000.0
        );
        assert_eq!(
            value(
                "agentcomputer_execs_refused_total",
                Some("max_execs_per_computer")
            ),
            1.0
        );
        assert_eq!(value("agentcomputer_exec_limit", Some("max_execs")), 4.0);
    }

    /// One computer with a large default and many execs cannot push a
    /// quiet computer's first exec below its default budget: an agent with
    /// 830 MiB of exec memory (a 2 GiB container), a computer of
    /// `limits.memory: 4Gi` starting 8 execs, another asking for its
    /// default 256 MiB.
    #[tokio::test]
    async fn a_quiet_computer_gets_its_default_beside_a_greedy_one() {
        let mib = 1u64 << 20;
        let a = Admission::new(AdmissionConfig {
            exec_memory_bytes: 830 * mib,
            queue_wait: Duration::from_millis(50),
            ..AdmissionConfig::derive(2, 1660 * mib)
        });
        assert_eq!(a.config().slots(), 11);
        let mut greedy = Vec::new();
        for _ in 0..8 {
            greedy.push(a.admit("greedy", AtMost(4096 * mib)).await.unwrap());
        }
        let taken: u64 = greedy.iter().map(Permit::memory).sum();
        assert!(taken <= (830 - 256) * mib, "{taken}");
        let quiet = a.admit("quiet", AtMost(256 * mib)).await.unwrap();
        assert_eq!(quiet.memory(), 256 * mib);
        // It runs a 150 MiB job that way; a second quiet computer waits
        // for room rather than take less than its floor.
        drop(quiet);
        let again = a.admit("quiet", AtMost(256 * mib)).await.unwrap();
        assert_eq!(again.memory(), 256 * mib);
    }

    /// While another computer waits, one that runs execs gets no more
    /// than its fair share: the waiter is served when room frees.
    #[tokio::test]
    async fn a_busy_computer_stays_within_its_fair_share_while_another_waits() {
        let a = Admission::new(AdmissionConfig {
            queue_wait: Duration::from_secs(5),
            ..config(8, 8, 1000)
        });
        let first = a.admit("busy", Exactly(400)).await.unwrap();
        // The quiet one asks for more than is free and waits.
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("quiet", Exactly(700)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 400 + 200 would pass the busy one's half of the whole.
        let more = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("busy", Exactly(200)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!more.is_finished(), "granted past its fair share");
        drop(first);
        let got = waiting.await.unwrap().unwrap();
        assert_eq!(got.memory(), 700);
        drop(got);
        assert_eq!(more.await.unwrap().unwrap().memory(), 200);
    }
}
