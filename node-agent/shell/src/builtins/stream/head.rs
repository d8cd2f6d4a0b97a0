//! `head`: the first (or all but the last) N lines or bytes of each input,
//! reading no further than needed.

use super::input::Input;
use super::{Env, fail, parse_count, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use std::collections::VecDeque;

pub(crate) struct Head(pub Env);

/// What to print of each input.
#[derive(Clone, Copy)]
enum Amount {
    FirstLines(u64),
    AllButLastLines(u64),
    FirstBytes(u64),
    AllButLastBytes(u64),
}

/// Parsed command line: what, headers (`Some(true)` -v, `Some(false)` -q),
/// operands.
pub(crate) struct Args {
    amount: Amount,
    headers: Option<bool>,
    files: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut amount = Amount::FirstLines(10);
    let mut headers = None;
    let mut files = Vec::new();
    let mut i = 0;
    let mut options_done = false;
    let value = |i: &mut usize, opt: &str, inline: &str| -> Result<String, String> {
        if !inline.is_empty() {
            return Ok(inline.to_string());
        }
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| format!("option requires an argument -- '{opt}'"))
    };
    while i < args.len() {
        let arg = &args[i];
        if options_done || arg == "-" || !arg.starts_with('-') {
            files.push(arg.clone());
        } else if arg == "--" {
            options_done = true;
        } else if let Some(n) = arg.strip_prefix("--lines=") {
            amount = lines(n)?;
        } else if let Some(n) = arg.strip_prefix("--bytes=") {
            amount = bytes(n)?;
        } else if arg == "--lines" {
            // The long options also take their value as the next word.
            amount = lines(&value(&mut i, "lines", "")?)?;
        } else if arg == "--bytes" {
            amount = bytes(&value(&mut i, "bytes", "")?)?;
        } else if arg == "--quiet" || arg == "--silent" {
            headers = Some(false);
        } else if arg == "--verbose" {
            headers = Some(true);
        } else if arg[1..].bytes().all(|b| b.is_ascii_digit()) {
            amount = lines(&arg[1..])?;
        } else {
            let flags = &arg[1..];
            for (pos, f) in flags.char_indices() {
                match f {
                    'n' => {
                        amount = lines(&value(&mut i, "n", &flags[pos + 1..])?)?;
                        break;
                    }
                    'c' => {
                        amount = bytes(&value(&mut i, "c", &flags[pos + 1..])?)?;
                        break;
                    }
                    'q' => headers = Some(false),
                    'v' => headers = Some(true),
                    other => return Err(format!("invalid option -- '{other}'")),
                }
            }
        }
        i += 1;
    }
    Ok(Args {
        amount,
        headers,
        files,
    })
}

fn lines(text: &str) -> Result<Amount, String> {
    match text.strip_prefix('-') {
        Some(n) => parse_count(n).map(Amount::AllButLastLines),
        None => parse_count(text.strip_prefix('+').unwrap_or(text)).map(Amount::FirstLines),
    }
    .ok_or_else(|| format!("invalid number of lines: '{text}'"))
}

fn bytes(text: &str) -> Result<Amount, String> {
    match text.strip_prefix('-') {
        Some(n) => parse_count(n).map(Amount::AllButLastBytes),
        None => parse_count(text.strip_prefix('+').unwrap_or(text)).map(Amount::FirstBytes),
    }
    .ok_or_else(|| format!("invalid number of bytes: '{text}'"))
}

#[async_trait]
impl Command for Head {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut args = match parse(ctx.args) {
            Ok(a) => a,
            Err(message) => return fail(&ctx, message).await,
        };
        if args.files.is_empty() {
            args.files.push("-".into());
        }
        let show = args.headers.unwrap_or(args.files.len() > 1);
        let mut status = 0;
        for (n, name) in args.files.iter().enumerate() {
            let mut input = match Input::open(&ctx, &self.0, name).await {
                Ok(input) => input,
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(
                        &ctx,
                        format!("cannot open '{name}' for reading: {}", reason(&e)),
                    )
                    .await?;
                    status = 1;
                    continue;
                }
            };
            if show {
                let shown = if name == "-" { "standard input" } else { name };
                let sep = if n > 0 { "\n" } else { "" };
                ctx.stdout
                    .write_all(format!("{sep}==> {shown} <==\n").as_bytes())
                    .await?;
            }
            copy(&ctx, &self.0, &mut input, args.amount).await?;
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// Writes the part of `input` that `amount` selects.
async fn copy(
    ctx: &CommandContext<'_>,
    env: &Env,
    input: &mut Input,
    amount: Amount,
) -> bashkit::Result<()> {
    // A file of known size needs no window to hold its last bytes back.
    let amount = match (amount, input.size) {
        (Amount::AllButLastBytes(keep), Some(size)) => {
            Amount::FirstBytes(size.saturating_sub(keep))
        }
        (other, _) => other,
    };
    match amount {
        Amount::FirstBytes(mut left) => {
            while left > 0 {
                let Some(piece) = input.read().await? else {
                    break;
                };
                let take = piece.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                ctx.stdout.write_all(&piece[..take]).await?;
                left -= take as u64;
            }
        }
        Amount::FirstLines(mut left) => {
            while left > 0 {
                let Some(piece) = input.read().await? else {
                    break;
                };
                let mut end = piece.len();
                for (i, _) in piece.iter().enumerate().filter(|(_, b)| **b == b'\n') {
                    left -= 1;
                    if left == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ctx.stdout.write_all(&piece[..end]).await?;
            }
        }
        Amount::AllButLastBytes(keep) => {
            // Hold back the last `keep` bytes seen.
            env.budget.admit(keep, "the bytes head -c -N holds back")?;
            let mut window: VecDeque<u8> = VecDeque::new();
            while let Some(piece) = input.read().await? {
                window.extend(&piece);
                let excess = window.len().saturating_sub(keep as usize);
                if excess > 0 {
                    let out: Vec<u8> = window.drain(..excess).collect();
                    ctx.stdout.write_all(&out).await?;
                }
            }
        }
        Amount::AllButLastLines(keep) => {
            // Lines held back until `keep` newer ones have been seen.
            let mut held: VecDeque<Vec<u8>> = VecDeque::new();
            let mut held_bytes = 0u64;
            let mut partial: Vec<u8> = Vec::new();
            while let Some(piece) = input.read().await? {
                for chunk in piece.split_inclusive(|b| *b == b'\n') {
                    partial.extend_from_slice(chunk);
                    held_bytes += chunk.len() as u64;
                    env.budget
                        .admit(held_bytes, "the lines head -n -N holds back")?;
                    if chunk.ends_with(b"\n") {
                        held.push_back(std::mem::take(&mut partial));
                        if held.len() as u64 > keep {
                            let line = held.pop_front().unwrap_or_default();
                            held_bytes -= line.len() as u64;
                            ctx.stdout.write_all(&line).await?;
                        }
                    }
                }
            }
            // An unterminated last line counts as a line.
            if !partial.is_empty() {
                held.push_back(partial);
                if held.len() as u64 > keep {
                    let line = held.pop_front().unwrap_or_default();
                    ctx.stdout.write_all(&line).await?;
                }
            }
        }
    }
    Ok(())
}
