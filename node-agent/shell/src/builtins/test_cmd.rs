//! `test` and `[`, answering file questions from the real file.
//!
//! bashkit's `test` reported sockets and block devices as never present
//! (`-S`, `-b` always false), `-c` only for the named `/dev` paths, device
//! nodes as FIFOs (`-p`), and took `-e ''` for the working directory. This
//! one asks the namespace (bashkit's filesystem, which follows links the
//! way `stat(2)` and `lstat(2)` do) for kind, mode and times, and the
//! engine behind `/workspace` for what bashkit's metadata cannot carry:
//! the exact kind of a special file (`p`, `c`, `b`, `s`), the inode for
//! `-ef` and the access time for `-N`.
//!
//! `-v NAME` and `-o OPTION` need the interpreter's variables and options,
//! which a registered command cannot see. An expression holding one of
//! them is handed back to the interpreter as an `eval` of an equivalent
//! `[[ ]]` in which every other primary is already decided here.

use super::test_expr::{Expr, SyntaxError, parse};
use super::workspace::{engine_path, resolve};
use agentcomputer_fs::{FileKind, Fs, ROOT_INO};
use bashkit::{
    Builtin, BuiltinContext, ExecResult, ExecutionPlan, FileType, SubCommand, async_trait,
};
use bashkit::{normalize_path, vfs_join};
use std::path::Path;

/// `test` (`bracket == false`) or `[` (`bracket == true`, wants a closing `]`).
pub(crate) struct Test {
    engine: Fs,
    bracket: bool,
}

impl Test {
    pub(crate) fn new(engine: Fs, bracket: bool) -> Self {
        Self { engine, bracket }
    }

    fn name(&self) -> &'static str {
        if self.bracket { "[" } else { "test" }
    }

    /// The expression's words (without `[`'s closing `]`); `None` for a
    /// `[` without one.
    fn words<'a>(&self, args: &'a [String]) -> Option<&'a [String]> {
        if !self.bracket {
            return Some(args);
        }
        match args.split_last() {
            Some((last, rest)) if last == "]" => Some(rest),
            _ => None,
        }
    }

    fn syntax(&self, e: SyntaxError) -> ExecResult {
        ExecResult::err(format!("{}: {}\n", self.name(), e.0), 2)
    }
}

/// What the tests ask about one path.
struct Info {
    /// `ls -l` type letter: `-`, `d`, `l`, `p`, `c`, `b`, `s`.
    kind: char,
    /// Permission bits with set-user-ID, set-group-ID and sticky (`0o7777`).
    perm: u32,
    size: u64,
    /// Modification time, (seconds, nanoseconds) since the epoch.
    mtime: (i64, u32),
    /// Access time, known for `/workspace` files only.
    atime: Option<(i64, u32)>,
    /// Inode number, known for `/workspace` files only.
    ino: Option<u64>,
}

fn kind_letter(kind: FileKind) -> char {
    match kind {
        FileKind::RegularFile => '-',
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::NamedPipe => 'p',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Socket => 's',
    }
}

/// Links followed before a path counts as a loop (Linux's `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;

/// The scratch tree's device files (bashkit's), all character devices.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

