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
//! A script that does not parse alone, or not inside the wrapper (a
//! here-document running to the end of the script), runs unwrapped, so
//! bash's syntax report and its partial run are unchanged.

use crate::budget::ExecBudget;
use async_trait::async_trait;
use bashkit::parser::Parser;
use bashkit::{Command, CommandContext, CommandStatus, ExecutionLimits};
use parking_lot::Mutex;

/// The feeder's command name: not a word a script would use.
pub(crate) const FEED_COMMAND: &str = "__agentcomputer_stdin";

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
    let wrapped = format!(
        "shopt -s lastpipe; {FEED_COMMAND} | {{ shopt -u lastpipe </dev/null; {script}\n}}"
    );
    parses(&wrapped).then_some(wrapped)
}

/// The command that writes the exec's stdin into the script's pipe, once:
/// a second call (a script naming the command) writes nothing.
pub(crate) struct Feed {
    data: Mutex<Option<Vec<u8>>>,
    budget: ExecBudget,
}

impl Feed {
    /// A feeder of `data`, stopping when `budget` says the exec must stop.
    pub(crate) fn new(data: Vec<u8>, budget: ExecBudget) -> Self {
        Self {
            data: Mutex::new(Some(data)),
            budget,
        }
    }
}

#[async_trait]
impl Command for Feed {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let data = self.data.lock().take();
        let Some(data) = data else {
            return Ok(CommandStatus::success());
        };
        for step in data.chunks(STEP_BYTES) {
            if self.budget.step_stopped() {
                return Err(self.budget.stop_error());
            }
            match ctx.stdout.write_all(step).await {
                Ok(()) => {}
                // The script ended or stopped reading: what it did not
                // read is dropped, and the feeder is not a failure (so
                // `set -o pipefail` sees only the script's status).
                Err(bashkit::Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(CommandStatus::success())
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
