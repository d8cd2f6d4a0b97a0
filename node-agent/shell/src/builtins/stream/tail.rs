//! `tail`: the last N lines or bytes of each input, or everything from
//! line/byte N on. A file of the computer is read backwards from its end
//! in steps, so only what is printed is ever read; stdin keeps a window of
//! the last lines, admitted against the exec's memory budget.

use super::input::Input;
use super::{Env, STEP_BYTES, fail, parse_count, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use std::collections::VecDeque;

pub(crate) struct Tail(pub Env);

#[derive(Clone, Copy)]
enum Amount {
    LastLines(u64),
    FromLine(u64),
    LastBytes(u64),
    FromByte(u64),
}

struct Args {
    amount: Amount,
    headers: Option<bool>,
    files: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut amount = Amount::LastLines(10);
    let mut headers = None;
    let mut files = Vec::new();
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = &args[i];
        let mut value = |opt: &str, inline: &str| -> Result<String, String> {
            if !inline.is_empty() {
                return Ok(inline.to_string());
            }
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("option requires an argument -- '{opt}'"))
        };
        if options_done || arg == "-" || (!arg.starts_with('-') && !arg.starts_with('+')) {
            files.push(arg.clone());
        } else if let Some(count) = arg.strip_prefix('+') {
            // Obsolete `tail +N`: from line N.
            match parse_count(count) {
                Some(n) => amount = Amount::FromLine(n),
                None => files.push(arg.clone()),
            }
        } else if arg == "--" {
            options_done = true;
        } else if let Some(n) = arg.strip_prefix("--lines=") {
            amount = lines(n)?;
        } else if let Some(n) = arg.strip_prefix("--bytes=") {
            amount = bytes(n)?;
        } else if arg == "--lines" {
            // The long options also take their value as the next word.
            amount = lines(&value("lines", "")?)?;
        } else if arg == "--bytes" {
            amount = bytes(&value("bytes", "")?)?;
        } else if arg == "--quiet" || arg == "--silent" {
            headers = Some(false);
        } else if arg == "--verbose" {
            headers = Some(true);
        } else if arg == "--follow" || arg.starts_with("--follow=") || arg == "--retry" {
            // Nothing appends while a script's own tail runs: print and end.
        } else if arg[1..].bytes().all(|b| b.is_ascii_digit()) {
            amount = lines(&arg[1..])?;
        } else {
            let flags = arg[1..].to_string();
            for (pos, f) in flags.char_indices() {
                match f {
                    'n' => {
                        amount = lines(&value("n", &flags[pos + 1..])?)?;
                        break;
                    }
                    'c' => {
                        amount = bytes(&value("c", &flags[pos + 1..])?)?;
                        break;
                    }
                    'q' => headers = Some(false),
                    'v' => headers = Some(true),
                    'f' | 'F' => {}
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
    match text.strip_prefix('+') {
        Some(n) => parse_count(n).map(Amount::FromLine),
        None => parse_count(text.strip_prefix('-').unwrap_or(text)).map(Amount::LastLines),
    }
    .ok_or_else(|| format!("invalid number of lines: '{text}'"))
}

fn bytes(text: &str) -> Result<Amount, String> {
    match text.strip_prefix('+') {
        Some(n) => parse_count(n).map(Amount::FromByte),
        None => parse_count(text.strip_prefix('-').unwrap_or(text)).map(Amount::LastBytes),
    }
    .ok_or_else(|| format!("invalid number of bytes: '{text}'"))
}

#[async_trait]
impl Command for Tail {
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
        let mut first = true;
        for name in &args.files {
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
                let sep = if first { "" } else { "\n" };
                ctx.stdout
                    .write_all(format!("{sep}==> {shown} <==\n").as_bytes())
                    .await?;
            }
            first = false;
            copy(&ctx, &self.0, &mut input, args.amount).await?;
        }
        Ok(CommandStatus::with_code(status))
    }
}

async fn copy(
    ctx: &CommandContext<'_>,
    env: &Env,
    input: &mut Input,
    amount: Amount,
) -> bashkit::Result<()> {
    match (amount, input.size) {
        (Amount::FromByte(n), _) => {
            let mut skip = n.saturating_sub(1);
            if skip > 0 && input.seek(skip) {
                skip = 0;
            }
            while let Some(piece) = input.read().await? {
                let cut = piece.len().min(usize::try_from(skip).unwrap_or(usize::MAX));
                skip -= cut as u64;
                ctx.stdout.write_all(&piece[cut..]).await?;
            }
        }
        (Amount::FromLine(n), _) => {
            let mut skip = n.saturating_sub(1);
            while let Some(piece) = input.read().await? {
                let mut start = 0;
                while skip > 0 && start < piece.len() {
                    match piece[start..].iter().position(|b| *b == b'\n') {
                        Some(i) => {
                            start += i + 1;
                            skip -= 1;
                        }
                        None => start = piece.len(),
                    }
                }
                ctx.stdout.write_all(&piece[start..]).await?;
            }
        }
        (Amount::LastBytes(n), Some(size)) => {
            input.seek(size.saturating_sub(n));
            while let Some(piece) = input.read().await? {
                ctx.stdout.write_all(&piece).await?;
            }
        }
        (Amount::LastLines(n), Some(size)) => {
            // Walk back from the end until n newlines (besides a final
            // one) lie behind the start, then copy forward from there.
            let mut start = size;
            let mut seen = 0u64;
            let mut first_step = true;
            'back: while start > 0 && n > 0 {
                let len = (STEP_BYTES as u64).min(start);
                let at = start - len;
                let data = input.read_at(at, len as usize)?;
                let mut end = data.len();
                if first_step && data.last() == Some(&b'\n') {
                    end -= 1; // the final newline ends the last line
                }
                first_step = false;
                for i in (0..end).rev() {
                    if data[i] == b'\n' {
                        seen += 1;
                        if seen == n {
                            start = at + i as u64 + 1;
                            break 'back;
                        }
                    }
                }
                start = at;
            }
            if n == 0 {
                start = size;
            }
            input.seek(start);
            while let Some(piece) = input.read().await? {
                ctx.stdout.write_all(&piece).await?;
            }
        }
        (Amount::LastBytes(n), None) => {
            env.budget.admit(n, "the bytes tail -c N keeps")?;
            let mut window: VecDeque<u8> = VecDeque::new();
            while let Some(piece) = input.read().await? {
                window.extend(&piece);
                let excess = window.len().saturating_sub(n as usize);
                window.drain(..excess);
            }
            let out: Vec<u8> = window.into_iter().collect();
            ctx.stdout.write_all(&out).await?;
        }
        (Amount::LastLines(n), None) => {
            let mut lines: VecDeque<Vec<u8>> = VecDeque::new();
            let mut held = 0u64;
            let mut partial: Vec<u8> = Vec::new();
            while let Some(piece) = input.read().await? {
                for chunk in piece.split_inclusive(|b| *b == b'\n') {
                    partial.extend_from_slice(chunk);
                    held += chunk.len() as u64;
                    env.budget.admit(held, "the lines tail -n N keeps")?;
                    if chunk.ends_with(b"\n") {
                        lines.push_back(std::mem::take(&mut partial));
                        while lines.len() as u64 > n {
                            held -= lines.pop_front().map_or(0, |l| l.len() as u64);
                        }
                    }
                }
            }
            if !partial.is_empty() {
                lines.push_back(partial);
                while lines.len() as u64 > n {
                    lines.pop_front();
                }
            }
            for line in lines {
                ctx.stdout.write_all(&line).await?;
            }
        }
    }
    Ok(())
}
