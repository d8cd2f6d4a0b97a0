//! Exit statuses a runtime reports when it ended the run itself.
//!
//! They follow the shell's conventions, so that a script's caller reads
//! them as it would from bash: `timeout(1)`'s 124 and 125, and 128 plus the
//! signal number for a run stopped as if by SIGINT (130) or SIGPIPE (141).
//! A program may exit with the same status on its own; the run's error
//! message (set only when the runtime stopped it) tells the two apart.

/// Exit status of a run stopped at its timeout (as `timeout(1)` reports).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of a run that could not be started (a sandbox that did not
/// come up, a working directory it cannot enter), as `timeout(1)` reports
/// its own failure.
pub const EXIT_START_FAILED: i32 = 125;
/// Exit status of a cancelled run: its caller went away, or the computer
/// was deleted (128 + SIGINT, as bash reports Ctrl-C).
pub const EXIT_CANCELLED: i32 = 130;
/// Exit status of a run stopped for producing more output than its cap
/// (128 + SIGPIPE: the reader stopped reading).
pub const EXIT_OUTPUT_CAP: i32 = 141;

/// Why a runtime ended a run, each with its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stopped {
    /// The run passed its timeout ([`EXIT_TIMEOUT`]).
    Timeout,
    /// The run could not be started ([`EXIT_START_FAILED`]).
    StartFailed,
    /// The run was cancelled ([`EXIT_CANCELLED`]).
    Cancelled,
    /// The run passed its output cap ([`EXIT_OUTPUT_CAP`]).
    OutputCap,
}

impl Stopped {
    /// Every reason, in order of its exit status.
    pub const ALL: [Stopped; 4] = [
        Stopped::Timeout,
        Stopped::StartFailed,
        Stopped::Cancelled,
        Stopped::OutputCap,
    ];

    /// The exit status reported for this reason.
    pub const fn code(self) -> i32 {
        match self {
            Stopped::Timeout => EXIT_TIMEOUT,
            Stopped::StartFailed => EXIT_START_FAILED,
            Stopped::Cancelled => EXIT_CANCELLED,
            Stopped::OutputCap => EXIT_OUTPUT_CAP,
        }
    }

    /// The reason an exit status stands for when the runtime ended the
    /// run; `None` for any other status. (A program may exit with one of
    /// these statuses itself; only the run's error message says the
    /// runtime stopped it.)
    pub const fn from_code(code: i32) -> Option<Stopped> {
        match code {
            EXIT_TIMEOUT => Some(Stopped::Timeout),
            EXIT_START_FAILED => Some(Stopped::StartFailed),
            EXIT_CANCELLED => Some(Stopped::Cancelled),
            EXIT_OUTPUT_CAP => Some(Stopped::OutputCap),
            _ => None,
        }
    }

    /// A short name of the reason (`timeout`, `start-failed`, `cancelled`,
    /// `output-cap`), for logs and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Stopped::Timeout => "timeout",
            Stopped::StartFailed => "start-failed",
            Stopped::Cancelled => "cancelled",
            Stopped::OutputCap => "output-cap",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for reason in Stopped::ALL {
            assert_eq!(
                Stopped::from_code(reason.code()),
                Some(reason),
                "{reason:?}"
            );
        }
        let codes: Vec<i32> = Stopped::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes, [124, 125, 130, 141]);
    }

    #[test]
    fn other_codes_are_the_programs_own() {
        for code in [0, 1, 2, 126, 127, 128, 137, 143, 255, -1] {
            assert_eq!(Stopped::from_code(code), None, "{code}");
        }
    }

    #[test]
    fn signal_statuses_are_128_plus_the_signal() {
        // SIGINT is 2 and SIGPIPE 13 on every platform the runtimes serve.
        assert_eq!(EXIT_CANCELLED, 128 + 2);
        assert_eq!(EXIT_OUTPUT_CAP, 128 + 13);
    }

    #[test]
    fn names_are_distinct() {
        let mut names: Vec<&str> = Stopped::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Stopped::ALL.len());
    }
}
