//! Bounds on credential guessing: wrong credentials from one source are
//! allowed at a small rate (a keyed `governor` limiter); past it the
//! source is throttled, and its requests are answered `429` without their
//! credential being looked at, until the limiter has a cell again. Every
//! refusal is logged at `WARN`, through a limiter of its own, so a flood of
//! guesses cannot fill the disk: lines left out are counted in the next.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::{Clock, QuantaClock};
use governor::state::keyed::HashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tracing::warn;

/// How many wrong credentials a source may send.
#[derive(Debug, Clone, Copy)]
pub struct GuessLimits {
    /// Wrong credentials a source may send at once (the bucket's size).
    pub burst: u32,
    /// Wrong credentials a source may send per minute, once the burst is
    /// spent.
    pub per_minute: u32,
    /// Refusal log lines per minute (for all sources), after a burst of
    /// `burst` lines.
    pub log_lines_per_minute: u32,
}

impl Default for GuessLimits {
    /// A burst of 10 wrong credentials, then 30 a minute per source; 60
    /// log lines a minute.
    fn default() -> GuessLimits {
        GuessLimits {
            burst: 10,
            per_minute: 30,
            log_lines_per_minute: 60,
        }
    }
}

/// Sources kept (in the limiter, in the throttled map) before entries
/// that no longer matter are swept.
const SWEEP_AT: usize = 4096;

type Keyed = RateLimiter<IpAddr, HashMapStateStore<IpAddr>, QuantaClock>;
type Direct = RateLimiter<NotKeyed, InMemoryState, QuantaClock>;

/// The guessing bounds of one proxy (shared by its connections).
pub(crate) struct Throttle {
    failures: Keyed,
    log: Direct,
    clock: QuantaClock,
    /// Sources throttled until the instant given.
    until: Mutex<HashMap<IpAddr, Instant>>,
    /// Refusals not logged since the last line.
    unlogged: AtomicU64,
}

fn quota(per_minute: u32, burst: u32) -> Quota {
    let per_minute = NonZeroU32::new(per_minute.max(1)).expect("at least 1");
    let burst = NonZeroU32::new(burst.max(1)).expect("at least 1");
    Quota::per_minute(per_minute).allow_burst(burst)
}

impl Throttle {
    /// A throttle with `limits`.
    pub(crate) fn new(limits: GuessLimits) -> Throttle {
        let clock = QuantaClock::default();
        Throttle {
            failures: RateLimiter::new(
                quota(limits.per_minute, limits.burst),
                HashMapStateStore::default(),
                clock.clone(),
            ),
            log: RateLimiter::direct_with_clock(
                quota(limits.log_lines_per_minute, limits.burst),
                clock.clone(),
            ),
            clock,
            until: Mutex::new(HashMap::new()),
            unlogged: AtomicU64::new(0),
        }
    }

    /// How long `source` is still throttled (`None`: not throttled, its
    /// credential may be checked).
    pub(crate) fn throttled(&self, source: IpAddr) -> Option<Duration> {
        let until = self.until.lock();
        let left = until.get(&source)?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// Records a wrong (or missing) credential from `source` and logs it
    /// (rate-limited). Returns how long the source is throttled now, if
    /// this was one guess too many.
    pub(crate) fn failed(&self, source: IpAddr, what: &str) -> Option<Duration> {
        if self.failures.len() >= SWEEP_AT {
            self.failures.retain_recent();
        }
        let wait = match self.failures.check_key(&source) {
            Ok(()) => None,
            Err(not_until) => Some(not_until.wait_time_from(self.clock.now())),
        };
        if let Some(wait) = wait {
            let mut until = self.until.lock();
            if until.len() >= SWEEP_AT {
                let now = Instant::now();
                until.retain(|_, t| *t > now);
            }
            until.insert(source, Instant::now() + wait.max(Duration::from_secs(1)));
        }
        self.log(source, what, wait);
        wait
    }

    /// Counts a request refused because its source is throttled, and logs
    /// it (rate-limited).
    pub(crate) fn refused_throttled(&self, source: IpAddr, left: Duration) {
        self.log(source, "request from a throttled source", Some(left));
    }

    fn log(&self, source: IpAddr, what: &str, throttled: Option<Duration>) {
        if self.log.check().is_err() {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
        match throttled {
            None => {
                warn!(%source, unlogged, "egress proxy: credential refused: {what}")
            }
            Some(wait) => warn!(
                %source,
                unlogged,
                throttled_for = ?wait,
                "egress proxy: credential guessing throttled: {what}"
            ),
        }
    }
}