impl Test {
    /// `stat(2)` (`follow`) or `lstat(2)` of `word` at `ctx.cwd`; `None`
    /// when it does not exist (or is empty, or names a non-directory with a
    /// trailing slash).
    async fn info(&self, ctx: &BuiltinContext<'_>, word: &str, follow: bool) -> Option<Info> {
        if word.is_empty() {
            return None;
        }
        let mut path = resolve(ctx.cwd, word);
        // Follow links here, hop by hop, so that the engine is asked about
        // the final file: it would resolve an absolute link target inside
        // the computer, not in the shell's namespace. A loop is ELOOP: `None`.
        let mut meta = ctx.fs.lstat(&path).await.ok()?;
        let mut hops = 0;
        while follow && meta.file_type == FileType::Symlink {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return None;
            }
            let target = ctx.fs.read_link(&path).await.ok()?;
            let base = path.parent().unwrap_or(Path::new("/")).to_path_buf();
            path = normalize_path(&vfs_join(&base, &target));
            meta = ctx.fs.lstat(&path).await.ok()?;
        }
        let mut info = Info {
            kind: match meta.file_type {
                FileType::File => '-',
                FileType::Directory => 'd',
                FileType::Symlink => 'l',
                FileType::Fifo => 'p',
            },
            perm: meta.mode & 0o7777,
            size: meta.size,
            mtime: match meta.modified.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
                Err(e) => (-(e.duration().as_secs() as i64), 0),
            },
            atime: None,
            ino: None,
        };
        if let Some(rel) = engine_path(&path)
            && let Ok(attr) = self.engine.resolve(ROOT_INO, &rel, false)
        {
            info.kind = kind_letter(attr.kind);
            info.perm = attr.perm;
            info.size = attr.size;
            info.mtime = (attr.mtime.sec, attr.mtime.nsec);
            info.atime = Some((attr.atime.sec, attr.atime.nsec));
            info.ino = Some(attr.ino);
        } else if DEVICES.contains(&path.to_str().unwrap_or("")) {
            info.kind = 'c';
        }
        if word.ends_with('/') && info.kind != 'd' {
            return None;
        }
        Some(info)
    }

    /// A unary primary other than `-v` and `-o`.
    async fn unary(&self, ctx: &BuiltinContext<'_>, op: &str, arg: &str) -> bool {
        let kind_is = |want: char| async move {
            self.info(ctx, arg, true)
                .await
                .is_some_and(|i| i.kind == want)
        };
        let perm = |bits: u32| async move {
            self.info(ctx, arg, true)
                .await
                .is_some_and(|i| i.perm & bits != 0)
        };
        match op {
            "-z" => arg.is_empty(),
            "-n" => !arg.is_empty(),
            // The shell's user owns its files and may read and write them
            // all, as bashkit's own tests answer.
            "-e" | "-a" | "-r" | "-w" | "-O" | "-G" => self.info(ctx, arg, true).await.is_some(),
            "-x" => self
                .info(ctx, arg, true)
                .await
                .is_some_and(|i| i.kind == 'd' || i.perm & 0o111 != 0),
            "-f" => kind_is('-').await,
            "-d" => kind_is('d').await,
            "-p" => kind_is('p').await,
            "-c" => kind_is('c').await,
            "-b" => kind_is('b').await,
            "-S" => kind_is('s').await,
            "-h" | "-L" => self
                .info(ctx, arg, false)
                .await
                .is_some_and(|i| i.kind == 'l'),
            "-s" => self.info(ctx, arg, true).await.is_some_and(|i| i.size > 0),
            "-u" => perm(0o4000).await,
            "-g" => perm(0o2000).await,
            "-k" => perm(0o1000).await,
            "-N" => self
                .info(ctx, arg, true)
                .await
                .is_some_and(|i| i.atime.is_some_and(|a| i.mtime > a)),
            "-t" => ctx
                .variables
                .get(&format!("_TTY_{}", arg.trim()))
                .is_some_and(|v| v == "1"),
            // `-R` (a nameref): no registered command sees namerefs, and
            // bashkit's own `test` rejected it too.
            _ => false,
        }
    }

    /// A binary primary; `Err` for a bad integer operand.
    async fn binary(
        &self,
        ctx: &BuiltinContext<'_>,
        left: &str,
        op: &str,
        right: &str,
    ) -> Result<bool, SyntaxError> {
        Ok(match op {
            "=" | "==" => left == right,
            "!=" => left != right,
            "<" => left < right,
            ">" => left > right,
            "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge" => {
                let (l, r) = (integer(left)?, integer(right)?);
                match op {
                    "-eq" => l == r,
                    "-ne" => l != r,
                    "-lt" => l < r,
                    "-le" => l <= r,
                    "-gt" => l > r,
                    _ => l >= r,
                }
            }
            "-nt" | "-ot" => {
                let l = self.info(ctx, left, true).await;
                let r = self.info(ctx, right, true).await;
                let (newer, older) = if op == "-nt" { (l, r) } else { (r, l) };
                // bash: a file that exists is newer than one that does not.
                match (newer, older) {
                    (Some(n), Some(o)) => n.mtime > o.mtime,
                    (Some(_), None) => true,
                    _ => false,
                }
            }
            "-ef" => {
                let l = self.info(ctx, left, true).await;
                let r = self.info(ctx, right, true).await;
                match (l, r) {
                    (Some(l), Some(r)) => match (l.ino, r.ino) {
                        (Some(a), Some(b)) => a == b,
                        (None, None) => resolve(ctx.cwd, left) == resolve(ctx.cwd, right),
                        _ => false,
                    },
                    _ => false,
                }
            }
            _ => return Err(SyntaxError(format!("{op}: binary operator expected"))),
        })
    }

    /// Decides `expr`; `-v` and `-o` primaries are left to the interpreter:
    /// the result is then the `[[ ]]` text that decides it.
    fn decide<'a>(
        &'a self,
        ctx: &'a BuiltinContext<'_>,
        expr: &'a Expr,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Decided, SyntaxError>> + Send + 'a>,
    > {
        Box::pin(async move {
            Ok(match expr {
                Expr::Word(w) => Decided::Known(!w.is_empty()),
                Expr::Unary(op, name) if op == "-v" => {
                    Decided::Deferred(format!("-v {}", quote(name)))
                }
                Expr::Unary(op, name) if op == "-o" => {
                    Decided::Deferred(format!("\":$SHELLOPTS:\" == *:{}:*", quote(name)))
                }
                Expr::Unary(op, arg) => Decided::Known(self.unary(ctx, op, arg).await),
                Expr::Binary(l, op, r) => Decided::Known(self.binary(ctx, l, op, r).await?),
                Expr::Not(e) => match self.decide(ctx, e).await? {
                    Decided::Known(b) => Decided::Known(!b),
                    Decided::Deferred(t) => Decided::Deferred(format!("! ( {t} )")),
                },
                Expr::And(a, b) | Expr::Or(a, b) => {
                    let and = matches!(expr, Expr::And(..));
                    let (a, b) = (self.decide(ctx, a).await?, self.decide(ctx, b).await?);
                    match (a, b) {
                        (Decided::Known(x), Decided::Known(y)) => {
                            Decided::Known(if and { x && y } else { x || y })
                        }
                        (a, b) => Decided::Deferred(format!(
                            "( {} ) {} ( {} )",
                            a.text(),
                            if and { "&&" } else { "||" },
                            b.text()
                        )),
                    }
                }
            })
        })
    }
}

