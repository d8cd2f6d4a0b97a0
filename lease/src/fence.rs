//! The holder's validity: a deadline in one atomic, checked on every write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::Lost;

/// A clonable check of whether a Lease is still held, for every task that
/// writes under it. [`Fence::valid`] is one atomic load and a clock read;
/// [`Fence::lost`] completes when validity ends.
#[derive(Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    /// Instant that `deadline` counts from.
    base: Instant,
    /// End of validity in nanoseconds since `base`; [`LOST`] once lost.
    deadline: AtomicU64,
    /// Why it was lost; written, with `deadline` set to [`LOST`], under
    /// this lock, so that losing and extending never interleave.
    reason: Mutex<Option<Lost>>,
    /// Cancelled when validity ends.
    lost: CancellationToken,
}

/// The `deadline` of a lost lease. Deadlines are later than `base`, so never 0.
const LOST: u64 = 0;

impl Fence {
    /// Valid until `until`.
    pub(crate) fn new(until: Instant) -> Fence {
        let base = Instant::now();
        let fence = Fence {
            inner: Arc::new(Inner {
                base,
                deadline: AtomicU64::new(LOST),
                reason: Mutex::new(None),
                lost: CancellationToken::new(),
            }),
        };
        fence
            .inner
            .deadline
            .store(fence.nanos(until).max(1), Ordering::Release);
        fence
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.inner.base).as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX)
    }

    /// Ok while the Lease is held: the renew deadline after the last
    /// successful renew has not passed and nothing showed it lost. Err
    /// says why it was lost; every later call returns the same Err.
    pub fn valid(&self) -> Result<(), Lost> {
        let deadline = self.inner.deadline.load(Ordering::Acquire);
        if deadline != LOST && self.nanos(Instant::now()) < deadline {
            return Ok(());
        }
        self.check_slow()
    }

    /// `valid` under the lock: reads the reason, or latches the deadline.
    fn check_slow(&self) -> Result<(), Lost> {
        let mut reason = self.inner.reason.lock();
        let deadline = self.inner.deadline.load(Ordering::Acquire);
        if deadline == LOST {
            return Err(reason.clone().unwrap_or(Lost::RenewDeadline));
        }
        if self.nanos(Instant::now()) < deadline {
            return Ok(());
        }
        self.latch(&mut reason, Lost::RenewDeadline);
        Err(Lost::RenewDeadline)
    }

    fn latch(&self, reason: &mut Option<Lost>, why: Lost) {
        *reason = Some(why);
        self.inner.deadline.store(LOST, Ordering::Release);
        self.inner.lost.cancel();
    }

    /// When validity ends as things stand (None once lost). Later renews
    /// move it; nothing moves it earlier but losing the Lease.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid().ok()?;
        let deadline = self.inner.deadline.load(Ordering::Acquire);
        (deadline != LOST).then(|| self.inner.base + Duration::from_nanos(deadline))
    }

    /// Completes when validity ends, with the reason.
    pub async fn lost(&self) -> Lost {
        loop {
            if let Err(why) = self.valid() {
                return why;
            }
            let until = self.valid_until();
            match until {
                Some(until) => {
                    tokio::select! {
                        _ = self.inner.lost.cancelled() => {}
                        _ = tokio::time::sleep_until(until.into()) => {}
                    }
                }
                None => self.inner.lost.cancelled().await,
            }
        }
    }

    /// A token cancelled when validity ends (at the latest when the holder's
    /// renew task sees the deadline pass). Cancelling it affects nothing else.
    pub fn token(&self) -> CancellationToken {
        self.inner.lost.child_token()
    }

    /// Moves the end of validity to `until`, unless the Lease is already
    /// lost or its deadline has passed (then it is latched as lost): a
    /// late renew never revives it. True when extended.
    pub(crate) fn extend(&self, until: Instant) -> bool {
        let mut reason = self.inner.reason.lock();
        let deadline = self.inner.deadline.load(Ordering::Acquire);
        if deadline == LOST {
            return false;
        }
        if self.nanos(Instant::now()) >= deadline {
            self.latch(&mut reason, Lost::RenewDeadline);
            return false;
        }
        let until = self.nanos(until).max(deadline);
        self.inner.deadline.store(until, Ordering::Release);
        true
    }

    /// Ends validity now for `why`, unless it already ended (the first
    /// reason stays).
    pub(crate) fn lose(&self, why: Lost) {
        let mut reason = self.inner.reason.lock();
        if self.inner.deadline.load(Ordering::Acquire) != LOST {
            let why = if self.nanos(Instant::now()) >= self.inner.deadline.load(Ordering::Acquire) {
                Lost::RenewDeadline
            } else {
                why
            };
            self.latch(&mut reason, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_until_the_deadline_then_lost_for_good() {
        let fence = Fence::new(Instant::now() + Duration::from_millis(50));
        assert_eq!(fence.valid(), Ok(()));
        assert!(fence.valid_until().is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(fence.valid(), Err(Lost::RenewDeadline));
        assert!(fence.token().is_cancelled());
        // A renew that completes late does not revive it.
        assert!(!fence.extend(Instant::now() + Duration::from_secs(5)));
        assert_eq!(fence.valid(), Err(Lost::RenewDeadline));
        assert_eq!(fence.valid_until(), None);
    }

    #[test]
    fn extend_moves_the_deadline_and_lose_keeps_the_first_reason() {
        let fence = Fence::new(Instant::now() + Duration::from_millis(50));
        assert!(fence.extend(Instant::now() + Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(fence.valid(), Ok(()));
        fence.lose(Lost::TakenBy("b".into()));
        fence.lose(Lost::Released);
        assert_eq!(fence.valid(), Err(Lost::TakenBy("b".into())));
        assert!(!fence.extend(Instant::now() + Duration::from_secs(5)));
    }

    #[tokio::test]
    async fn lost_completes_at_the_deadline() {
        let start = Instant::now();
        let fence = Fence::new(start + Duration::from_millis(100));
        let why = fence.lost().await;
        assert_eq!(why, Lost::RenewDeadline);
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(waited < Duration::from_millis(600), "{waited:?}");
    }
}
