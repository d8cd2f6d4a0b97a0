//! The exec's event loop: QuickJS's job queue (promise reactions) plus a
//! timer queue, run on the exec thread until the awaited promise settles or
//! nothing is left to do, as Node's loop does.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rquickjs::{Ctx, Function, Promise, Value, promise::PromiseState, qjs};

use crate::state::ExecState;
use crate::stop::StopReason;

/// Most timers one exec may have pending at once.
pub(crate) const MAX_TIMERS: usize = 100_000;

struct Timer {
    due: Instant,
    interval: Option<Duration>,
    refed: bool,
}

/// Pending timers, ordered by due time then by id (creation order).
#[derive(Default)]
pub(crate) struct Timers {
    queue: BTreeSet<(Instant, u32)>,
    timers: HashMap<u32, Timer>,
    next_id: u32,
    refed: usize,
}

impl Timers {
    /// Adds a timer firing after `delay` (Node clamps below 1 ms to 1 ms);
    /// `repeat` makes it an interval. Returns its id, or `None` when too
    /// many are pending.
    pub(crate) fn add(&mut self, delay: Duration, repeat: bool) -> Option<u32> {
        if self.timers.len() >= MAX_TIMERS {
            return None;
        }
        let delay = delay.max(Duration::from_millis(1));
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let id = self.next_id;
        let due = Instant::now() + delay;
        self.queue.insert((due, id));
        self.timers.insert(
            id,
            Timer {
                due,
                interval: repeat.then_some(delay),
                refed: true,
            },
        );
        self.refed += 1;
        Some(id)
    }

    pub(crate) fn clear(&mut self, id: u32) {
        if let Some(t) = self.timers.remove(&id) {
            self.queue.remove(&(t.due, id));
            if t.refed {
                self.refed -= 1;
            }
        }
    }

    /// `timeout.ref()` / `unref()`: an unref'd timer alone does not keep the
    /// exec alive.
    pub(crate) fn set_ref(&mut self, id: u32, refed: bool) {
        if let Some(t) = self.timers.get_mut(&id)
            && t.refed != refed
        {
            t.refed = refed;
            if refed {
                self.refed += 1;
            } else {
                self.refed -= 1;
            }
        }
    }

    /// `timeout.refresh()`: restart the countdown with the same delay.
    pub(crate) fn refresh(&mut self, id: u32, delay: Duration) {
        if let Some(t) = self.timers.get_mut(&id) {
            self.queue.remove(&(t.due, id));
            t.due = Instant::now() + delay.max(Duration::from_millis(1));
            self.queue.insert((t.due, id));
        }
    }

    pub(crate) fn has_ref(&self, id: u32) -> bool {
        self.timers.get(&id).is_some_and(|t| t.refed)
    }

    /// When the next timer is due, if any ref'd timer keeps the loop alive.
    fn next_due(&self) -> Option<Instant> {
        if self.refed == 0 {
            return None;
        }
        self.queue.first().map(|(due, _)| *due)
    }

    /// Takes the first timer due by `now`; intervals are re-queued.
    fn pop_due(&mut self, now: Instant) -> Option<u32> {
        let &(due, id) = self.queue.first()?;
        if due > now {
            return None;
        }
        self.queue.pop_first();
        let t = self.timers.get_mut(&id)?;
        match t.interval {
            Some(every) => {
                t.due = now + every;
                self.queue.insert((t.due, id));
            }
            None => {
                let refed = t.refed;
                self.timers.remove(&id);
                if refed {
                    self.refed -= 1;
                }
            }
        }
        Some(id)
    }
}

/// Why the loop stopped before its goal.
pub(crate) enum LoopError<'js> {
    /// A job, a timer callback or an unhandled rejection threw this.
    Uncaught(Value<'js>),
    /// A limit, a cancellation or `process.exit`.
    Stopped(StopReason),
    /// Nothing is left to run and the awaited promise is still pending.
    Stalled,
}

