//! The exec's stdin, consumed once as a pipe is.
//!
//! bashkit hands the stdin of `ExecOptions::stdin` to every top-level
//! command as a whole value, so `wc -l; cat` printed the count and then
//! every line again. Inside a pipeline stage, though, bashkit reads stdin
//! from a pipe that its readers share. So an exec with stdin runs its script
//! as the last stage of a pipeline fed by [`Feed`], the runtime's own
//! command, which writes the request's bytes into the pipe a step at a
//! time (the pipe holds 4 KiB; nothing else copies the input):
//!
//! ```text
//! shopt -s lastpipe; __agentcomputer_stdin | { shopt -u lastpipe </dev/null; SCRIPT
//! }
//! ```
//!
//! `lastpipe` runs that stage in the main shell, as bash runs a script:
//! variables, `cd`, functions, traps, `exit`, `$$` and `$BASHPID` behave as
//! without the wrapper, and the script's first line stays line 1
//! (`$LINENO`, diagnostics). The option is switched off again before the
//! script's first command (with its own empty stdin: bashkit reads the
//! whole pipe for any command that is not known to leave stdin alone), so
//! the script's own pipelines run as bash's do.
//!
//! Input that arrives while the run goes ([`StdinStream`]) is fed the same
//! way, chunk by chunk as it comes, so an input of any size passes through
//! the 4 KiB pipe without being held whole by the runtime. What bashkit
//! gathers whole from the pipe is bounded as it is fed (the `gathered`
//! module).
//!
//! The pipeline ends when both of its stages do, and a feeder waiting for
//! more streamed input learns only at its next write that the script is
//! gone. So the wrapper ends the script with [`END_COMMAND`], which tells
//! the feeder to stop waiting and returns the script's status, and the
//! run ends with the script, unread input dropped, as `sleep 30 | bash -c
//! 'echo quick'` ends at once:
//!
//! ```text
//! SCRIPT
//! __agentcomputer_stdin_end $? || exit
//! }
//! ```
//!
//! On the left of `||` the command's status trips neither `set -e` nor an
//! `ERR` trap, and `exit` keeps a failing status. A script ending in a
//! line continuation (`\`) gets no end line (it would join the script's
//! last command), nor does one that names `DEBUG` (its trap would run
//! for the end line, which bash never shows); one that ends by `exit`
//! never reaches it. These end when the input does, or at the next write
//! after the script stopped.
//!
//! A script that does not parse alone, or not inside the wrapper (a
//! here-document running to the end of the script), runs unwrapped, so
//! bash's syntax report and its partial run are unchanged.

use crate::budget::ExecBudget;
use crate::gathered::Gathered;
use async_trait::async_trait;
use bashkit::parser::Parser;
use bashkit::{Command, CommandContext, CommandStatus, ExecutionLimits};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// The feeder's command name: not a word a script would use.
pub(crate) const FEED_COMMAND: &str = "__agentcomputer_stdin";

/// The command that ends the wrapped script (see the module docs).
pub(crate) const END_COMMAND: &str = "__agentcomputer_stdin_end";

/// Bytes written per step (bashkit's pipe holds 4 KiB; a step waits for
/// room as a pipe's writer does).
const STEP_BYTES: usize = 64 * 1024;

/// The script to run for `script` when the exec has stdin: the wrapped
/// form, or `None` when it must run unwrapped (see the module docs).
/// `limits` are the exec's, whose parser depth and fuel both parses honour.
pub(crate) fn wrap(script: &str, limits: &ExecutionLimits) -> Option<String> {
    let parses = |text: &str| {
        Parser::with_limits(text, limits.max_ast_depth, limits.max_parser_operations)
            .parse()
            .is_ok()
    };
    if !parses(script) {
        return None;
    }
    // A `DEBUG` trap would run for the end line too, which bash never
    // does: such a script gets none, and ends when its input does.
    let end = match script.ends_with('\\') || script.contains("DEBUG") {
        true => String::new(),
        false => format!("\n{END_COMMAND} $? || exit"),
    };
    let wrapped = format!(
        "shopt -s lastpipe; {FEED_COMMAND} | {{ shopt -u lastpipe </dev/null; {script}{end}\n}}"
    );
    parses(&wrapped).then_some(wrapped)
}

/// How often a feeder waiting for more streamed input checks whether the
/// exec must stop.
const POLL: Duration = Duration::from_millis(50);

/// Standard input that arrives while the run goes: chunks in order, the
/// end of input when the sender is dropped. Taken once by the run; cloning
/// shares the one receiver.
#[derive(Clone, Default, Debug)]
pub struct StdinStream(Arc<Mutex<Option<mpsc::Receiver<Vec<u8>>>>>);

impl StdinStream {
    /// Input read from `rx` until its sender is dropped.
    pub fn new(rx: mpsc::Receiver<Vec<u8>>) -> StdinStream {
        StdinStream(Arc::new(Mutex::new(Some(rx))))
    }

    /// Whether input is (still) to come from a stream.
    pub fn is_some(&self) -> bool {
        self.0.lock().is_some()
    }

    pub(crate) fn take(&self) -> Option<mpsc::Receiver<Vec<u8>>> {
        self.0.lock().take()
    }
}

