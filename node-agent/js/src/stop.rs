//! Why an exec must stop, shared between the exec thread, QuickJS's interrupt
//! handler and the task watching for cancellation.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// A reason to end an exec before the code finishes by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    Timeout,
    Cancelled,
    OutputCap,
    /// `process.exit(code)`.
    Exit(i32),
}

const NONE: u8 = 0;
const TIMEOUT: u8 = 1;
const CANCELLED: u8 = 2;
const OUTPUT_CAP: u8 = 3;
const EXIT: u8 = 4;

/// The first stop reason wins; later ones are ignored.
pub(crate) struct Stopper {
    reason: AtomicU8,
    exit_code: AtomicI32,
    /// Set while the exec writes its final report: no more interrupts.
    reporting: AtomicBool,
    pub deadline: Instant,
    pub timeout: Duration,
}

impl Stopper {
    pub(crate) fn new(timeout: Duration) -> Stopper {
        let now = Instant::now();
        Stopper {
            reason: AtomicU8::new(NONE),
            exit_code: AtomicI32::new(0),
            reporting: AtomicBool::new(false),
            deadline: now
                .checked_add(timeout)
                .unwrap_or(now + Duration::from_secs(86400 * 365)),
            timeout,
        }
    }

    pub(crate) fn stop(&self, reason: StopReason) {
        let code = match reason {
            StopReason::Timeout => TIMEOUT,
            StopReason::Cancelled => CANCELLED,
            StopReason::OutputCap => OUTPUT_CAP,
            StopReason::Exit(c) => {
                self.exit_code.store(c, Ordering::Relaxed);
                EXIT
            }
        };
        let _ = self
            .reason
            .compare_exchange(NONE, code, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The reason to stop, checking the deadline as a side effect.
    pub(crate) fn reason(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::Acquire) {
            NONE => {
                if Instant::now() >= self.deadline {
                    self.stop(StopReason::Timeout);
                    return self.reason();
                }
                None
            }
            TIMEOUT => Some(StopReason::Timeout),
            CANCELLED => Some(StopReason::Cancelled),
            OUTPUT_CAP => Some(StopReason::OutputCap),
            _ => Some(StopReason::Exit(self.exit_code.load(Ordering::Relaxed))),
        }
    }

    pub(crate) fn should_stop(&self) -> bool {
        self.reason().is_some()
    }

    /// QuickJS's interrupt handler: true aborts the running JavaScript with
    /// an uncatchable error.
    pub(crate) fn interrupt(&self) -> bool {
        !self.reporting.load(Ordering::Relaxed) && self.should_stop()
    }

    /// The exec is over; let the error report run to its end.
    pub(crate) fn set_reporting(&self) {
        self.reporting.store(true, Ordering::Relaxed);
    }
}

/// `2s`, `1.5s`, `0.25s`: a timeout as people write it.
pub(crate) fn human_secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        let s = format!("{:.3}", d.as_secs_f64());
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins() {
        let s = Stopper::new(Duration::from_secs(60));
        assert_eq!(s.reason(), None);
        s.stop(StopReason::Exit(3));
        s.stop(StopReason::Cancelled);
        assert_eq!(s.reason(), Some(StopReason::Exit(3)));
    }

    #[test]
    fn deadline_turns_into_timeout() {
        let s = Stopper::new(Duration::ZERO);
        assert_eq!(s.reason(), Some(StopReason::Timeout));
    }

    #[test]
    fn formats() {
        assert_eq!(human_secs(Duration::from_secs(2)), "2s");
        assert_eq!(human_secs(Duration::from_millis(250)), "0.25s");
    }
}