/// Runs every queued promise job. A job only throws for uncatchable errors
/// (interrupts) or an out-of-memory inside the job machinery.
fn drain_jobs<'js>(ctx: &Ctx<'js>, st: &ExecState) -> Result<(), LoopError<'js>> {
    loop {
        if let Some(r) = st.stop.reason() {
            return Err(LoopError::Stopped(r));
        }
        let mut job_ctx = std::mem::MaybeUninit::<*mut qjs::JSContext>::uninit();
        // SAFETY: the runtime is locked by the enclosing `Context::with`.
        let r = unsafe {
            qjs::JS_ExecutePendingJob(
                qjs::JS_GetRuntime(ctx.as_raw().as_ptr()),
                job_ctx.as_mut_ptr(),
            )
        };
        match r {
            0 => return Ok(()),
            r if r > 0 => continue,
            _ => {
                let e = ctx.catch();
                if let Some(r) = st.stop.reason() {
                    return Err(LoopError::Stopped(r));
                }
                return Err(LoopError::Uncaught(e));
            }
        }
    }
}

/// Waits until `until` or a stop, whichever comes first.
fn sleep_until(st: &ExecState, until: Instant) {
    loop {
        if st.stop.should_stop() {
            return;
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        // Woken early by a cancellation (the watcher unparks this thread).
        std::thread::park_timeout(
            (until.min(st.stop.deadline) - now).max(Duration::from_micros(50)),
        );
    }
}

/// Fires timer `id` through the JS hook installed by the bootstrap.
fn fire<'js>(ctx: &Ctx<'js>, st: &ExecState, id: u32) -> Result<(), LoopError<'js>> {
    let hook = st.timer_hook.borrow().clone();
    let Some(hook) = hook else { return Ok(()) };
    let hook: Function = hook.restore(ctx).map_err(|_| LoopError::Stalled)?;
    match hook.call::<_, ()>((id,)) {
        Ok(()) => Ok(()),
        Err(_) => {
            let e = ctx.catch();
            match st.stop.reason() {
                Some(r) => Err(LoopError::Stopped(r)),
                None => Err(LoopError::Uncaught(e)),
            }
        }
    }
}

/// Runs the loop until `promise` settles (returns its state), or, with no
/// promise, until nothing is left to do.
pub(crate) fn run_until<'js>(
    ctx: &Ctx<'js>,
    st: &ExecState,
    promise: Option<&Promise<'js>>,
) -> Result<PromiseState, LoopError<'js>> {
    loop {
        drain_jobs(ctx, st)?;
        if let Some(p) = promise {
            let state = p.state();
            if state != PromiseState::Pending {
                if state == PromiseState::Rejected {
                    st.forget_rejection(ctx, p.as_value());
                }
                return Ok(state);
            }
        }
        if let Some(reason) = st.take_unhandled(ctx) {
            return Err(LoopError::Uncaught(reason));
        }
        let next = st.timers.borrow().next_due();
        let Some(due) = next else {
            return match promise {
                Some(_) => Err(LoopError::Stalled),
                None => Ok(PromiseState::Resolved),
            };
        };
        let now = Instant::now();
        if due > now {
            sleep_until(st, due);
            continue;
        }
        let id = st.timers.borrow_mut().pop_due(now);
        if let Some(id) = id {
            fire(ctx, st, id)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_due_then_id_order() {
        let mut t = Timers::default();
        let a = t.add(Duration::from_millis(5), false).unwrap();
        let b = t.add(Duration::from_millis(1), false).unwrap();
        let c = t.add(Duration::from_millis(1), false).unwrap();
        let later = Instant::now() + Duration::from_millis(10);
        assert_eq!(t.pop_due(later), Some(b));
        assert_eq!(t.pop_due(later), Some(c));
        assert_eq!(t.pop_due(later), Some(a));
        assert_eq!(t.pop_due(later), None);
        assert_eq!(t.next_due(), None);
    }

    #[test]
    fn intervals_requeue_and_unref_releases_the_loop() {
        let mut t = Timers::default();
        let i = t.add(Duration::from_millis(2), true).unwrap();
        let later = Instant::now() + Duration::from_millis(3);
        assert_eq!(t.pop_due(later), Some(i));
        assert!(t.next_due().is_some());
        t.set_ref(i, false);
        assert!(!t.has_ref(i));
        assert_eq!(t.next_due(), None);
        t.set_ref(i, true);
        t.clear(i);
        assert_eq!(t.next_due(), None);
        assert_eq!(t.refed, 0);
    }
}
