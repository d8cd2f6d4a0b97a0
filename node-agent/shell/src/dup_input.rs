//! `N<&WORD` with a target that is not written as digits.
//!
//! bashkit's lexer reads the target of `N<&` (an input duplication with an
//! explicit descriptor) only as digits: `exec 9<&${COPROC[0]}` becomes
//! `exec 9<&0` followed by the word `${COPROC[0]}`, so `exec` runs the
//! coprocess's descriptor number as a command (`63: command not found`).
//! Without the descriptor (`<&$fd`) and for `N>&$fd` it reads the word.
//!
//! So the runtime writes the forms it can before the script runs:
//!
//! - `exec` with only redirections (`exec 9<&${COPROC[0]}`, the usual way to
//!   keep a coprocess's output): `eval 'exec' '9<&'${COPROC[0]}`, where the
//!   target is expanded first and `eval` reads digits;
//! - `0<&WORD`: `<&WORD`, the same in bash.
//!
//! Any other command with `N<&WORD` (N not 0) is refused ([`mend`]).
//!
//! The same mend is applied to scripts the script itself runs: an `eval`
//! string, `bash -c STRING`, and a file run by `bash FILE`, `sh FILE`,
//! `source FILE` or `. FILE` ([`Loads`]); there a form that cannot be
//! mended is left as bashkit runs it.

use crate::refuse::Refusal;
use bashkit::hooks::{HookAction, Interceptor, ToolEvent};
use bashkit::parser::{Lexer, Parser, SpannedToken};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

