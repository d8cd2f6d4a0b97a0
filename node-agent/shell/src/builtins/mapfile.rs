//! `mapfile`/`readarray [-d DELIM] [-n COUNT] [-O ORIGIN] [-s COUNT] [-t]
//! [-u FD] [-C CALLBACK] [-c QUANTUM] [ARRAY]`: lines of input into an
//! indexed array.
//!
//! bashkit's own stores the array past the interpreter's variable rules:
//! an empty input leaves no array at all (bash: `declare -a arr=()`), `-O`
//! drops a scalar's value (bash keeps it as element 0), a nameref is not
//! followed, an associative array is overwritten (bash: `not an indexed
//! array`, status 1), `-u` accepts fd 0 only and `-C` not at all.
//!
//! This one splits the input itself and has the interpreter make the
//! assignments, in the caller's context, through `eval`
//! ([`ExecutionPlan::Batch`]): `NAME=()` then `NAME+=('l1' 'l2' ...)`, or
//! `NAME[k]='l1' ...` with `-O`, in pieces of [`PIECE`] lines so no `eval`
//! outgrows the parser's budget; the callback runs between them as bash
//! runs it (every QUANTUM lines, before that line is stored, with its index
//! and the line as two more words). `-u FD` (FD not 0) runs the command
//! again with `<&FD`, so the interpreter reads the descriptor; one that is
//! not open fails there, status 1.
//!
//! Errors, as bash: a bad option or a missing option value prints the
//! usage line, status 2; a bad count, origin, descriptor, quantum or name,
//! status 1. A stored value ends at its first NUL byte, as in bash.
//! Afterwards `$_` is the last word of the command. Each `eval`
//! is a command of its own to `set -x` and to a `DEBUG` trap.

use async_trait::async_trait;
use bashkit::{Builtin, BuiltinContext, ExecResult, ExecutionPlan, SubCommand};

