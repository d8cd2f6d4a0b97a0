//! The memory budget and stop flag of one exec, as the filesystem layer and
//! the streaming commands see them.
//!
//! Every place that would hold a whole input in memory asks the budget
//! first, with the size it is about to allocate: a file's logical size (a
//! sparse file can claim terabytes while storing nothing), a FIFO's buffer.
//! A request that cannot fit fails before anything is allocated, with an
//! error naming the limit, instead of growing the node agent's memory.

use crate::errno::kind_of;
use crate::stop::StopFlag;
use agentcomputer_fs::Errno;
use std::io::Error as IoError;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What one exec may hold in memory and whether it must stop.
#[derive(Debug, Clone)]
pub(crate) struct ExecBudget {
    /// The exec's memory budget, bytes (`ShellLimits::memory_bytes`).
    pub memory: u64,
    /// Raised when the exec must stop (timeout, cancellation); long calls
    /// check it between steps, the interpreter before every command.
    pub stop: Arc<StopFlag>,
    /// When the exec's timeout ends, and the timeout; long calls stop at
    /// it without waiting for the runtime to set `stop`.
    pub deadline: Option<(Instant, Duration)>,
    /// Set when a long call stopped because the deadline had passed: the
    /// run then ended by its timeout, whatever the script did after.
    pub timed_out: Arc<AtomicBool>,
}

impl ExecBudget {
    /// `Ok` if `bytes` more may be held at once; else `EFBIG` with a
    /// message naming `what`, its size and the limit.
    pub(crate) fn admit(&self, bytes: u64, what: &str) -> Result<(), IoError> {
        if bytes <= self.memory {
            return Ok(());
        }
        Err(over_budget(Errno::EFBIG, what, bytes, self.memory))
    }

    /// Whether the exec was asked to stop or its timeout has passed. A
    /// passed timeout also raises the stop flag, so the script ends at its
    /// next statement instead of going on after the stopped call.
    pub(crate) fn stopped(&self) -> bool {
        if self.stop.is_raised() {
            return true;
        }
        let late = self.deadline.is_some_and(|(at, _)| Instant::now() >= at);
        if late {
            self.timed_out.store(true, Ordering::Relaxed);
            self.stop.raise();
        }
        late
    }

    /// [`ExecBudget::stopped`] at a step of a long command, which is also
    /// a safe point where a demoted exec waits for its computer's turn of
    /// idle CPU ([`agentcomputer_sched::checkpoint`]). Only for steps that
    /// hold no engine transaction.
    pub(crate) fn step_stopped(&self) -> bool {
        agentcomputer_sched::checkpoint(|| self.stop.is_raised());
        self.stopped()
    }

    /// Whether a long call was stopped by the deadline.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// The error a long call ends with once [`ExecBudget::stopped`]: the
    /// timeout when it has passed (so the run reports a timeout), else a
    /// cancellation.
    pub(crate) fn stop_error(&self) -> bashkit::Error {
        match self.deadline {
            Some((at, timeout)) if Instant::now() >= at => {
                bashkit::Error::ResourceLimit(bashkit::LimitExceeded::Timeout(timeout))
            }
            _ => bashkit::Error::Cancelled,
        }
    }
}

/// `"File too large: <what> needs N bytes in memory; memory limit of M
/// bytes exceeded"`, with the kind of `errno`.
pub(crate) fn over_budget(errno: Errno, what: &str, bytes: u64, limit: u64) -> IoError {
    let reason = match errno {
        Errno::ENOMEM => "Cannot allocate memory",
        _ => "File too large",
    };
    IoError::new(
        kind_of(errno),
        format!(
            "{reason}: {what} needs {bytes} bytes in memory; memory limit of {limit} bytes exceeded"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_and_names_it_past() {
        let b = ExecBudget {
            memory: 100,
            stop: StopFlag::new(),
            deadline: None,
            timed_out: Arc::default(),
        };
        assert!(b.admit(100, "f").is_ok());
        let e = b.admit(101, "the file").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert_eq!(
            e.to_string(),
            "File too large: the file needs 101 bytes in memory; memory limit of 100 bytes exceeded"
        );
    }
}
