//! Commands that never read stdin, given an empty one in an exec with stdin.
//!
//! bashkit reads the runtime's stdin pipe (the `stdin` module) to its end,
//! into memory, for any command it does not know to leave stdin alone:
//! `mkdir -p d && tar x -C d` gathered the whole archive for `mkdir`, so
//! `tar` got it from memory (and a large one failed at the memory budget),
//! where `cd d && tar x` streams it. A command the runtime registers gets
//! the pipe whether or not it reads it, so `ls; cat` left `cat` nothing.
//! bashkit leaves the pipe alone for a command with its own input
//! redirection, so each use of a command of [`NO_STDIN`] is given one:
//! ` </dev/null` is written after it ([`rewrite`]), on the same line, so
//! line numbers do not move.
//!
//! Only plain uses are rewritten: the name written literally, no input
//! redirection or here-document of its own, not the name of a function the
//! script defines, outside any `$(...)` (whose commands the syntax tree
//! places in text of their own). The result is parsed again and must hold
//! the same commands, each rewritten one with the one added redirection,
//! or the script runs as written.

use bashkit::parser::{Command, CompoundCommand, Parser, RedirectKind, SimpleCommand, WordPart};

/// Commands that never read stdin, whatever their arguments.
pub(crate) const NO_STDIN: &[&str] = &[
    "mkdir", "rmdir", "rm", "cp", "mv", "touch", "ln", "chmod", "chown", "chgrp", "ls", "pwd",
    "basename", "dirname", "realpath", "readlink", "stat", "du", "df", "find", "mktemp",
    "truncate", "uname", "whoami", "hostname", "id", "date", "seq", "yes", "mkfifo", "tree",
    "type", "shopt", "alias", "unalias", "trap", "umask", "pushd", "popd", "dirs", "hash", "let",
    "readonly", "typeset", "kill", "which", "nproc", "sleep",
];

/// Files that are the process's stdin: a command given one reads it.
const STDIN_FILES: &[&str] = &["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];

/// `find` actions that run a command, which inherits stdin (`-ok` reads
/// its answers from it).
const FIND_RUNS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir"];

/// The redirection written after each rewritten command.
const EMPTY_STDIN: &str = " </dev/null";

/// `script` with ` </dev/null` after every plain use of a command of
/// [`NO_STDIN`], or `None` when there is none or the rewrite cannot be
/// checked exact. `max_depth`, `max_fuel`: the run's parser limits.
pub(crate) fn rewrite(script: &str, max_depth: usize, max_fuel: usize) -> Option<String> {
    let parse = |text: &str| Parser::with_limits(text, max_depth, max_fuel).parse().ok();
    let ast = parse(script)?;
    let mut before = Walk {
        script,
        ..Walk::default()
    };
    before.commands(&ast.commands);
    before
        .edits
        .retain(|(_, name)| !before.functions.contains(name));
    if before.edits.is_empty() {
        return None;
    }
    let mut at: Vec<usize> = before.edits.iter().map(|(at, _)| *at).collect();
    at.sort_unstable();
    let mut out = String::with_capacity(script.len() + at.len() * EMPTY_STDIN.len());
    let mut from = 0;
    for end in &at {
        out.push_str(script.get(from..*end)?);
        out.push_str(EMPTY_STDIN);
        from = *end;
    }
    out.push_str(script.get(from..)?);
    // Checked: the same commands, each rewritten one with one more
    // redirection, an input from /dev/null.
    let mut after = Walk {
        script: &out,
        ..Walk::default()
    };
    after.commands(&parse(&out)?.commands);
    let rewritten: Vec<String> = before.edits.iter().map(|(_, n)| n.clone()).collect();
    let mut expected = before.shapes.clone();
    let mut k = 0;
    for shape in &mut expected {
        if k < rewritten.len() && shape.plain && shape.name == rewritten[k] {
            shape.redirects += 1;
            shape.plain = false;
            k += 1;
        }
    }
    let same = k == rewritten.len()
        && expected.len() == after.shapes.len()
        && expected
            .iter()
            .zip(&after.shapes)
            .all(|(e, a)| e.name == a.name && e.args == a.args && e.redirects == a.redirects);
    same.then_some(out)
}

/// What the check compares of one simple command.
#[derive(Debug, Clone)]
struct Shape {
    name: String,
    /// Each argument's literal text, `None` where it is not literal.
    args: Vec<Option<String>>,
    redirects: usize,
    /// Rewritable ([`Walk::plain`]).
    plain: bool,
}

#[derive(Default)]
struct Walk<'a> {
    /// The text walked, whose offsets the syntax tree gives.
    script: &'a str,
    /// Where to write the redirection, and the command's name.
    edits: Vec<(usize, String)>,
    shapes: Vec<Shape>,
    functions: Vec<String>,
}

