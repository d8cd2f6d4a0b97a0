//! The admission state: running execs and their reservations per
//! computer, the bounded queue of waiting execs, and permits.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::*;

/// One waiting exec.
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) ask: MemoryAsk,
    pub(super) grant: oneshot::Sender<Permit>,
}

/// A computer's running count and its waiting execs.
#[derive(Default)]
pub(super) struct PerComputer {
    pub(super) running: usize,
    /// Memory reserved by its running execs.
    pub(super) reserved: u64,
    pub(super) waiting: VecDeque<Waiter>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) running: usize,
    pub(super) reserved: u64,
    pub(super) queued: usize,
    pub(super) next_id: u64,
    pub(super) computers: HashMap<String, PerComputer>,
    /// Computers with waiting execs, in the order they are served.
    pub(super) turns: VecDeque<String>,
}

pub(super) struct Inner {
    pub(super) config: AdmissionConfig,
    /// [`AdmissionConfig::slots`].
    pub(super) slots: usize,
    pub(super) state: Mutex<State>,
    pub(super) metrics: Metrics,
}

/// The admission controller of one agent. Cheap to clone; clones share
/// their state.
#[derive(Clone)]
pub struct Admission {
    pub(super) inner: Arc<Inner>,
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
    pub(super) inner: Arc<Inner>,
    pub(super) computer: String,
    pub(super) memory: u64,
    pub(super) armed: bool,
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
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
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
    pub(super) fn grant(
        &self,
        state: &State,
        computer: &str,
        ask: MemoryAsk,
    ) -> Result<u64, Limit> {
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
    pub(super) fn take(self: &Arc<Self>, state: &mut State, computer: &str, memory: u64) -> Permit {
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

    pub(super) fn release(&self, state: &mut State, computer: &str, memory: u64) {
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
    pub(super) fn dispatch(self: &Arc<Self>, state: &mut State) {
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
    pub(super) fn withdraw(&self, state: &mut State, computer: &str, id: u64) -> bool {
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

    pub(super) fn refusal(&self, limit: Limit, memory: u64, waited: bool) -> Refusal {
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
                human_bytes(c.min_exec_memory_bytes),
                human_bytes(c.exec_memory_bytes),
                human_bytes(c.min_exec_memory_bytes),
                c.max_execs
            ),
            Limit::Execs => format!(
                "exec refused: the node agent already runs {} execs, its limit (max_execs = {}){wait}",
                c.max_execs, c.max_execs
            ),
            Limit::Memory if memory > c.exec_memory_bytes => format!(
                "exec refused: its memory budget of {} is more than all execs may reserve together (exec_memory = {})",
                human_bytes(memory),
                human_bytes(c.exec_memory_bytes)
            ),
            Limit::Memory => format!(
                "exec refused: its memory budget of {} does not fit beside what the running execs reserve and the floor held back for each free exec slot (exec_memory = {}, min_exec_memory = {}); an exec that asks for no budget is given what fits{wait}",
                human_bytes(memory),
                human_bytes(c.exec_memory_bytes),
                human_bytes(c.min_exec_memory_bytes)
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
pub(super) struct Withdraw<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) computer: &'a str,
    pub(super) id: u64,
    pub(super) active: bool,
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
    #[cfg(test)]
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
    #[cfg(test)]
    pub fn load(&self) -> (usize, usize) {
        let state = self.inner.lock();
        (state.running, state.queued)
    }
}