/// `script` with every `N<&WORD` written so bashkit reads it as bash does:
/// `Ok(None)` when there is none (or the script does not parse, or a
/// here-document body holds what looks like one, which the token scan
/// cannot tell apart), `Ok(Some(text))` with the new text (same lines), or
/// the refusal for a form that cannot be written so.
pub(crate) fn mend(
    script: &str,
    max_depth: usize,
    max_fuel: usize,
) -> Result<Option<String>, Refusal> {
    if !script.contains("<&") {
        return Ok(None);
    }
    let tokens = tokens(script);
    let text = |t: &SpannedToken| &script[t.span.start.offset..t.span.end.offset];
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut written_zero = 0;
    for (i, token) in tokens.iter().enumerate() {
        let Some(fd) = dup_in_fd(token) else {
            continue;
        };
        if text(token).ends_with('0') {
            // `N<&0` as written: the AST count below sees it too.
            written_zero += 1;
            continue;
        }
        if !text(token).ends_with('&') {
            continue;
        }
        let Some(target) = tokens.get(i + 1).filter(|t| kind(t).ends_with("Word")) else {
            continue;
        };
        let exec = i
            .checked_sub(1)
            .map(|k| &tokens[k])
            .filter(|t| kind(t) == "Word" && text(t) == "exec");
        let ends = tokens.get(i + 2).is_none_or(|t| {
            matches!(
                kind(t).as_str(),
                "Newline" | "Semicolon" | "And" | "Or" | "Background" | "RightBrace"
            )
        });
        if let (Some(exec), true) = (exec, ends) {
            edits.push((
                exec.span.start.offset,
                target.span.end.offset,
                format!("eval 'exec' '{fd}<&'{}", text(target)),
            ));
        } else if fd == 0 {
            edits.push((
                token.span.start.offset,
                token.span.end.offset,
                "<&".to_string(),
            ));
        } else {
            return Err(Refusal {
                construct: format!("`{fd}<&{}`", text(target)),
                reason: "bashkit reads the target of `N<&` only as digits and runs this word as \
                         a command; `exec N<&WORD` alone on its line, or `<&WORD` on fd 0, runs",
            });
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }
    // Each edit must be a redirection the parser saw: one inside a
    // here-document body is text, and the scan above cannot tell.
    let Ok(ast) = Parser::with_limits(script, max_depth, max_fuel).parse() else {
        return Ok(None);
    };
    if input_dups_of_zero(&format!("{ast:?}")) != edits.len() + written_zero {
        return Ok(None);
    }
    let mut out = String::with_capacity(script.len() + 32 * edits.len());
    let mut at = 0;
    for (start, end, replacement) in edits {
        out.push_str(&script[at..start]);
        out.push_str(&replacement);
        at = end;
    }
    out.push_str(&script[at..]);
    Ok(Some(out))
}

fn tokens(script: &str) -> Vec<SpannedToken> {
    let mut lexer = Lexer::new(script);
    let mut tokens = Vec::new();
    while let Some(token) = lexer.next_spanned_token() {
        tokens.push(token);
    }
    tokens
}

/// The token kind as bashkit's `Debug` names it (the type is not exported).
fn kind(t: &SpannedToken) -> String {
    let debug = format!("{:?}", t.token);
    match debug.find('(') {
        Some(at) => debug[..at].to_string(),
        None => debug,
    }
}

/// The descriptor of an `N<&M` token (`DupFdIn(N, M)`).
fn dup_in_fd(t: &SpannedToken) -> Option<i32> {
    let debug = format!("{:?}", t.token);
    let inner = debug.strip_prefix("DupFdIn(")?.strip_suffix(')')?;
    inner.split(',').next()?.trim().parse().ok()
}

/// How many input duplications onto a written descriptor with the literal
/// target `0` the printed syntax tree holds.
fn input_dups_of_zero(ast: &str) -> usize {
    ast.match_indices("kind: DupInput, target: Word { parts: [Literal(\"0\")]")
        .filter(|(at, _)| ast[..*at].ends_with("fd_var: None, ") && fd_written(&ast[..*at]))
        .count()
}

/// Whether the redirection printed just before the end of `before` has
/// `fd: Some(_)`.
fn fd_written(before: &str) -> bool {
    before
        .rfind("fd: ")
        .is_some_and(|at| before[at..].starts_with("fd: Some("))
}

/// Script loads the script itself makes, mended as the top-level script
/// is: shared by the `before_tool` hook ([`Loads::hook`]), which sees
/// `bash FILE`/`source FILE` just before the interpreter reads FILE, and
/// the filesystem ([`Loads::mend_read`]), which serves that read.
#[derive(Clone)]
pub(crate) struct Loads {
    /// The file name of the script the next read loads, set by the hook
    /// for one command.
    pending: Arc<Mutex<Option<String>>>,
    max_depth: usize,
    max_fuel: usize,
}

impl Loads {
    pub(crate) fn new(max_depth: usize, max_fuel: usize) -> Self {
        Self {
            pending: Arc::default(),
            max_depth,
            max_fuel,
        }
    }

    /// Mends `eval` strings and `bash -c` strings in place and notes the
    /// file a `bash`/`sh`/`source`/`.` command is about to read.
    pub(crate) fn hook(&self) -> Interceptor<ToolEvent> {
        let loads = self.clone();
        Box::new(move |mut event| {
            // Whatever was pending belonged to an earlier command.
            let mut pending = None;
            match event.name.as_str() {
                "eval" if event.args.iter().any(|a| a.contains("<&")) => {
                    if let Some(text) = loads.mended(&event.args.join(" ")) {
                        event.args = vec![text];
                    }
                }
                "bash" | "sh" => match shell_operand(&event.args) {
                    Some(Operand::Command(at)) => {
                        if let Some(text) = loads.mended(&event.args[at]) {
                            event.args[at] = text;
                        }
                    }
                    Some(Operand::File(at)) => pending = file_name(&event.args[at]),
                    None => {}
                },
                "source" | "." => {
                    pending = event.args.first().and_then(|a| file_name(a));
                }
                _ => {}
            }
            *loads.pending.lock() = pending;
            HookAction::Continue(event)
        })
    }

    /// `content` as the script should read it, when `path` is the file the
    /// pending load names (the pending load is then done).
    pub(crate) fn mend_read(&self, path: &Path, content: Vec<u8>) -> Vec<u8> {
        let mut pending = self.pending.lock();
        let Some(name) = pending.as_deref() else {
            return content;
        };
        if path.file_name().and_then(|n| n.to_str()) != Some(name) {
            return content;
        }
        *pending = None;
        drop(pending);
        match std::str::from_utf8(&content)
            .ok()
            .and_then(|text| self.mended(text))
        {
            Some(text) => text.into_bytes(),
            None => content,
        }
    }

    fn mended(&self, script: &str) -> Option<String> {
        mend(script, self.max_depth, self.max_fuel).ok().flatten()
    }
}

/// What `bash ARGS` runs: the `-c` string or a script file (by index).
enum Operand {
    Command(usize),
    File(usize),
}

/// The operand of `bash`/`sh` options: options start with `-` or `+`,
/// `-o`/`-O`/`+o`/`+O` take the next word, `--` ends them; with `-c` the
/// first operand is the command string, else it names the script file.
fn shell_operand(args: &[String]) -> Option<Operand> {
    let mut command = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" || arg == "-" {
            i += 1;
            break;
        }
        if !(arg.starts_with('-') || arg.starts_with('+')) || arg.len() < 2 || arg.starts_with("--")
        {
            if arg.starts_with("--") {
                i += 1;
                continue;
            }
            break;
        }
        let flags = &arg[1..];
        if arg.starts_with('-') && flags.contains('s') {
            // The script is stdin; the operands are its arguments.
            return None;
        }
        command |= arg.starts_with('-') && flags.contains('c');
        if flags.contains('o') || flags.contains('O') {
            i += 1;
        }
        i += 1;
    }
    if i >= args.len() {
        return None;
    }
    Some(if command {
        Operand::Command(i)
    } else {
        Operand::File(i)
    })
}

