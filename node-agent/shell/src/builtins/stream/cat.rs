//! `cat`: concatenates inputs to stdout in bounded steps, with coreutils'
//! `-A -b -e -E -n -s -t -T -u -v`.

use super::input::Input;
use super::{Env, fail, reason, short_flags};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Cat(pub Env);

/// Formatting options; all off is a plain copy.
#[derive(Default, Clone, Copy)]
struct Format {
    number: bool,
    number_nonblank: bool,
    squeeze: bool,
    show_ends: bool,
    show_tabs: bool,
    show_nonprinting: bool,
}

impl Format {
    fn plain(&self) -> bool {
        !(self.number
            || self.number_nonblank
            || self.squeeze
            || self.show_ends
            || self.show_tabs
            || self.show_nonprinting)
    }
}

/// Line state carried across pieces and inputs (GNU cat numbers lines
/// across files).
#[derive(Default)]
struct State {
    line: u64,
    at_line_start: bool,
    /// Consecutive empty lines just written (for `-s`).
    blank_run: u32,
}

#[async_trait]
impl Command for Cat {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut fmt = Format::default();
        let mut files = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if !options_done && arg == "--" {
                options_done = true;
                continue;
            }
            let long = !options_done && arg.starts_with("--");
            if long {
                match arg.as_str() {
                    "--show-all" => {
                        fmt.show_nonprinting = true;
                        fmt.show_ends = true;
                        fmt.show_tabs = true;
                    }
                    "--number-nonblank" => fmt.number_nonblank = true,
                    "--show-ends" => fmt.show_ends = true,
                    "--number" => fmt.number = true,
                    "--squeeze-blank" => fmt.squeeze = true,
                    "--show-tabs" => fmt.show_tabs = true,
                    "--show-nonprinting" => fmt.show_nonprinting = true,
                    _ => return fail(&ctx, format!("unrecognized option '{arg}'")).await,
                }
                continue;
            }
            match short_flags(arg).filter(|_| !options_done) {
                Some(flags) => {
                    for f in flags {
                        match f {
                            'A' => {
                                fmt.show_nonprinting = true;
                                fmt.show_ends = true;
                                fmt.show_tabs = true;
                            }
                            'b' => fmt.number_nonblank = true,
                            'e' => {
                                fmt.show_nonprinting = true;
                                fmt.show_ends = true;
                            }
                            'E' => fmt.show_ends = true,
                            'n' => fmt.number = true,
                            's' => fmt.squeeze = true,
                            't' => {
                                fmt.show_nonprinting = true;
                                fmt.show_tabs = true;
                            }
                            'T' => fmt.show_tabs = true,
                            'u' => {}
                            'v' => fmt.show_nonprinting = true,
                            other => {
                                return fail(&ctx, format!("invalid option -- '{other}'")).await;
                            }
                        }
                    }
                }
                None => files.push(arg.clone()),
            }
        }
        if files.is_empty() {
            files.push("-".into());
        }
        let mut state = State {
            at_line_start: true,
            ..State::default()
        };
        let mut status = 0;
        for name in &files {
            let mut input = match Input::open(&ctx, &self.0, name).await {
                Ok(input) => input,
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(&ctx, format!("{name}: {}", reason(&e))).await?;
                    status = 1;
                    continue;
                }
            };
            loop {
                let piece = match input.read().await {
                    Ok(Some(piece)) => piece,
                    Ok(None) => break,
                    Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                        return Err(e);
                    }
                    Err(e) => {
                        fail(&ctx, format!("{name}: {}", reason(&e))).await?;
                        status = 1;
                        break;
                    }
                };
                if fmt.plain() {
                    ctx.stdout.write_all(&piece).await?;
                } else {
                    let out = format(&fmt, &mut state, &piece);
                    ctx.stdout.write_all(&out).await?;
                }
            }
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// Applies `fmt` to `piece`, continuing `state`.
fn format(fmt: &Format, state: &mut State, piece: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(piece.len() + piece.len() / 4);
    for &b in piece {
        if state.at_line_start {
            if b == b'\n' {
                state.blank_run += 1;
                if fmt.squeeze && state.blank_run > 1 {
                    continue;
                }
            } else {
                state.blank_run = 0;
            }
            let numbered = if fmt.number_nonblank {
                b != b'\n'
            } else {
                fmt.number
            };
            if numbered {
                state.line += 1;
                out.extend_from_slice(format!("{:>6}\t", state.line).as_bytes());
            }
            state.at_line_start = false;
        }
        match b {
            b'\n' => {
                if fmt.show_ends {
                    out.push(b'$');
                }
                out.push(b'\n');
                state.at_line_start = true;
            }
            b'\t' if fmt.show_tabs => out.extend_from_slice(b"^I"),
            b'\t' => out.push(b'\t'),
            _ if fmt.show_nonprinting => nonprinting(b, &mut out),
            _ => out.push(b),
        }
    }
    out
}

/// `cat -v`'s notation: `^X` for controls, `^?` for DEL, `M-` for bytes
/// with the high bit set.
fn nonprinting(b: u8, out: &mut Vec<u8>) {
    let mut c = b;
    if c >= 128 {
        out.extend_from_slice(b"M-");
        c -= 128;
    }
    match c {
        0..=31 => {
            out.push(b'^');
            out.push(c + 64);
        }
        127 => out.extend_from_slice(b"^?"),
        _ => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(fmt: Format, pieces: &[&[u8]]) -> String {
        let mut state = State {
            at_line_start: true,
            ..State::default()
        };
        let mut out = Vec::new();
        for p in pieces {
            out.extend(format(&fmt, &mut state, p));
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_and_squeezes_across_pieces() {
        let fmt = Format {
            number: true,
            squeeze: true,
            ..Format::default()
        };
        assert_eq!(
            run(fmt, &[b"a\n\n", b"\n\nb", b"\n"]),
            "     1\ta\n     2\t\n     3\tb\n"
        );
        let fmt = Format {
            number_nonblank: true,
            show_ends: true,
            ..Format::default()
        };
        assert_eq!(run(fmt, &[b"x\n\ny\n"]), "     1\tx$\n$\n     2\ty$\n");
    }

    #[test]
    fn shows_nonprinting_like_cat_v() {
        let fmt = Format {
            show_nonprinting: true,
            show_tabs: true,
            ..Format::default()
        };
        assert_eq!(run(fmt, &[b"\x01\t\x7f\xe9\n"]), "^A^I^?M-i\n");
    }
}
