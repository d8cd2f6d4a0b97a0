//! What the service tells its mode about the calls it serves, so that the
//! mode can count them (metrics) and record use (last activity) without the
//! service knowing how.

use std::time::Duration;

use tonic::Code;

/// How an exec ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecOutcome {
    /// The program exited with status 0.
    Success,
    /// The program exited with another status.
    Failure,
    /// The runtime ended the run: timeout, output cap, memory, a runaway
    /// program, or a stuck run.
    Error,
    /// The client went away (or the agent shut down) before the end.
    Cancelled,
    /// Refused before it started: disabled runtime, bad cwd, bad input.
    Rejected,
}

impl ExecOutcome {
    /// Every outcome, for metrics.
    pub const ALL: [ExecOutcome; 5] = [
        ExecOutcome::Success,
        ExecOutcome::Failure,
        ExecOutcome::Error,
        ExecOutcome::Cancelled,
        ExecOutcome::Rejected,
    ];

    /// Lowercase name: `success`, `failure`, `error`, `cancelled`, `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecOutcome::Success => "success",
            ExecOutcome::Failure => "failure",
            ExecOutcome::Error => "error",
            ExecOutcome::Cancelled => "cancelled",
            ExecOutcome::Rejected => "rejected",
        }
    }
}

/// Receives events of the service. Every method has an empty default.
/// Methods are called on the request's task: they must be quick and must
/// not block.
pub trait Observer: Send + Sync + 'static {
    /// A call passed the credential check for `computer` (its registry key).
    fn used(&self, computer: &str) {
        let _ = computer;
    }

    /// A call was refused by the credential check with `code`
    /// (`UNAUTHENTICATED`, `PERMISSION_DENIED`, `FAILED_PRECONDITION`, ...).
    fn refused(&self, code: Code) {
        let _ = code;
    }

    /// An exec of `runtime` (`shell`, `javascript`) ended with `outcome`
    /// after `duration` (zero for a rejected one).
    fn exec_finished(&self, runtime: &'static str, outcome: ExecOutcome, duration: Duration) {
        let _ = (runtime, outcome, duration);
    }
}

/// Observes nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unobserved;

impl Observer for Unobserved {}
