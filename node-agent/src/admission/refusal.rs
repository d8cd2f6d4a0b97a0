//! Why an exec was not admitted, as the caller sees it.

use std::fmt;

use tonic::Status;

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

    pub(super) const ALL: [Limit; 4] = [
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
    pub(super) message: String,
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