/// `mapfile` or `readarray` (the name used in messages).
pub(crate) struct Mapfile(pub &'static str);

/// Lines stored by one `eval`.
const PIECE: usize = 2000;

/// bash's default callback quantum.
const QUANTUM: usize = 5000;

#[derive(Debug, PartialEq, Eq)]
struct Opts {
    delim: u8,
    count: usize,
    origin: Option<usize>,
    skip: usize,
    trim: bool,
    /// `-u FD` other than 0, as written.
    fd: Option<String>,
    callback: Option<String>,
    quantum: usize,
    name: String,
}

/// Why the command fails before reading: the message and the status.
#[derive(Debug, PartialEq, Eq)]
struct Failure(String, i32);

fn usage(cmd: &str) -> String {
    format!(
        "{cmd}: usage: {cmd} [-d delim] [-n count] [-O origin] [-s count] [-t] [-u fd] \
         [-C callback] [-c quantum] [array]\n"
    )
}

/// A non-negative decimal count (blanks around it allowed, as bash).
fn count(s: &str) -> Option<usize> {
    let t = s.trim_matches([' ', '\t', '\n']);
    let t = t.strip_prefix('+').unwrap_or(t);
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse(cmd: &str, args: &[String]) -> Result<Opts, Failure> {
    let mut o = Opts {
        delim: b'\n',
        count: 0,
        origin: None,
        skip: 0,
        trim: false,
        fd: None,
        callback: None,
        quantum: QUANTUM,
        name: "MAPFILE".into(),
    };
    let fail = |msg: String| Err(Failure(msg, 1));
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg.len() < 2 {
            break;
        }
        i += 1;
        for (at, flag) in arg[1..].char_indices() {
            if flag == 't' {
                o.trim = true;
                continue;
            }
            if !"dnOsuCc".contains(flag) {
                return Err(Failure(
                    format!("{cmd}: -{flag}: invalid option\n{}", usage(cmd)),
                    2,
                ));
            }
            // The value: the rest of this word, or the next word.
            let rest = &arg[1 + at + flag.len_utf8()..];
            let value = if !rest.is_empty() {
                rest.to_string()
            } else if let Some(next) = args.get(i) {
                i += 1;
                next.clone()
            } else {
                return Err(Failure(
                    format!(
                        "{cmd}: -{flag}: option requires an argument\n{}",
                        usage(cmd)
                    ),
                    2,
                ));
            };
            match flag {
                'd' => o.delim = value.bytes().next().unwrap_or(0),
                'n' => match count(&value) {
                    Some(n) => o.count = n,
                    None => return fail(format!("{cmd}: {value}: invalid line count\n")),
                },
                's' => match count(&value) {
                    Some(n) => o.skip = n,
                    None => return fail(format!("{cmd}: {value}: invalid line count\n")),
                },
                'O' => match count(&value) {
                    Some(n) => o.origin = Some(n),
                    None => return fail(format!("{cmd}: {value}: invalid array origin\n")),
                },
                'u' => match count(&value) {
                    Some(0) => o.fd = None,
                    Some(_) => o.fd = Some(value.trim().to_string()),
                    None => {
                        return fail(format!(
                            "{cmd}: {value}: invalid file descriptor specification\n"
                        ));
                    }
                },
                'C' => o.callback = Some(value),
                _ => match count(&value).filter(|q| *q > 0) {
                    Some(q) => o.quantum = q,
                    None => return fail(format!("{cmd}: {value}: invalid callback quantum\n")),
                },
            }
            break;
        }
    }
    if let Some(name) = args.get(i) {
        if !valid_name(name) {
            return fail(format!("{cmd}: `{name}': not a valid identifier\n"));
        }
        o.name = name.clone();
    }
    Ok(o)
}

/// The records of `input` that `o` stores: `-s` skipped, at most `-n`,
/// each with its delimiter unless `-t`.
fn records(input: &[u8], o: &Opts) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = input;
    let mut seen = 0;
    while !rest.is_empty() && (o.count == 0 || out.len() < o.count) {
        let (record, next) = match rest.iter().position(|b| *b == o.delim) {
            Some(at) => (&rest[..=at], &rest[at + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        seen += 1;
        if seen <= o.skip {
            continue;
        }
        let record = match o.trim && record.last() == Some(&o.delim) {
            true => &record[..record.len() - 1],
            false => record,
        };
        // A shell value ends at its first NUL byte, as in bash.
        let record = record.split(|b| *b == 0).next().unwrap_or_default();
        out.push(String::from_utf8_lossy(record).into_owned());
    }
    out
}

/// `s` single-quoted for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The `eval` texts storing `records` as `o` says, one per [`PIECE`]
/// lines. Each is `if ASSOC; then fail; elif STEPS; then ok; else fail;
/// fi`: an associative array is refused (bash checks before reading), a
/// readonly one fails its assignment; `ok`/`fail` are `test` commands
/// whose last word is `last`, so they set `$_` and the status at once.
/// `nounset`: `set -u` is on, where `${name@a}` of an unset name fails.
fn scripts(cmd: &str, o: &Opts, records: &[String], last: &str, nounset: bool) -> Vec<String> {
    let name = &o.name;
    let last = quote(last);
    let ok = format!("test {last} = {last}");
    let fail = format!("test x{last} = {last}");
    let attrs = match nounset {
        true => format!("${{{name}+${{{name}@a}}}}"),
        false => format!("${{{name}@a}}"),
    };
    let message = quote(&format!("{cmd}: {name}: not an indexed array"));
    let origin = o.origin.unwrap_or(0);
    let mut pieces: Vec<Vec<&String>> = records.chunks(PIECE).map(|p| p.iter().collect()).collect();
    if pieces.is_empty() {
        pieces.push(Vec::new());
    }
    let mut texts = Vec::new();
    for (k, piece) in pieces.iter().enumerate() {
        let first = k == 0;
        let mut steps = Vec::new();
        if first {
            // Without -O the array is emptied first; with it, a scalar
            // becomes element 0 and an unset name an empty array.
            steps.push(match o.origin {
                None => format!("{name}=()"),
                Some(_) => format!("{name}+=()"),
            });
        }
        let mut words = Vec::new();
        for (j, record) in piece.iter().enumerate() {
            let n = k * PIECE + j;
            let index = origin + n;
            if let Some(callback) = &o.callback
                && (n + 1).is_multiple_of(o.quantum)
            {
                flush(&mut steps, &mut words, name, o.origin.is_some());
                steps.push(format!("{{ {callback} {index} {}; true; }}", quote(record)));
            }
            words.push(match o.origin {
                Some(_) => format!("{name}[{index}]={}", quote(record)),
                None => quote(record),
            });
        }
        flush(&mut steps, &mut words, name, o.origin.is_some());
        let refuse = match first {
            true => format!("printf '%s\\n' {message} >&2; {fail}"),
            false => fail.clone(),
        };
        let steps = match steps.is_empty() {
            true => "true".to_string(),
            false => steps.join(" && "),
        };
        texts.push(format!(
            "if [[ {attrs} == *A* ]]; then {refuse}; elif {steps}; then {ok}; else {fail}; fi"
        ));
    }
    texts
}

/// Appends the pending words as one assignment command.
fn flush(steps: &mut Vec<String>, words: &mut Vec<String>, name: &str, indexed: bool) {
    if words.is_empty() {
        return;
    }
    match indexed {
        true => steps.push(words.join(" ")),
        false => steps.push(format!("{name}+=({})", words.join(" "))),
    }
    words.clear();
}

fn eval(text: String) -> SubCommand {
    SubCommand {
        name: "eval".into(),
        args: vec![text],
        stdin: None,
        assignments: Vec::new(),
    }
}

#[async_trait]
impl Builtin for Mapfile {
    async fn execution_plan(
        &self,
        ctx: &BuiltinContext<'_>,
    ) -> bashkit::Result<Option<ExecutionPlan>> {
        let Ok(o) = parse(self.0, ctx.args) else {
            return Ok(None);
        };
        let last = ctx.args.last().map_or(self.0, String::as_str);
        let commands = match &o.fd {
            // The same command, reading the descriptor as its stdin.
            Some(fd) => {
                let mut words = vec![self.0.to_string()];
                words.extend(without_fd(ctx.args).into_iter().map(|w| quote(&w)));
                vec![eval(format!("{} <&{fd}", words.join(" ")))]
            }
            None => {
                let input = ctx.stdin.map_or(&[][..], |s| s.as_bytes());
                let nounset = ctx.variables.get("SHOPT_u").is_some_and(|v| v == "1");
                scripts(self.0, &o, &records(input, &o), last, nounset)
                    .into_iter()
                    .map(eval)
                    .collect()
            }
        };
        Ok(Some(ExecutionPlan::Batch { commands }))
    }

    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        Ok(match parse(self.0, ctx.args) {
            Err(Failure(message, status)) => ExecResult::err(message, status),
            // Only reached if the plan was not taken.
            Ok(_) => ExecResult::with_code(String::new(), 1),
        })
    }
}

/// `args` without their `-u FD` (as a word of its own or attached).
fn without_fd(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-u" {
            i += 1;
            continue;
        }
        if arg.starts_with("-u") && arg.len() > 2 {
            continue;
        }
        out.push(arg.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_are_read_as_bash_reads_them() {
        let o = parse(
            "mapfile",
            &args(&["-tn", "2", "-O3", "-u", "0", "arr", "extra"]),
        )
        .unwrap();
        assert_eq!(
            (o.trim, o.count, o.origin, o.fd, o.name.as_str()),
            (true, 2, Some(3), None, "arr")
        );
        assert_eq!(
            parse("mapfile", &args(&["-u", "4"])).unwrap().fd.as_deref(),
            Some("4")
        );
        assert_eq!(parse("mapfile", &args(&["-x"])).unwrap_err().1, 2);
        assert_eq!(parse("mapfile", &args(&["-n"])).unwrap_err().1, 2);
        assert_eq!(
            parse("readarray", &args(&["-O", "-1"])).unwrap_err(),
            Failure("readarray: -1: invalid array origin\n".into(), 1)
        );
        assert_eq!(parse("mapfile", &args(&["1x"])).unwrap_err().1, 1);
        assert_eq!(parse("mapfile", &args(&["-c", "0"])).unwrap_err().1, 1);
    }

    #[test]
    fn records_skip_count_and_trim() {
        let o = parse("mapfile", &args(&["-t", "-s", "1", "-n", "2"])).unwrap();
        assert_eq!(records(b"a\nb\nc\nd", &o), ["b", "c"]);
        let o = parse("mapfile", &args(&["-d", ","])).unwrap();
        assert_eq!(records(b"a,b", &o), ["a,", "b"]);
        assert!(records(b"", &o).is_empty());
        let o = parse("mapfile", &args(&["-d", ""])).unwrap();
        assert_eq!(records(b"1\x003\x00", &o), ["1", "3"]);
        let o = parse("mapfile", &args(&[])).unwrap();
        assert_eq!(records(b".\x00.\n", &o), ["."]);
    }

    #[test]
    fn the_array_is_emptied_then_filled() {
        let o = parse("mapfile", &args(&["-t", "a"])).unwrap();
        let texts = scripts("mapfile", &o, &["x".into(), "it's".into()], "a", false);
        assert_eq!(
            texts,
            [
                "if [[ ${a@a} == *A* ]]; then printf '%s\\n' 'mapfile: a: not an indexed array' >&2; \
              test x'a' = 'a'; elif a=() && a+=('x' 'it'\\''s'); then test 'a' = 'a'; \
              else test x'a' = 'a'; fi"
            ]
        );
    }

    #[test]
    fn large_inputs_are_stored_in_pieces() {
        let o = parse("mapfile", &args(&[])).unwrap();
        let lines: Vec<String> = (0..PIECE * 2 + 1).map(|n| n.to_string()).collect();
        let texts = scripts("mapfile", &o, &lines, "mapfile", true);
        assert_eq!(texts.len(), 3);
        assert!(texts[2].starts_with("if [[ ${MAPFILE+${MAPFILE@a}} == *A* ]]; then test x"));
        assert!(texts[2].contains("elif MAPFILE+=('4000'); then"));
    }

    #[test]
    fn the_descriptor_option_is_dropped_for_the_rerun() {
        assert_eq!(without_fd(&args(&["-t", "-u", "3", "a"])), ["-t", "a"]);
        assert_eq!(without_fd(&args(&["-u3", "a"])), ["a"]);
    }
}