/// An expression decided here, or the `[[ ]]` text the interpreter decides.
enum Decided {
    Known(bool),
    Deferred(String),
}

impl Decided {
    /// As a `[[ ]]` operand expression.
    fn text(&self) -> String {
        match self {
            Decided::Known(true) => "1".into(),
            Decided::Known(false) => "''".into(),
            Decided::Deferred(t) => t.clone(),
        }
    }
}

/// `s` single-quoted for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An integer operand: optional blanks and sign around decimal digits, as
/// bash reads them.
fn integer(s: &str) -> Result<i64, SyntaxError> {
    s.trim()
        .parse::<i64>()
        .ok()
        .filter(|_| {
            let t = s.trim().trim_start_matches(['+', '-']);
            !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
        })
        .ok_or_else(|| SyntaxError(format!("{s}: integer expression expected")))
}

#[async_trait]
impl Builtin for Test {
    async fn execution_plan(
        &self,
        ctx: &BuiltinContext<'_>,
    ) -> bashkit::Result<Option<ExecutionPlan>> {
        let Some(words) = self.words(ctx.args) else {
            return Ok(None);
        };
        let Ok(expr) = parse(words) else {
            return Ok(None);
        };
        if !mentions_shell_state(&expr) {
            return Ok(None);
        }
        match self.decide(ctx, &expr).await {
            Ok(Decided::Deferred(text)) => Ok(Some(ExecutionPlan::Batch {
                commands: vec![SubCommand {
                    name: "eval".into(),
                    args: vec![format!("[[ {text} ]]")],
                    stdin: None,
                    assignments: Vec::new(),
                }],
            })),
            // Decided without the interpreter after all, or an error:
            // `execute` answers.
            _ => Ok(None),
        }
    }

    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let Some(words) = self.words(ctx.args) else {
            return Ok(ExecResult::err("[: missing `]'\n".to_string(), 2));
        };
        let expr = match parse(words) {
            Ok(e) => e,
            Err(e) => return Ok(self.syntax(e)),
        };
        match self.decide(&ctx, &expr).await {
            Ok(Decided::Known(true)) => Ok(ExecResult::ok(String::new())),
            Ok(Decided::Known(false)) => Ok(ExecResult::with_code(String::new(), 1)),
            // Only reached if the plan was not taken.
            Ok(Decided::Deferred(_)) => Ok(ExecResult::with_code(String::new(), 1)),
            Err(e) => Ok(self.syntax(e)),
        }
    }
}

/// Whether `expr` has a `-v` or `-o` primary.
fn mentions_shell_state(expr: &Expr) -> bool {
    match expr {
        Expr::Unary(op, _) => op == "-v" || op == "-o",
        Expr::Not(e) => mentions_shell_state(e),
        Expr::And(a, b) | Expr::Or(a, b) => mentions_shell_state(a) || mentions_shell_state(b),
        Expr::Word(_) | Expr::Binary(..) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_bash_reads_them() {
        assert_eq!(integer(" 42 "), Ok(42));
        assert_eq!(integer("-7"), Ok(-7));
        assert_eq!(integer("+7"), Ok(7));
        assert!(integer("0x10").is_err());
        assert!(integer("1e3").is_err());
        assert!(integer("").is_err());
        assert!(integer("99999999999999999999").is_err());
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("a'b"), "'a'\\''b'");
    }

    #[test]
    fn deferred_text_keeps_decided_parts_as_constants() {
        assert_eq!(Decided::Known(true).text(), "1");
        assert_eq!(Decided::Known(false).text(), "''");
    }
}
