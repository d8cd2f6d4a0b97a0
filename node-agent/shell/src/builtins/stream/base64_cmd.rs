//! `base64`: encodes (wrapping lines at 76 columns, or `-w N`) or decodes
//! (`-d`, `-i` to skip non-alphabet bytes) in steps; only a few bytes carry
//! over between pieces.

use super::input::Input;
use super::{Env, fail, parse_count, reason};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Base64(pub Env);

#[async_trait]
impl Command for Base64 {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut decode = false;
        let mut ignore_garbage = false;
        let mut wrap: u64 = 76;
        let mut files = Vec::new();
        let mut i = 0;
        let args = ctx.args;
        while i < args.len() {
            let arg = &args[i];
            if arg == "-" || !arg.starts_with('-') {
                files.push(arg.clone());
            } else if arg == "--decode" {
                decode = true;
            } else if arg == "--ignore-garbage" {
                ignore_garbage = true;
            } else if let Some(n) = arg.strip_prefix("--wrap=") {
                match parse_count(n) {
                    Some(n) => wrap = n,
                    None => return fail(&ctx, format!("invalid wrap size: '{n}'")).await,
                }
            } else if arg.starts_with("--") {
                return fail(&ctx, format!("unrecognized option '{arg}'")).await;
            } else {
                let flags = &arg[1..];
                for (pos, f) in flags.char_indices() {
                    match f {
                        'd' => decode = true,
                        'i' => ignore_garbage = true,
                        'w' => {
                            let inline = &flags[pos + 1..];
                            let text = if inline.is_empty() {
                                i += 1;
                                match args.get(i) {
                                    Some(t) => t.clone(),
                                    None => {
                                        return fail(
                                            &ctx,
                                            "option requires an argument -- 'w'".into(),
                                        )
                                        .await;
                                    }
                                }
                            } else {
                                inline.to_string()
                            };
                            match parse_count(&text) {
                                Some(n) => wrap = n,
                                None => {
                                    return fail(&ctx, format!("invalid wrap size: '{text}'"))
                                        .await;
                                }
                            }
                            break;
                        }
                        other => return fail(&ctx, format!("invalid option -- '{other}'")).await,
                    }
                }
            }
            i += 1;
        }
        if files.len() > 1 {
            return fail(&ctx, format!("extra operand '{}'", files[1])).await;
        }
        let name = files.pop().unwrap_or_else(|| "-".into());
        let mut input = match Input::open(&ctx, &self.0, &name).await {
            Ok(input) => input,
            Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                return Err(e);
            }
            Err(e) => return fail(&ctx, format!("{name}: {}", reason(&e))).await,
        };
        if decode {
            let mut dec = Decoder {
                ignore_garbage,
                held: Vec::new(),
            };
            while let Some(piece) = input.read().await? {
                match dec.feed(&piece) {
                    Ok(out) => ctx.stdout.write_all(&out).await?,
                    Err(()) => return fail(&ctx, "invalid input".into()).await,
                }
            }
            match dec.finish() {
                Ok(out) => ctx.stdout.write_all(&out).await?,
                Err(()) => return fail(&ctx, "invalid input".into()).await,
            }
        } else {
            let mut enc = Encoder {
                wrap,
                column: 0,
                held: Vec::new(),
            };
            while let Some(piece) = input.read().await? {
                let out = enc.feed(&piece);
                ctx.stdout.write_all(&out).await?;
            }
            let out = enc.finish();
            ctx.stdout.write_all(&out).await?;
        }
        Ok(CommandStatus::success())
    }
}

/// Streaming encoder: whole 3-byte groups are encoded at once; up to two
/// bytes wait for the next piece.
struct Encoder {
    wrap: u64,
    column: u64,
    held: Vec<u8>,
}

impl Encoder {
    fn feed(&mut self, piece: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(piece);
        let whole = self.held.len() / 3 * 3;
        let text = STANDARD.encode(&self.held[..whole]);
        self.held.drain(..whole);
        self.wrapped(text.as_bytes())
    }

    fn finish(&mut self) -> Vec<u8> {
        let text = STANDARD.encode(&self.held);
        self.held.clear();
        let mut out = self.wrapped(text.as_bytes());
        if self.wrap > 0 && self.column > 0 {
            out.push(b'\n');
        }
        out
    }

    fn wrapped(&mut self, text: &[u8]) -> Vec<u8> {
        if self.wrap == 0 {
            return text.to_vec();
        }
        let mut out = Vec::with_capacity(text.len() + text.len() / self.wrap as usize + 1);
        for &c in text {
            out.push(c);
            self.column += 1;
            if self.column == self.wrap {
                out.push(b'\n');
                self.column = 0;
            }
        }
        out
    }
}

/// Streaming decoder: whitespace is skipped, whole 4-character groups are
/// decoded; padding may only end the input.
struct Decoder {
    ignore_garbage: bool,
    held: Vec<u8>,
}

impl Decoder {
    fn feed(&mut self, piece: &[u8]) -> Result<Vec<u8>, ()> {
        for &c in piece {
            let alphabet = c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=';
            if alphabet {
                self.held.push(c);
            } else if !(c.is_ascii_whitespace() || self.ignore_garbage) {
                return Err(());
            }
        }
        // Keep the last group back: it may hold padding and must be last.
        let mut whole = self.held.len() / 4 * 4;
        if whole == self.held.len() && whole > 0 {
            whole -= 4;
        }
        // These groups are not the last: padding in them is an error.
        if self.held[..whole].contains(&b'=') {
            return Err(());
        }
        let out = decode(&self.held[..whole])?;
        self.held.drain(..whole);
        Ok(out)
    }

    fn finish(&mut self) -> Result<Vec<u8>, ()> {
        let out = decode(&self.held)?;
        self.held.clear();
        Ok(out)
    }
}

fn decode(text: &[u8]) -> Result<Vec<u8>, ()> {
    if text[..text.len().saturating_sub(4)].contains(&b'=') {
        return Err(());
    }
    STANDARD.decode(text).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_in_pieces_matches_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
        let one = {
            let mut e = Encoder {
                wrap: 76,
                column: 0,
                held: Vec::new(),
            };
            let mut o = e.feed(&data);
            o.extend(e.finish());
            o
        };
        for cut in [1, 2, 3, 100, 999] {
            let mut e = Encoder {
                wrap: 76,
                column: 0,
                held: Vec::new(),
            };
            let mut o = e.feed(&data[..cut]);
            o.extend(e.feed(&data[cut..]));
            o.extend(e.finish());
            assert_eq!(o, one);
            let mut d = Decoder {
                ignore_garbage: false,
                held: Vec::new(),
            };
            let mut back = d.feed(&o[..cut]).unwrap();
            back.extend(d.feed(&o[cut..]).unwrap());
            back.extend(d.finish().unwrap());
            assert_eq!(back, data);
        }
        let lines = String::from_utf8(one).unwrap();
        assert!(lines.lines().all(|l| l.len() <= 76));
    }

    #[test]
    fn decoding_rejects_garbage_and_inner_padding() {
        let mut d = Decoder {
            ignore_garbage: false,
            held: Vec::new(),
        };
        assert!(d.feed(b"YQ==YQ==").and_then(|_| d.finish()).is_err());
        let mut d = Decoder {
            ignore_garbage: false,
            held: Vec::new(),
        };
        assert!(d.feed(b"Y!Q==").is_err());
        let mut d = Decoder {
            ignore_garbage: true,
            held: Vec::new(),
        };
        let mut out = d.feed(b"Y!Q==\n").unwrap();
        out.extend(d.finish().unwrap());
        assert_eq!(out, b"a");
    }
}
