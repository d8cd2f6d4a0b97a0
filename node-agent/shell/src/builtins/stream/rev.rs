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
            let mut line: Vec<u8> = Vec::new();
            while let Some(piece) = input.read().await? {
                let mut out = Vec::with_capacity(piece.len());
                for chunk in piece.split_inclusive(|b| *b == b'\n') {
                    match chunk.strip_suffix(b"\n") {
                        Some(end) => {
                            line.extend_from_slice(end);
                            reversed(&line, &mut out);
                            out.push(b'\n');
                            line.clear();
                        }
                        None => {
                            line.extend_from_slice(chunk);
                            self.0
                                .budget
                                .admit(line.len() as u64, "the line rev holds")?;
                        }
                    }
                }
                ctx.stdout.write_all(&out).await?;
            }
            let mut out = Vec::new();
            reversed(&line, &mut out);
            ctx.stdout.write_all(&out).await?;
        }
        Ok(CommandStatus::with_code(status))
    }
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
