//! Admission control of execs: how many run at once on one computer and on
//! the whole agent, and how much memory they reserve together.
//!
//! Every exec asks for a [`Permit`] before it starts, reserving its memory
//! budget (the most its runtime lets it allocate). An exec that does not
//! fit waits in a bounded queue for at most [`AdmissionConfig::queue_wait`];
//! when a permit is released the waiting execs are served round-robin over
//! their computers (first come, first served within one computer), so a
//! computer with hundreds of queued execs delays another computer's by at
//! most one turn. An exec still waiting at the end of the wait, or finding
//! the queue full, is refused with RESOURCE_EXHAUSTED and a message naming
//! the limit and its value. The model is written in docs/isolation.md.

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

    /// The defaults for `cpus` CPUs and `available` bytes of memory.
    pub fn derive(cpus: usize, available: u64) -> AdmissionConfig {
        let cpus = cpus.max(1);
        let max_execs = EXECS_PER_CPU * cpus;
        AdmissionConfig {
            max_execs,
            max_execs_per_computer: EXECS_PER_COMPUTER_PER_CPU * cpus,
            exec_memory_bytes: available / EXEC_MEMORY_SHARE.1 * EXEC_MEMORY_SHARE.0,
            max_queued: max_execs,
            queue_wait: DEFAULT_QUEUE_WAIT,
            cpu: CpuFairness::default(),
        }
    }
}

/// Bytes of memory the agent may still use: `MemAvailable` of
/// `/proc/meminfo` (proc(5)), lowered to the room left under the agent's
/// memory cgroup when it has a limit (cgroup v2 `memory.max` minus
/// `memory.current`, or cgroup v1 `memory.limit_in_bytes` minus
/// `memory.usage_in_bytes`, read through `/proc/self/cgroup`). `None` when
/// `/proc/meminfo` cannot be read.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut available = meminfo.lines().find_map(|l| {
        let kib = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok().map(|k| k * 1024)
    })?;
    if let Some(room) = cgroup_room() {
        available = available.min(room);
    }
    Some(available)
}

/// Room under the process's memory cgroup limit, if it has one.
fn cgroup_room() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: String| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (limit, usage) = if controllers.is_empty() {
            let dir = format!("/sys/fs/cgroup{path}");
            (
                read(format!("{dir}/memory.max")),
                read(format!("{dir}/memory.current")),
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            let dir = format!("/sys/fs/cgroup/memory{path}");
            (
                read(format!("{dir}/memory.limit_in_bytes")),
                read(format!("{dir}/memory.usage_in_bytes")),
            )
        } else {
            continue;
        };
        // "max" (v2) does not parse: no limit. v1 reports no limit as a
        // huge number, which `min` leaves alone.
        if let (Some(limit), Some(usage)) = (limit, usage) {
            return Some(limit.saturating_sub(usage));
        }
    }
    None
}

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
fn bytes(n: u64) -> String {
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
                Limit::Execs => config.max_execs as i64,
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
    memory: u64,
    grant: oneshot::Sender<Permit>,
}

/// A computer's running count and its waiting execs.
#[derive(Default)]
struct PerComputer {
    running: usize,
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

    /// The limit `computer` would exceed by starting an exec of `memory`
    /// bytes now, if any.
    fn blocked_by(&self, state: &State, computer: &str, memory: u64) -> Option<Limit> {
        let c = &self.config;
        let running_here = state.computers.get(computer).map_or(0, |p| p.running);
        if running_here >= c.max_execs_per_computer {
            Some(Limit::ExecsPerComputer)
        } else if state.running >= c.max_execs {
            Some(Limit::Execs)
        } else if state.reserved.saturating_add(memory) > c.exec_memory_bytes {
            Some(Limit::Memory)
        } else {
            None
        }
    }

