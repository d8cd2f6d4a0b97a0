//! `tac`: the records of each input in reverse order. A record ends after
//! each separator (newline, or `-s SEP`), or starts at it with `-b`.
//!
//! bashkit's `tac` read its input whole and reversed it in one call that
//! never checked the stop flag, with intermediate copies several times the
//! input's size. This one reads a file of the computer backwards from its
//! end in steps and writes each record once it is complete, so it holds
//! the step and the unfinished record, admitted against the exec's memory
//! budget. Stdin cannot be read backwards: its pieces are held (admitted
//! against the budget as they arrive), then walked the same way. A regular
//! expression separator (`-r`) matches over the whole input, which is held
//! the same way.

use super::input::Input;
use super::{Env, STEP_BYTES, fail, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Tac(pub Env);

struct Args {
    before: bool,
    regex: bool,
    separator: Vec<u8>,
    files: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        before: false,
        regex: false,
        separator: b"\n".to_vec(),
        files: Vec::new(),
    };
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if options_done || arg == "-" || !arg.starts_with('-') {
            a.files.push(arg.clone());
        } else if arg == "--" {
            options_done = true;
        } else if arg == "--before" {
            a.before = true;
        } else if arg == "--regex" {
            a.regex = true;
        } else if let Some(sep) = arg.strip_prefix("--separator=") {
            a.separator = sep.as_bytes().to_vec();
        } else if arg == "--separator" {
            let sep = args
                .get(i)
                .ok_or("option '--separator' requires an argument")?;
            i += 1;
            a.separator = sep.as_bytes().to_vec();
        } else if arg.starts_with("--") {
            return Err(format!("unrecognized option '{arg}'"));
        } else {
            for (pos, f) in arg[1..].char_indices() {
                match f {
                    'b' => a.before = true,
                    'r' => a.regex = true,
                    's' => {
                        let rest = &arg[1 + pos + 1..];
                        let sep = if rest.is_empty() {
                            let sep = args.get(i).ok_or("option requires an argument -- 's'")?;
                            i += 1;
                            sep.as_str()
                        } else {
                            rest
                        };
                        a.separator = sep.as_bytes().to_vec();
                        break;
                    }
                    other => return Err(format!("invalid option -- '{other}'")),
                }
            }
        }
    }
    if a.separator.is_empty() {
        // GNU: an empty separator is a NUL byte.
        a.separator = vec![0];
    }
    if a.files.is_empty() {
        a.files.push("-".into());
    }
    Ok(a)
}

#[async_trait]
impl Command for Tac {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let args = match parse(ctx.args) {
            Ok(a) => a,
            Err(message) => return fail(&ctx, message).await,
        };
        let pattern = if args.regex {
            let text = String::from_utf8_lossy(&args.separator).into_owned();
            match regex::bytes::Regex::new(&text) {
                Ok(re) => Some(re),
                Err(_) => {
                    return fail(&ctx, format!("invalid regular expression: '{text}'")).await;
                }
            }
        } else {
            None
        };
        let mut status = 0;
        for name in &args.files {
            let mut input = match Input::open(&ctx, &self.0, name).await {
                Ok(input) => input,
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(
                        &ctx,
                        format!("failed to open '{name}' for reading: {}", reason(&e)),
                    )
                    .await?;
                    status = 1;
                    continue;
                }
            };
            let mut records = Reverser::new(&self.0, &args.separator, args.before);
            match (&pattern, input.size) {
                (None, Some(size)) => {
                    // Backwards from the end, a step at a time.
                    let mut at = size;
                    while at > 0 {
                        let len = (STEP_BYTES as u64).min(at);
                        at -= len;
                        let step = input.read_at(at, len as usize)?;
                        let out = records.prepend(&step, at == 0)?;
                        ctx.stdout.write_all(&out).await?;
                    }
                }
                (None, None) => {
                    // Each piece is dropped once walked.
                    let mut pieces = hold(&self.0, &mut input).await?;
                    while let Some(piece) = pieces.pop() {
                        if self.0.budget.step_stopped() {
                            return Err(self.0.budget.stop_error());
                        }
                        let out = records.prepend(&piece, pieces.is_empty())?;
                        ctx.stdout.write_all(&out).await?;
                    }
                }
                (Some(re), _) => {
                    let whole = hold(&self.0, &mut input).await?.concat();
                    by_pattern(&ctx, &self.0, re, args.before, &whole).await?;
                }
            }
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// Reads all of `input`, admitting what is held against the budget as it
/// grows; checks the stop flag at every piece.
async fn hold(env: &Env, input: &mut Input) -> bashkit::Result<Vec<Vec<u8>>> {
    let mut pieces = Vec::new();
    let mut held = 0u64;
    while let Some(piece) = input.read().await? {
        held += piece.len() as u64;
        env.budget.admit(held, "the input tac holds")?;
        pieces.push(piece);
    }
    Ok(pieces)
}

/// Writes the records of `whole` split by matches of `re`, last first.
async fn by_pattern(
    ctx: &CommandContext<'_>,
    env: &Env,
    re: &regex::bytes::Regex,
    before: bool,
    whole: &[u8],
) -> bashkit::Result<()> {
    let mut bounds = vec![0];
    for m in re.find_iter(whole) {
        if m.start() == m.end() {
            continue;
        }
        bounds.push(if before { m.start() } else { m.end() });
    }
    bounds.push(whole.len());
    for pair in bounds.windows(2).rev() {
        if env.budget.step_stopped() {
            return Err(env.budget.stop_error());
        }
        ctx.stdout.write_all(&whole[pair[0]..pair[1]]).await?;
    }
    Ok(())
}

/// The part of the input not yet written (the unfinished first record of
/// what was read so far), kept in reverse byte order so that prepending a
/// step costs only that step, with the separator reversed to match it.
struct Reverser<'a> {
    env: &'a Env,
    /// Reversed separator.
    rsep: Vec<u8>,
    before: bool,
    /// Reversed bytes; `held[cut..]` is not written yet.
    held: Vec<u8>,
    cut: usize,
}

impl<'a> Reverser<'a> {
    fn new(env: &'a Env, separator: &[u8], before: bool) -> Reverser<'a> {
        Reverser {
            env,
            rsep: separator.iter().rev().copied().collect(),
            before,
            held: Vec::new(),
            cut: 0,
        }
    }

    /// Adds `step`, the bytes just before everything added so far, and
    /// returns the records it completed, last first; `start` says the step
    /// begins the input, which completes the first record.
    fn prepend(&mut self, step: &[u8], start: bool) -> bashkit::Result<Vec<u8>> {
        if self.cut > self.held.len() / 2 {
            self.held.drain(..self.cut);
            self.cut = 0;
        }
        let searched = self
            .held
            .len()
            .saturating_sub(self.rsep.len() - 1)
            .max(self.cut);
        self.env.budget.admit(
            (self.held.len() - self.cut + step.len()) as u64,
            "the record tac holds",
        )?;
        self.held.extend(step.iter().rev());
        let mut out = Vec::new();
        let mut from = searched;
        while let Some(found) = memchr::memmem::find(&self.held[from..], &self.rsep) {
            let at = from + found;
            let end = if self.before {
                at + self.rsep.len()
            } else {
                at
            };
            out.extend(self.held[self.cut..end].iter().rev());
            self.cut = end;
            from = at + self.rsep.len();
        }
        if start {
            out.extend(self.held[self.cut..].iter().rev());
            self.held.clear();
            self.cut = 0;
        }
        Ok(out)
    }
}