impl Walk<'_> {
    fn commands(&mut self, commands: &[Command]) {
        for command in commands {
            self.command(command);
        }
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Pipeline(pipeline) => self.commands(&pipeline.commands),
            Command::List(list) => {
                self.command(&list.first);
                for (_, next) in &list.rest {
                    self.command(next);
                }
            }
            Command::Compound(compound, _) => self.compound(compound),
            Command::Function(function) => {
                self.functions.push(function.name.clone());
                self.command(&function.body);
            }
        }
    }

    fn simple(&mut self, simple: &SimpleCommand) {
        let name = match simple.name.parts.as_slice() {
            [WordPart::Literal(name)] => name.clone(),
            _ => String::new(),
        };
        let end = command_end(
            self.script,
            simple.span.start.offset,
            simple.span.end.offset,
        );
        let plain = Self::plain(simple, &name) && end.is_some();
        if let (true, Some(end)) = (plain, end) {
            self.edits.push((end, name.clone()));
        }
        let literal = |w: &bashkit::parser::Word| match w.parts.as_slice() {
            [WordPart::Literal(text)] => Some(text.clone()),
            _ => None,
        };
        self.shapes.push(Shape {
            name,
            args: simple.args.iter().map(literal).collect(),
            redirects: simple.redirects.len(),
            plain,
        });
    }

    /// A use of a [`NO_STDIN`] command with no input of its own, naming
    /// no stdin as a file (`cp /dev/stdin f` copies the input) and, for
    /// `find`, running nothing that may read it (`-exec`, `-ok`, ...).
    fn plain(simple: &SimpleCommand, name: &str) -> bool {
        let reads_stdin = simple.args.iter().any(|w| {
            w.parts.iter().any(|part| match part {
                WordPart::Literal(text) => {
                    STDIN_FILES.iter().any(|f| text.contains(f))
                        || (name == "find" && FIND_RUNS.contains(&text.as_str()))
                }
                _ => false,
            })
        });
        NO_STDIN.contains(&name)
            && !reads_stdin
            && !simple.redirects.iter().any(|r| {
                matches!(
                    r.kind,
                    RedirectKind::HereDoc | RedirectKind::HereDocStrip | RedirectKind::HereString
                ) || (r.fd.unwrap_or(0) == 0
                    && matches!(
                        r.kind,
                        RedirectKind::Input | RedirectKind::DupInput | RedirectKind::ReadWrite
                    ))
            })
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::If(c) => {
                self.commands(&c.condition);
                self.commands(&c.then_branch);
                for (condition, branch) in &c.elif_branches {
                    self.commands(condition);
                    self.commands(branch);
                }
                if let Some(branch) = &c.else_branch {
                    self.commands(branch);
                }
            }
            CompoundCommand::For(c) => self.commands(&c.body),
            CompoundCommand::ArithmeticFor(c) => self.commands(&c.body),
            CompoundCommand::While(c) => {
                self.commands(&c.condition);
                self.commands(&c.body);
            }
            CompoundCommand::Until(c) => {
                self.commands(&c.condition);
                self.commands(&c.body);
            }
            CompoundCommand::Case(c) => {
                for item in &c.cases {
                    self.commands(&item.commands);
                }
            }
            CompoundCommand::Select(c) => self.commands(&c.body),
            CompoundCommand::Subshell(commands) | CompoundCommand::BraceGroup(commands) => {
                self.commands(commands)
            }
            CompoundCommand::Time(t) => {
                if let Some(command) = &t.command {
                    self.command(command);
                }
            }
            CompoundCommand::Coproc(c) => self.command(&c.body),
            CompoundCommand::Arithmetic(_) | CompoundCommand::Conditional(_) => {}
        }
    }
}

/// Where the command whose span is `start..end` of `script` ends: the
/// parser's span runs on over the operator that ended it (`mkdir d &&`),
/// so that, spaces and a closing `)`/`}` are left out. `None` when the
/// span is not text of `script`.
fn command_end(script: &str, start: usize, end: usize) -> Option<usize> {
    const ENDS: &[&str] = &[";;&", ";;", ";&", "&&", "||", "|&", ";", "|", "&", ")", "}"];
    let mut text = script.get(start..end)?.trim_end();
    while let Some(op) = ENDS.iter().find(|op| text.ends_with(**op)) {
        let rest = &text[..text.len() - op.len()];
        if rest.ends_with('\\') {
            break;
        }
        text = rest.trim_end();
    }
    Some(start + text.len())
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    fn rewritten(script: &str) -> Option<String> {
        rewrite(script, 100, 100_000)
    }

    #[test]
    fn plain_uses_get_an_empty_stdin_on_their_own_line() {
        assert_eq!(
            rewritten("mkdir -p d && tar x -C d").as_deref(),
            Some("mkdir -p d </dev/null && tar x -C d")
        );
        assert_eq!(
            rewritten("if true; then\n  rm -f a 2>/dev/null\nfi\nls | cat").as_deref(),
            Some("if true; then\n  rm -f a 2>/dev/null </dev/null\nfi\nls </dev/null | cat")
        );
        assert_eq!(
            rewritten("mkdir -p d && tar x -C d && stat -c %s d/big.bin").as_deref(),
            Some("mkdir -p d </dev/null && tar x -C d && stat -c %s d/big.bin </dev/null")
        );
        // Nothing to do, input of their own, a function of the script.
        assert_eq!(rewritten("tar x; cat"), None);
        assert_eq!(rewritten("mkdir d <f; cp a b <<EOF\nx\nEOF"), None);
        assert_eq!(rewritten("rm() { cat; }; rm x"), None);
        // Stdin named as a file, and find running commands: as written.
        assert_eq!(rewritten("cp /dev/stdin x; cat x"), None);
        assert_eq!(rewritten("cp /dev/fd/0 x"), None);
        assert_eq!(rewritten("find . -ok rm {} \\;"), None);
        assert_eq!(
            rewritten("find . -name a; cp /proc/self/fd/0 y").as_deref(),
            Some("find . -name a </dev/null; cp /proc/self/fd/0 y")
        );
        // Inside `$(...)`: left as written.
        assert_eq!(
            rewritten("x=$(mkdir d); mkdir e").as_deref(),
            Some("x=$(mkdir d); mkdir e </dev/null")
        );
        assert_eq!(
            rewritten("{ mkdir d; } && (touch d/f) & wait").as_deref(),
            Some("{ mkdir d </dev/null; } && (touch d/f </dev/null) & wait")
        );
    }
}
