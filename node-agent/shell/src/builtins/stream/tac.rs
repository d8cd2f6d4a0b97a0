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
use std::collections::VecDeque;

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
                        records.prepend(&ctx, step, at == 0).await?;
                    }
                }
                (None, None) => {
                    // Each piece is dropped once walked.
                    let mut pieces = hold(&self.0, &mut input).await?;
                    while let Some(piece) = pieces.pop() {
                        if self.0.budget.step_stopped() {
                            return Err(self.0.budget.stop_error());
                        }
                        records.prepend(&ctx, piece, pieces.is_empty()).await?;
                    }
                }
                (Some(re), _) => {
                    let whole = hold_whole(&self.0, &mut input).await?;
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

/// Reads all of `input` into one buffer of exactly the admitted size.
async fn hold_whole(env: &Env, input: &mut Input) -> bashkit::Result<Vec<u8>> {
    let mut whole = Vec::new();
    while let Some(piece) = input.read().await? {
        env.budget
            .admit((whole.len() + piece.len()) as u64, "the input tac holds")?;
        whole.reserve_exact(piece.len());
        whole.extend_from_slice(&piece);
    }
    Ok(whole)
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

/// The part of the input not yet written: the unfinished first record of
/// what was read so far, as the steps it was read in (file order). Steps
/// are kept as they came, never joined into one growing buffer, so holding
/// a long record costs its length and nothing is reallocated or copied.
struct Reverser<'a> {
    env: &'a Env,
    separator: Vec<u8>,
    before: bool,
    tail: VecDeque<Vec<u8>>,
    /// Bytes in `tail`.
    held: usize,
}

impl<'a> Reverser<'a> {
    fn new(env: &'a Env, separator: &[u8], before: bool) -> Reverser<'a> {
        Reverser {
            env,
            separator: separator.to_vec(),
            before,
            tail: VecDeque::new(),
            held: 0,
        }
    }

    /// Writes bytes `from..to` of `step` followed by the tail: into `out`
    /// when small (many short records make one write), else straight on.
    async fn write(
        &self,
        ctx: &CommandContext<'_>,
        out: &mut Vec<u8>,
        step: &[u8],
        from: usize,
        to: usize,
    ) -> bashkit::Result<()> {
        let mut offset = 0;
        for part in std::iter::once(step).chain(self.tail.iter().map(Vec::as_slice)) {
            let (lo, hi) = (from.max(offset), to.min(offset + part.len()));
            if lo < hi {
                let slice = &part[lo - offset..hi - offset];
                if out.len() + slice.len() > STEP_BYTES {
                    ctx.stdout.write_all(&std::mem::take(out)).await?;
                }
                if slice.len() > STEP_BYTES {
                    ctx.stdout.write_all(slice).await?;
                } else {
                    out.extend_from_slice(slice);
                }
            }
            offset += part.len();
            if offset >= to {
                break;
            }
        }
        Ok(())
    }

    /// Adds `step`, the bytes just before everything added so far, and
    /// writes the records it completed, last first; `start` says the step
    /// begins the input, which completes the first record. The record
    /// still unfinished is admitted against the budget.
    async fn prepend(
        &mut self,
        ctx: &CommandContext<'_>,
        step: Vec<u8>,
        start: bool,
    ) -> bashkit::Result<()> {
        let len = self.separator.len();
        // A separator may start in the step and end in the tail: search
        // the step and the tail's first `len - 1` bytes.
        let mut region = step.clone();
        for part in &self.tail {
            let want = (step.len() + len - 1).saturating_sub(region.len());
            if want == 0 {
                break;
            }
            region.extend_from_slice(&part[..want.min(part.len())]);
        }
        let mut bounds = Vec::new();
        let mut from = 0;
        while let Some(found) = memchr::memmem::find(&region[from..], &self.separator) {
            let at = from + found;
            if at >= step.len() {
                break;
            }
            bounds.push(if self.before { at } else { at + len });
            from = at + len;
        }
        drop(region);
        let mut end = step.len() + self.held;
        let mut out = Vec::new();
        for &bound in bounds.iter().rev() {
            self.write(ctx, &mut out, &step, bound, end).await?;
            end = bound;
        }
        if start {
            self.write(ctx, &mut out, &step, 0, end).await?;
        }
        ctx.stdout.write_all(&out).await?;
        if start {
            self.tail.clear();
            self.held = 0;
            return Ok(());
        }
        // What is left is bytes 0..end of the step and the tail.
        self.env.budget.admit(end as u64, "the record tac holds")?;
        let mut keep = end.saturating_sub(step.len());
        let mut kept = VecDeque::new();
        for mut part in self.tail.drain(..) {
            if keep == 0 {
                break;
            }
            part.truncate(keep);
            keep -= part.len();
            kept.push_back(part);
        }
        let mut step = step;
        step.truncate(end);
        kept.push_front(step);
        self.tail = kept;
        self.held = end;
        Ok(())
    }
}
