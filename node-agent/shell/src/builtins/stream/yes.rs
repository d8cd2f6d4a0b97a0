//! `yes`: its operands joined by spaces (or `y`), one line after another
//! until the reader stops reading, the exec's output cap is reached, or the
//! exec must stop. bashkit's `yes` stops silently after 10 000 lines.

use super::{Env, fail};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Yes(pub Env);

/// Bytes written per step: whole lines filling about this much.
const STEP_BYTES: usize = 16 * 1024;

#[async_trait]
impl Command for Yes {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut words: Vec<&str> = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done || arg == "-" || !arg.starts_with('-') {
                words.push(arg);
            } else if arg == "--" {
                options_done = true;
            } else if arg.starts_with("--") {
                return fail(&ctx, format!("unrecognized option '{arg}'")).await;
            } else {
                let flag = arg[1..].chars().next().unwrap_or('-');
                return fail(&ctx, format!("invalid option -- '{flag}'")).await;
            }
        }
        let mut line = if words.is_empty() {
            "y".to_string()
        } else {
            words.join(" ")
        };
        line.push('\n');
        let step = repeat_line(line.as_bytes(), STEP_BYTES);
        loop {
            if self.0.budget.step_stopped() {
                return Err(self.0.budget.stop_error());
            }
            // A reader that went away ends the command with status 141,
            // as SIGPIPE ends coreutils' `yes`.
            ctx.stdout.write_all(&step).await?;
        }
    }
}

/// `line` repeated whole as often as fits in `about` bytes (at least once).
fn repeat_line(line: &[u8], about: usize) -> Vec<u8> {
    let times = (about / line.len()).max(1);
    line.repeat(times)
}

#[cfg(test)]
mod tests {
    use super::repeat_line;

    #[test]
    fn steps_hold_whole_lines() {
        let step = repeat_line(b"y\n", 16);
        assert_eq!(step, b"y\ny\ny\ny\ny\ny\ny\ny\n");
        let long = vec![b'a'; 40];
        assert_eq!(repeat_line(&long, 16), long);
    }
}
