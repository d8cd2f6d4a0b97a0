//! A bound on the stdin bashkit gathers whole, checked as it is fed.
//!
//! In an exec with stdin, bashkit gives a command it does not stream and
//! does not know to leave stdin alone (`xargs`, `python3`, a call of one
//! of the script's functions, a name that is not found, ...) everything
//! left in the runtime's pipe: it reads the pipe to its end into memory
//! before the command starts, with no budget, and only then refuses at the
//! memory budget (a 300 MB stream reached 1.9 GB of the node agent before
//! that). Neither the reading nor the command is visible to the runtime;
//! the feeder (the `stdin` module) writing into the pipe is. So the feeder
//! counts what it writes while no command that streams its stdin runs
//! ([`Gathered::admit`]), and refuses past the exec's memory budget, with
//! the budget's usual error, before writing more: what bashkit gathers is
//! then at most the budget plus one step of the feeder.
//!
//! Which command runs is told by a `before_tool` hook ([`Gathered::hook`])
//! that sees every command of the script as it starts (the feeder's own
//! start is left out): after the gathering of its stdin, so the gathering
//! is charged to the command before it.
//!
//! - A command that streams its stdin (the runtime's streaming commands,
//!   bashkit's `grep` and `tr`, [`STREAMS`]) is taken to consume what is
//!   fed while it is the last command started: nothing is counted then.
//! - `read` takes one line from the pipe: the count starts again at zero,
//!   so `while read l; do ...; done` over an input of any size passes
//!   (a single line longer than the budget is refused: `read` holds it).
//!
//! A streaming command takes the pipe with it in bashkit (the commands
//! after it in the same shell see no more input), so no command gathers
//! right after one. The limit, from seeing only command starts: bytes a
//! gathering command would take while a streaming command of another
//! stage of the same pipeline is the last one started would not be
//! counted (none of the pipelines tried does so: `xargs echo | grep x |
//! wc -c` is refused at the budget).

use crate::budget::{ExecBudget, over_budget};
use agentcomputer_fs::Errno;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Commands that read their stdin as the pipe delivers it, holding a
/// bounded part of it (or admitting what they hold against the budget
/// themselves): the runtime's streaming commands, its whole-input
/// commands (see the `whole_input` module) and bashkit's `grep` and `tr`.
pub(crate) const STREAMS: &[&str] = &[
    "cat",
    "wc",
    "head",
    "tail",
    "tee",
    "base64",
    "xxd",
    "tac",
    "rev",
    "tar",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "grep",
    "tr",
];

/// What one exec's feeder has written that no streaming command took.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// Bytes fed while no streaming command was the last one started,
    /// since the last `read`.
    unclaimed: AtomicU64,
    /// Whether the last command started streams its stdin.
    streaming: AtomicBool,
}

impl Gathered {
    /// A fresh count, shared by the feeder and [`Gathered::hook`].
    pub(crate) fn new() -> Arc<Gathered> {
        Arc::new(Gathered::default())
    }

    /// The `before_tool` hook that tells `self` which command started.
    /// `whole_input`: the whole-input commands registered for this exec,
    /// which admit what they hold themselves.
    pub(crate) fn hook(
        self: &Arc<Self>,
        whole_input: Vec<&'static str>,
    ) -> bashkit::hooks::Interceptor<bashkit::hooks::ToolEvent> {
        let this = Arc::clone(self);
        Box::new(move |event| {
            let name = event.name.as_str();
            // The feeder starts with the script's first commands, not
            // before them: it is not one of the script's.
            if name == crate::stdin::FEED_COMMAND {
                return bashkit::hooks::HookAction::Continue(event);
            }
            let streams = STREAMS.contains(&name) || whole_input.contains(&name);
            this.streaming.store(streams, Ordering::Relaxed);
            if name == "read" {
                this.unclaimed.store(0, Ordering::Relaxed);
            }
            bashkit::hooks::HookAction::Continue(event)
        })
    }

    /// Counts `bytes` the feeder is about to write. `Ok` while what no
    /// streaming command took fits `budget.memory`; else `ENOMEM` naming
    /// the held bytes and the limit, and the feeder stops the run.
    pub(crate) fn admit(&self, bytes: usize, budget: &ExecBudget) -> std::io::Result<()> {
        if self.streaming.load(Ordering::Relaxed) {
            return Ok(());
        }
        let held = self.unclaimed.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        if held <= budget.memory {
            return Ok(());
        }
        Err(over_budget(
            Errno::ENOMEM,
            "the standard input a command gathers whole",
            held,
            budget.memory,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::StopFlag;
    use bashkit::hooks::{HookAction, ToolEvent};

    fn budget(memory: u64) -> ExecBudget {
        ExecBudget {
            memory,
            stop: StopFlag::new(),
            deadline: None,
            timed_out: Arc::default(),
        }
    }

    fn start(hook: &bashkit::hooks::Interceptor<ToolEvent>, name: &str) {
        let event = ToolEvent {
            name: name.into(),
            args: Vec::new(),
        };
        assert!(matches!(hook(event), HookAction::Continue(_)));
    }

    #[test]
    fn input_no_streaming_command_takes_is_refused_past_the_budget() {
        let (g, b) = (Gathered::new(), budget(100));
        let hook = g.hook(vec!["sort"]);
        start(&hook, "shopt");
        assert!(g.admit(60, &b).is_ok());
        let e = g.admit(60, &b).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Cannot allocate memory: the standard input a command gathers whole needs 120 \
             bytes in memory; memory limit of 100 bytes exceeded"
        );
        // A streaming command consumes what is fed while it runs.
        let (g, b) = (Gathered::new(), budget(100));
        let hook = g.hook(vec!["sort"]);
        for name in ["cat", "sort", "grep"] {
            start(&hook, name);
            for _ in 0..10 {
                assert!(g.admit(60, &b).is_ok());
            }
        }
        // `read` takes a line: the count starts again.
        start(&hook, "read");
        assert!(g.admit(60, &b).is_ok());
        start(&hook, "read");
        assert!(g.admit(60, &b).is_ok());
        start(&hook, "xargs");
        assert!(g.admit(60, &b).is_err());
        // The feeder starting is not a command of the script.
        start(&hook, "cat");
        start(&hook, crate::stdin::FEED_COMMAND);
        assert!(g.admit(600, &b).is_ok());
        start(&hook, "xargs");
        assert!(g.admit(600, &b).is_err());
    }
}