    /// Counts an exec as running and makes its permit.
    fn take(self: &Arc<Self>, state: &mut State, computer: &str, memory: u64) -> Permit {
        state.running += 1;
        state.reserved += memory;
        state
            .computers
            .entry(computer.to_string())
            .or_default()
            .running += 1;
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
            if p.running == 0 && p.waiting.is_empty() {
                state.computers.remove(computer);
            }
        }
        self.metrics.running.set(state.running as i64);
        self.metrics.reserved.set(state.reserved as i64);
    }

    /// Admits waiting execs while they fit, one per computer per turn.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        let mut since_grant = 0;
        while since_grant < state.turns.len() {
            let Some(computer) = state.turns.pop_front() else {
                break;
            };
            let head_memory = state.computers[&computer].waiting.front().map(|w| w.memory);
            let Some(memory) = head_memory else {
                continue;
            };
            if self.blocked_by(state, &computer, memory).is_some() {
                state.turns.push_back(computer);
                since_grant += 1;
                continue;
            }
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
            } else {
                since_grant = 0;
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
                "exec refused: running execs reserve too much of the exec memory for its budget of {} (exec_memory = {}){wait}",
                bytes(memory),
                bytes(c.exec_memory_bytes)
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

    /// Admits an exec on `computer` reserving `memory` bytes: at once when
    /// it fits and no exec of the same computer waits before it, else after
    /// waiting in the queue. Errors ([`Refusal`], RESOURCE_EXHAUSTED): the
    /// budget alone exceeds `exec_memory_bytes`; the queue is full; no room
    /// within `queue_wait`. Dropping the future withdraws the exec.
    pub async fn admit(&self, computer: &str, memory: u64) -> Result<Permit, Refusal> {
        let inner = &self.inner;
        let (id, rx) = {
            let mut state = inner.lock();
            if memory > inner.config.exec_memory_bytes {
                return Err(inner.refusal(Limit::Memory, memory, false));
            }
            let queue_ahead = state
                .computers
                .get(computer)
                .is_some_and(|p| !p.waiting.is_empty());
            if !queue_ahead && inner.blocked_by(&state, computer, memory).is_none() {
                return Ok(inner.take(&mut state, computer, memory));
            }
            if state.queued >= inner.config.max_queued || inner.config.queue_wait.is_zero() {
                let limit = if state.queued >= inner.config.max_queued {
                    Limit::Queue
                } else {
                    inner
                        .blocked_by(&state, computer, memory)
                        .unwrap_or(Limit::ExecsPerComputer)
                };
                return Err(inner.refusal(limit, memory, false));
            }
            let id = state.next_id;
            state.next_id += 1;
            let (tx, rx) = oneshot::channel();
            let p = state.computers.entry(computer.to_string()).or_default();
            p.waiting.push_back(Waiter {
                id,
                memory,
                grant: tx,
            });
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
        if inner.withdraw(&mut state, computer, id) {
            let limit = inner
                .blocked_by(&state, computer, memory)
                .unwrap_or(Limit::ExecsPerComputer);
            return Err(inner.refusal(limit, memory, true));
        }
        // Granted as the wait ended: the permit is in the channel.
        drop(state);
        rx.try_recv().map_err(|_| {
            let state = inner.lock();
            let limit = inner
                .blocked_by(&state, computer, memory)
                .unwrap_or(Limit::ExecsPerComputer);
            inner.refusal(limit, memory, true)
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
    use super::*;

    fn config(max_execs: usize, per_computer: usize, memory: u64) -> AdmissionConfig {
        AdmissionConfig {
            max_execs,
            max_execs_per_computer: per_computer,
            exec_memory_bytes: memory,
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
        let _p1 = a.admit("a", 100).await.unwrap();
        let e = a.admit("a", 100).await.unwrap_err();
        assert_eq!(e.limit, Limit::ExecsPerComputer);
        assert!(e.to_string().contains("max_execs_per_computer = 1"), "{e}");
        let _p2 = a.admit("b", 100).await.unwrap();
        let e = a.admit("c", 100).await.unwrap_err();
        assert_eq!(e.limit, Limit::Execs);
        assert!(e.to_string().contains("max_execs = 2"), "{e}");
        let e = a.admit("c", 301).await.unwrap_err();
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
        let p = a.admit("a", 768 << 20).await.unwrap();
        let e = a.admit("b", 512 << 20).await.unwrap_err();
        assert_eq!(e.limit, Limit::Memory);
        assert!(e.to_string().contains("budget of 512 MiB"), "{e}");
        assert!(e.to_string().contains("exec_memory = 1 GiB"), "{e}");
        drop(p);
        let _p = a.admit("b", 512 << 20).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let a = Admission::new(AdmissionConfig {
            max_queued: 1,
            ..config(1, 1, 1 << 30)
        });
        let _p = a.admit("a", 1).await.unwrap();
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", 1).await.map(drop) })
        };
        while a.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        let e = a.admit("b", 1).await.unwrap_err();
        assert_eq!(e.limit, Limit::Queue);
        assert!(e.to_string().contains("exec_queue = 1"), "{e}");
        waiting.abort();
    }

    #[tokio::test]
    async fn a_queued_exec_starts_when_a_permit_is_released() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", 1).await.unwrap();
        let second = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("a", 1).await })
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
        let running = a.admit("busy", 1).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // Five execs of "busy" queue up before one of "quiet".
        for name in ["busy", "busy", "busy", "busy", "busy", "quiet"] {
            let queue = a.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let permit = queue.admit(name, 1).await.unwrap();
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

    #[tokio::test]
    async fn a_withdrawn_waiter_frees_its_place() {
        let a = Admission::new(config(1, 1, 1 << 30));
        let first = a.admit("a", 1).await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit("b", 1).await.map(drop) })
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
        let _p = a.admit("a", 1000).await.unwrap();
        a.admit("a", 1).await.unwrap_err();
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
}
