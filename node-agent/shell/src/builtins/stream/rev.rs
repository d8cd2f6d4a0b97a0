//! `rev`: each line of each input with its characters in reverse order.
//!
//! bashkit's `rev` read its input whole in one call that never checked the
//! stop flag. This one reads a step at a time and writes each line as it
//! ends, so it holds one step and one line, the line admitted against the
//! exec's memory budget. Characters are UTF-8 sequences; a byte that is not
//! part of one is reversed as a character of its own.

use super::input::Input;
use super::{Env, fail, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Rev(pub Env);

#[async_trait]
impl Command for Rev {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut files = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done || arg == "-" || !arg.starts_with('-') {
                files.push(arg.clone());
            } else if arg == "--" {
                options_done = true;
            } else {
                let shown = arg.trim_start_matches('-');
                return fail(&ctx, format!("invalid option -- '{shown}'")).await;
            }
        }
        if files.is_empty() {
            files.push("-".into());
        }
        let mut status = 0;
        for name in &files {
            let mut input = match Input::open(&ctx, &self.0, name).await {
                Ok(input) => input,
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(&ctx, format!("cannot open {name}: {}", reason(&e))).await?;
                    status = 1;
                    continue;
                }
            };
            // The unfinished line, as the pieces it came in: a long line is
            // never joined into one growing buffer.
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let mut held = 0u64;
            while let Some(piece) = input.read().await? {
                let mut out = Vec::with_capacity(piece.len());
                for chunk in piece.split_inclusive(|b| *b == b'\n') {
                    let Some(text) = chunk.strip_suffix(b"\n") else {
                        held += chunk.len() as u64;
                        self.0.budget.admit(held, "the line rev holds")?;
                        parts.push(chunk.to_vec());
                        continue;
                    };
                    if parts.is_empty() {
                        reversed(text, &mut out);
                    } else {
                        parts.push(text.to_vec());
                        ctx.stdout.write_all(&std::mem::take(&mut out)).await?;
                        write_reversed(&ctx, &parts).await?;
                        parts.clear();
                        held = 0;
                    }
                    out.push(b'\n');
                }
                ctx.stdout.write_all(&out).await?;
            }
            write_reversed(&ctx, &parts).await?;
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// Writes the line made of `parts` with its characters in reverse order,
/// a part at a time. A character split between two parts is written with
/// the earlier part: up to 3 continuation bytes at the start of a part go
/// with the part before it.
async fn write_reversed(ctx: &CommandContext<'_>, parts: &[Vec<u8>]) -> bashkit::Result<()> {
    let mut lead: Vec<u8> = Vec::new();
    for (n, part) in parts.iter().enumerate().rev() {
        let mut text = part.clone();
        text.extend_from_slice(&lead);
        let split = if n == 0 {
            0
        } else {
            text.iter()
                .take(3)
                .take_while(|b| (0x80..0xc0).contains(*b))
                .count()
        };
        lead = text[..split].to_vec();
        let mut out = Vec::with_capacity(text.len());
        reversed(&text[split..], &mut out);
        ctx.stdout.write_all(&out).await?;
    }
    Ok(())
}

/// Appends `line` with its characters in reverse order to `out`.
fn reversed(line: &[u8], out: &mut Vec<u8>) {
    let mut units: Vec<&[u8]> = Vec::new();
    for chunk in line.utf8_chunks() {
        let valid = chunk.valid();
        let mut rest = valid.as_bytes();
        for c in valid.chars() {
            let (unit, tail) = rest.split_at(c.len_utf8());
            units.push(unit);
            rest = tail;
        }
        for b in 0..chunk.invalid().len() {
            units.push(&chunk.invalid()[b..=b]);
        }
    }
    for unit in units.iter().rev() {
        out.extend_from_slice(unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverses_characters_and_stray_bytes() {
        let mut out = Vec::new();
        reversed("héllo".as_bytes(), &mut out);
        assert_eq!(out, "olléh".as_bytes());
        out.clear();
        reversed(b"a\xffb", &mut out);
        assert_eq!(out, b"b\xffa");
    }
}