/// The last component of a script path as the filesystem will see it.
fn file_name(arg: &str) -> Option<String> {
    Path::new(arg)
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mended(script: &str) -> Result<Option<String>, Refusal> {
        mend(script, 100, 100_000)
    }

    #[test]
    fn exec_with_a_computed_input_target_is_run_through_eval() {
        assert_eq!(
            mended("coproc { echo hi; }\nexec 9<&${COPROC[0]}\ncat <&9\n").unwrap(),
            Some("coproc { echo hi; }\neval 'exec' '9<&'${COPROC[0]}\ncat <&9\n".into())
        );
    }

    #[test]
    fn fd_zero_loses_its_number() {
        assert_eq!(
            mended("read -r l 0<&$fd; echo $l").unwrap(),
            Some("read -r l <&$fd; echo $l".into())
        );
    }

    #[test]
    fn other_commands_are_refused() {
        let refusal = mended("cat 3<&$fd").unwrap_err();
        assert_eq!(refusal.construct, "`3<&$fd`");
    }

    #[test]
    fn written_digits_and_other_forms_are_left_alone() {
        assert_eq!(mended("exec 9<&3; cat <&9; exec 9<&-").unwrap(), None);
        assert_eq!(mended("exec 9>&$fd; cat <&$fd").unwrap(), None);
        assert_eq!(mended("echo '9<&$x'").unwrap(), None);
    }

    #[test]
    fn here_document_bodies_are_text() {
        let script = "cat <<EOF\nexec 9<&$x\nEOF\nexec 8<&0\n";
        assert_eq!(mended(script).unwrap(), None);
    }

    #[test]
    fn the_operand_of_bash_is_found_past_its_options() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches!(
            shell_operand(&args(&["-e", "-c", "x", "n"])),
            Some(Operand::Command(2))
        ));
        assert!(matches!(
            shell_operand(&args(&["-o", "errexit", "f.sh"])),
            Some(Operand::File(2))
        ));
        assert!(matches!(
            shell_operand(&args(&["--norc", "./t.sh", "a"])),
            Some(Operand::File(1))
        ));
        assert!(shell_operand(&args(&["-s"])).is_none());
        assert!(shell_operand(&args(&["-s", "a1"])).is_none());
    }
}