/// The next chunk of `rx`, or `None` at the end of input; `Err` when
/// `budget` says the exec must stop while it waits.
pub(crate) async fn next_chunk(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    budget: &ExecBudget,
) -> bashkit::Result<Option<Vec<u8>>> {
    loop {
        if budget.step_stopped() {
            return Err(budget.stop_error());
        }
        if let Ok(chunk) = tokio::time::timeout(POLL, rx.recv()).await {
            return Ok(chunk);
        }
    }
}

/// The input a feeder writes: the request's bytes, then what the stream
/// brings.
type Input = (Vec<u8>, Option<mpsc::Receiver<Vec<u8>>>);

/// The command that writes the exec's stdin into the script's pipe, once:
/// a second call (a script naming the command) writes nothing.
pub(crate) struct Feed {
    data: Mutex<Option<Input>>,
    budget: ExecBudget,
    gathered: Arc<Gathered>,
    /// Raised by [`End`] when the script has ended.
    ended: Arc<AtomicBool>,
}

impl Feed {
    /// A feeder of `data` and then of what `rest` brings, stopping when
    /// `budget` says the exec must stop, refusing input `gathered` says no
    /// streaming command took past the budget, and ending early once
    /// `ended` is raised (by the [`End`] made with [`Feed::end`]).
    pub(crate) fn new(
        data: Vec<u8>,
        rest: Option<mpsc::Receiver<Vec<u8>>>,
        budget: ExecBudget,
        gathered: Arc<Gathered>,
    ) -> Self {
        Self {
            data: Mutex::new(Some((data, rest))),
            budget,
            gathered,
            ended: Arc::default(),
        }
    }

    /// The [`END_COMMAND`] of this feeder's script.
    pub(crate) fn end(&self) -> End {
        End(Arc::clone(&self.ended))
    }

    /// The next chunk of `rest`, or `None` at the end of input or once
    /// the script has ended.
    async fn next(&self, rest: &mut mpsc::Receiver<Vec<u8>>) -> bashkit::Result<Option<Vec<u8>>> {
        loop {
            if self.ended.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if self.budget.step_stopped() {
                return Err(self.budget.stop_error());
            }
            if let Ok(chunk) = tokio::time::timeout(POLL, rest.recv()).await {
                return Ok(chunk);
            }
        }
    }

    /// Writes `data` into the pipe; `false` once the script stopped
    /// reading. Past the memory budget of input no streaming command took
    /// (see the `gathered` module): an error naming the limit, which ends
    /// the run.
    async fn write(&self, ctx: &CommandContext<'_>, data: &[u8]) -> bashkit::Result<bool> {
        for step in data.chunks(STEP_BYTES) {
            if self.budget.step_stopped() {
                return Err(self.budget.stop_error());
            }
            if let Err(e) = self.gathered.admit(step.len(), &self.budget) {
                return Err(bashkit::Error::Execution(e.to_string()));
            }
            match ctx.stdout.write_all(step).await {
                Ok(()) => {}
                // The script ended or stopped reading: what it did not
                // read is dropped, and the feeder is not a failure (so
                // `set -o pipefail` sees only the script's status).
                Err(bashkit::Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

#[async_trait]
impl Command for Feed {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let data = self.data.lock().take();
        let Some((data, rest)) = data else {
            return Ok(CommandStatus::success());
        };
        if !self.write(&ctx, &data).await? {
            return Ok(CommandStatus::success());
        }
        drop(data);
        if let Some(mut rest) = rest {
            while let Some(chunk) = self.next(&mut rest).await? {
                if !self.write(&ctx, &chunk).await? {
                    break;
                }
            }
        }
        Ok(CommandStatus::success())
    }
}

/// The command that ends the wrapped script: tells the feeder to stop
/// waiting for input, and returns the status it is given (`$?`), 0 for
/// none.
pub(crate) struct End(Arc<AtomicBool>);

#[async_trait]
impl Command for End {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        self.0.store(true, Ordering::Relaxed);
        let code = ctx.args.first().and_then(|a| a.parse().ok()).unwrap_or(0);
        Ok(CommandStatus::with_code(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_that_parse_are_wrapped_on_their_own_line() {
        let limits = ExecutionLimits::new();
        let wrapped = wrap("echo $LINENO\necho two", &limits).expect("wrapped");
        assert!(wrapped.starts_with("shopt -s lastpipe; __agentcomputer_stdin | {"));
        assert_eq!(
            wrapped.lines().next().map(|l| l.ends_with("echo $LINENO")),
            Some(true)
        );
        assert_eq!(wrapped.lines().nth(1), Some("echo two"));
        assert_eq!(
            wrapped.lines().nth(2),
            Some("__agentcomputer_stdin_end $? || exit")
        );
        // A last line continued would take the end line in.
        let wrapped = wrap("echo a \\", &limits);
        assert!(wrapped.is_none_or(|w| !w.contains(END_COMMAND)));
        // A DEBUG trap would run for the end line.
        let wrapped = wrap("trap 'echo d' DEBUG; cat", &limits).expect("wrapped");
        assert!(!wrapped.contains(END_COMMAND));
    }

    #[test]
    fn scripts_that_do_not_parse_run_unwrapped() {
        let limits = ExecutionLimits::new();
        assert_eq!(wrap("if true; then", &limits), None);
        assert_eq!(wrap("echo )", &limits), None);
        // A here-document that runs to the end would swallow the brace.
        assert_eq!(wrap("cat <<EOF\nbody", &limits), None);
    }
}
