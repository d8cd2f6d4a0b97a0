//! `caller [EXPR]`: where the current function (or sourced file) was
//! called from, read from the interpreter's own call-stack arrays.
//!
//! bashkit's `caller` prints line 1 and `main` for every frame. bashkit does
//! keep `BASH_LINENO`, `FUNCNAME` and `BASH_SOURCE` as bash does (index 0 the
//! innermost frame), but a registered command sees only scalar variables, so
//! this one answers through an `eval` the interpreter runs in the caller's
//! context ([`ExecutionPlan::Batch`]), which reads them as bash's `caller`
//! does:
//!
//! - no operand: `${BASH_LINENO[0]} ${BASH_SOURCE[1]}` (`NULL` for an unset
//!   source), status 1 with no output where `BASH_LINENO` is unset (the top
//!   level of a script);
//! - `N`: `${BASH_LINENO[N]} ${FUNCNAME[N+1]} ${BASH_SOURCE[N+1]}`, status 1
//!   with no output when a frame that deep does not exist;
//! - an operand that is not a number: `caller: x: invalid number` and the
//!   usage line, status 2 (`-x`: `invalid option`); at the top level,
//!   status 1 with no message, as for any operand.
//!
//! A function defined at the top level of the script has an empty
//! `BASH_SOURCE` entry in bashkit; `caller` prints `environment` there, as
//! `bash -c` does (the runtime runs scripts as `bash -c` does).
//!
//! Afterwards `$_` is the last operand (or `caller`), as in bash. The `eval`
//! is a command of its own to `set -x` (traced) and to a `DEBUG` trap
//! (which runs before it).

use async_trait::async_trait;
use bashkit::{Builtin, BuiltinContext, ExecResult, ExecutionPlan, SubCommand};

/// `caller`, registered in place of bashkit's.
pub(crate) struct Caller;

/// What the operands ask for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// No operand: line and file of the current call.
    Current,
    /// `caller N`.
    Frame(i64),
    /// Not a number: the message and status 2.
    Usage(String),
}

fn request(args: &[String]) -> Request {
    let mut args = args.iter().map(String::as_str).peekable();
    if args.peek() == Some(&"--") {
        args.next();
    }
    let Some(operand) = args.next() else {
        return Request::Current;
    };
    if operand.starts_with('-') && operand.len() > 1 {
        return Request::Usage(format!("caller: {operand}: invalid option\n{USAGE}"));
    }
    match number(operand) {
        Some(n) => Request::Frame(n),
        None => Request::Usage(format!("caller: {operand}: invalid number\n{USAGE}")),
    }
}

const USAGE: &str = "caller: usage: caller [expr]\n";

/// A decimal number with optional sign and surrounding blanks, as bash
/// reads a number operand.
fn number(s: &str) -> Option<i64> {
    let t = s.trim_matches([' ', '\t', '\n']);
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// `s` single-quoted for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The script the interpreter runs for `request`; `last` is what `$_`
/// must hold afterwards. Its last command is a `test` whose last word is
/// `last`, which sets `$_` and the status at once.
fn script(request: &Request, last: &str) -> String {
    let last = quote(last);
    let ok = format!("test {last} = {last}");
    let failed = format!("test x{last} = {last}");
    match request {
        // Unset: `NULL`; empty (a top-level function): `environment`.
        Request::Current => format!(
            "if [[ ${{BASH_LINENO[0]+set}} ]]; then printf '%s %s\\n' \"${{BASH_LINENO[0]}}\" \
             \"${{BASH_SOURCE[1]:-${{BASH_SOURCE[1]+environment}}${{BASH_SOURCE[1]-NULL}}}}\"; \
             {ok}; else {failed}; fi"
        ),
        Request::Frame(n) if *n >= 0 => {
            let up = n + 1;
            format!(
                "if [[ ${{BASH_LINENO[{n}]+a}}${{FUNCNAME[{up}]+b}}${{BASH_SOURCE[{up}]+c}} == abc ]]; \
                 then printf '%s %s %s\\n' \"${{BASH_LINENO[{n}]}}\" \"${{FUNCNAME[{up}]}}\" \
                 \"${{BASH_SOURCE[{up}]:-environment}}\"; {ok}; else {failed}; fi"
            )
        }
        Request::Frame(_) => failed,
        // The stack is looked at first: at the top level a bad operand
        // fails quietly. `test` with three words and no operator between
        // them is its syntax error, status 2.
        Request::Usage(message) => format!(
            "if [[ ${{BASH_LINENO[0]+set}} ]]; then printf %s {} >&2; \
             test x x {last} 2>/dev/null; else {failed}; fi",
            quote(message)
        ),
    }
}

#[async_trait]
impl Builtin for Caller {
    async fn execution_plan(
        &self,
        ctx: &BuiltinContext<'_>,
    ) -> bashkit::Result<Option<ExecutionPlan>> {
        let last = ctx.args.last().map_or("caller", String::as_str);
        Ok(Some(ExecutionPlan::Batch {
            commands: vec![SubCommand {
                name: "eval".into(),
                args: vec![script(&request(ctx.args), last)],
                stdin: None,
                assignments: Vec::new(),
            }],
        }))
    }

    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        Ok(match request(ctx.args) {
            Request::Usage(message) => ExecResult::err(message, 2),
            // Only reached if the plan was not taken.
            _ => ExecResult::with_code(String::new(), 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn operands_are_read_as_bash_reads_them() {
        assert_eq!(request(&args(&[])), Request::Current);
        assert_eq!(request(&args(&["0"])), Request::Frame(0));
        assert_eq!(request(&args(&[" 2 "])), Request::Frame(2));
        assert_eq!(request(&args(&["--", "1", "extra"])), Request::Frame(1));
        assert!(
            matches!(request(&args(&["x"])), Request::Usage(m) if m.starts_with("caller: x: invalid number\n"))
        );
        assert!(
            matches!(request(&args(&["-1"])), Request::Usage(m) if m.contains("invalid option"))
        );
        assert!(matches!(request(&args(&["1+1"])), Request::Usage(_)));
    }

    #[test]
    fn a_negative_frame_fails_without_reading_the_stack() {
        assert_eq!(script(&Request::Frame(-1), "x"), "test x'x' = 'x'");
    }
}
