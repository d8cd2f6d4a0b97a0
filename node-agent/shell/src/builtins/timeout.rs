//! `timeout` as GNU coreutils has it, without bashkit's 300 s ceiling.
//!
//! bashkit's `timeout` cut every duration to 300 s, so in an exec allowed
//! an hour `timeout 10m make` stopped the command after five minutes and
//! reported 124 as if the ten had passed. This one reads coreutils'
//! operands (`DURATION` with `s m h d`, fractions, `0` or `inf` for no
//! limit; `-s SIG`, `-k DUR`, `--foreground`, `-v` accepted) and hands the
//! command to bashkit's interpreter with the exact duration, through the
//! same execution plan. There are no processes to signal, so on expiry the
//! status is 124 (137 with `--preserve-status`), as bashkit reports it.

use bashkit::{Builtin, BuiltinContext, ExecResult, ExecutionPlan, SubCommand, async_trait};
use std::time::Duration;

pub(crate) struct Timeout;

/// What stands for "no limit" (`0`, `inf`): longer than any exec may run.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Exit status of `timeout` itself failing (GNU: 125).
const EXIT_FAILURE: i32 = 125;

/// A parsed command line.
#[derive(Debug, PartialEq)]
struct Request {
    duration: Duration,
    preserve_status: bool,
    command: Vec<String>,
}

/// A duration operand (`10`, `1.5m`, `2h`, `1d`, `inf`), or `None`.
fn duration(text: &str) -> Option<Duration> {
    let (number, scale) = match text.as_bytes().last() {
        Some(b's') => (&text[..text.len() - 1], 1.0),
        Some(b'm') => (&text[..text.len() - 1], 60.0),
        Some(b'h') => (&text[..text.len() - 1], 3600.0),
        Some(b'd') => (&text[..text.len() - 1], 86_400.0),
        _ => (text, 1.0),
    };
    if number.starts_with(['-', '+']) {
        return None;
    }
    let seconds: f64 = number.parse().ok()?;
    if seconds.is_nan() {
        return None;
    }
    let seconds = seconds * scale;
    if seconds == 0.0 {
        return Some(FOREVER);
    }
    Some(Duration::try_from_secs_f64(seconds).map_or(FOREVER, |d| d.min(FOREVER)))
}

/// Parses `timeout`'s arguments; `Err` is the diagnostic (without the
/// `timeout: ` prefix).
fn parse(args: &[String]) -> Result<Request, String> {
    let mut preserve_status = false;
    let mut it = args.iter().peekable();
    while let Some(arg) = it.peek() {
        let arg = arg.as_str();
        if arg == "--" {
            it.next();
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        it.next();
        match arg {
            "--preserve-status" => preserve_status = true,
            "--foreground" | "-v" | "--verbose" => {}
            "-s" | "--signal" | "-k" | "--kill-after" => {
                let Some(value) = it.next() else {
                    return Err(format!("option requires an argument -- '{}'", &arg[1..]));
                };
                if arg.ends_with('k') || arg.ends_with("after") {
                    duration(value).ok_or_else(|| format!("invalid time interval '{value}'"))?;
                }
            }
            a if a.starts_with("--signal=") => {}
            a if a.starts_with("--kill-after=") => {
                let value = &a["--kill-after=".len()..];
                duration(value).ok_or_else(|| format!("invalid time interval '{value}'"))?;
            }
            a if a.starts_with("-s") => {}
            a if a.starts_with("-k") => {
                duration(&a[2..]).ok_or_else(|| format!("invalid time interval '{}'", &a[2..]))?;
            }
            a if a.starts_with("--") => return Err(format!("unrecognized option '{a}'")),
            a => return Err(format!("invalid option -- '{}'", &a[1..2])),
        }
    }
    let Some(limit) = it.next() else {
        return Err("missing operand".into());
    };
    let duration = duration(limit).ok_or_else(|| format!("invalid time interval '{limit}'"))?;
    let command: Vec<String> = it.cloned().collect();
    if command.is_empty() {
        return Err("missing operand".into());
    }
    Ok(Request {
        duration,
        preserve_status,
        command,
    })
}

#[async_trait]
impl Builtin for Timeout {
    async fn execution_plan(
        &self,
        ctx: &BuiltinContext<'_>,
    ) -> bashkit::Result<Option<ExecutionPlan>> {
        let Ok(request) = parse(ctx.args) else {
            return Ok(None);
        };
        let mut command = request.command.into_iter();
        let name = command.next().unwrap_or_default();
        Ok(Some(ExecutionPlan::Timeout {
            duration: request.duration,
            preserve_status: request.preserve_status,
            command: SubCommand {
                name,
                args: command.collect(),
                stdin: ctx.stdin.cloned(),
                assignments: Vec::new(),
            },
        }))
    }

    /// Reached only when the arguments are wrong.
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let message = match parse(ctx.args) {
            Err(message) => message,
            Ok(_) => "cannot run the command".into(),
        };
        Ok(ExecResult::err(
            format!("timeout: {message}\nTry 'timeout --help' for more information.\n"),
            EXIT_FAILURE,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn durations_have_no_ceiling() {
        assert_eq!(duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(duration("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(duration("0"), Some(FOREVER));
        assert_eq!(duration("inf"), Some(FOREVER));
        assert_eq!(duration("1e9d"), Some(FOREVER));
        assert_eq!(duration("-1"), None);
        assert_eq!(duration("x"), None);
        assert_eq!(duration("nan"), None);
    }

    #[test]
    fn options_as_coreutils_reads_them() {
        assert_eq!(
            parse(&words("-s KILL -k 5 --preserve-status 6m make -j2")),
            Ok(Request {
                duration: Duration::from_secs(360),
                preserve_status: true,
                command: words("make -j2"),
            })
        );
        assert_eq!(
            parse(&words("--signal=INT -k1s -- 3 sleep 1")).map(|r| r.command),
            Ok(words("sleep 1"))
        );
        assert_eq!(parse(&words("5")), Err("missing operand".into()));
        assert_eq!(
            parse(&words("soon sleep 1")),
            Err("invalid time interval 'soon'".into())
        );
        assert_eq!(
            parse(&words("-x 1 true")),
            Err("invalid option -- 'x'".into())
        );
    }
}
