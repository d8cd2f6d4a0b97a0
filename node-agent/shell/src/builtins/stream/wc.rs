//! `wc`: counts newlines, words, characters, bytes and the longest line of
//! each input in one streaming pass, printed in coreutils' order and
//! column widths.

use super::input::Input;
use super::{Env, fail, reason, short_flags};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Wc(pub Env);

#[derive(Default, Clone, Copy)]
struct Which {
    lines: bool,
    words: bool,
    chars: bool,
    bytes: bool,
    longest: bool,
}

impl Which {
    fn count(&self) -> usize {
        [self.lines, self.words, self.chars, self.bytes, self.longest]
            .iter()
            .filter(|x| **x)
            .count()
    }
}

/// Counts of one input, kept up to date piece by piece.
#[derive(Default, Clone, Copy)]
struct Counts {
    lines: u64,
    words: u64,
    chars: u64,
    bytes: u64,
    longest: u64,
    /// Display width of the current line so far.
    column: u64,
    in_word: bool,
}

impl Counts {
    /// Counts `piece` as coreutils' `wc` does in a UTF-8 locale: a word is
    /// a run of printable characters between white space (control
    /// characters and encoding errors neither start nor end one); `-m`
    /// counts characters, not encoding errors; `-L` counts display columns
    /// (tabs to the next multiple of 8, non-printables none).
    fn add(&mut self, piece: &[u8]) {
        self.bytes += piece.len() as u64;
        for &b in piece {
            // The first byte of a character: ASCII or a UTF-8 lead byte.
            let lead = b < 0x80 || (0xc2..=0xf4).contains(&b);
            let printable = (0x21..0x7f).contains(&b) || (0xc2..=0xf4).contains(&b);
            if lead {
                self.chars += 1;
            }
            match b {
                b'\n' => {
                    self.lines += 1;
                    self.longest = self.longest.max(self.column);
                    self.column = 0;
                }
                b'\t' => self.column = (self.column / 8 + 1) * 8,
                b'\r' | b'\x0c' => self.column = 0,
                b' ' => self.column += 1,
                _ if printable => self.column += 1,
                _ => {}
            }
            if matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
                self.in_word = false;
            } else if printable && !self.in_word {
                self.in_word = true;
                self.words += 1;
            }
        }
    }

    fn finish(&mut self) {
        self.longest = self.longest.max(self.column);
    }

    fn values(&self, which: &Which) -> Vec<u64> {
        let mut v = Vec::new();
        for (on, n) in [
            (which.lines, self.lines),
            (which.words, self.words),
            (which.chars, self.chars),
            (which.bytes, self.bytes),
            (which.longest, self.longest),
        ] {
            if on {
                v.push(n);
            }
        }
        v
    }
}

#[async_trait]
impl Command for Wc {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut which = Which::default();
        let mut files = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if !options_done && arg == "--" {
                options_done = true;
                continue;
            }
            if !options_done && arg.starts_with("--") {
                match arg.as_str() {
                    "--lines" => which.lines = true,
                    "--words" => which.words = true,
                    "--chars" => which.chars = true,
                    "--bytes" => which.bytes = true,
                    "--max-line-length" => which.longest = true,
                    _ => return fail(&ctx, format!("unrecognized option '{arg}'")).await,
                }
                continue;
            }
            match short_flags(arg).filter(|_| !options_done) {
                Some(flags) => {
                    for f in flags {
                        match f {
                            'l' => which.lines = true,
                            'w' => which.words = true,
                            'm' => which.chars = true,
                            'c' => which.bytes = true,
                            'L' => which.longest = true,
                            other => {
                                return fail(&ctx, format!("invalid option -- '{other}'")).await;
                            }
                        }
                    }
                }
                None => files.push(arg.clone()),
            }
        }
        if which.count() == 0 {
            which.lines = true;
            which.words = true;
            which.bytes = true;
        }
        // Only bytes: a regular file's size answers without reading it
        // (as coreutils does).
        let bytes_only = which.count() == 1 && which.bytes;

        let operands = files.is_empty();
        if operands {
            files.push("-".into());
        }
        let mut status = 0;
        let mut results: Vec<(Counts, Option<&str>)> = Vec::new();
        // Column width: coreutils sizes it from the regular files' sizes
        // (known before counting), at least 7 with any other input.
        let mut width_from = 0u64;
        let mut minimum = 1;
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
            match input.size {
                Some(size) if name != "-" => width_from += size,
                _ => minimum = 7,
            }
            let mut counts = Counts::default();
            match (bytes_only, input.size) {
                (true, Some(size)) if name != "-" => counts.bytes = size,
                _ => {
                    while let Some(piece) = input.read().await? {
                        counts.add(&piece);
                    }
                }
            }
            counts.finish();
            results.push((counts, (!operands).then_some(name.as_str())));
        }
        let width = if results.len() == 1 && which.count() == 1 {
            1
        } else {
            width_from.to_string().len().max(minimum)
        };
        let mut out = String::new();
        let mut total = Counts::default();
        for (counts, name) in &results {
            line(&mut out, &counts.values(&which), *name, width);
            total.lines += counts.lines;
            total.words += counts.words;
            total.chars += counts.chars;
            total.bytes += counts.bytes;
            total.longest = total.longest.max(counts.longest);
        }
        if files.len() > 1 {
            line(&mut out, &total.values(&which), Some("total"), width);
        }
        ctx.stdout.write_all(out.as_bytes()).await?;
        Ok(CommandStatus::with_code(status))
    }
}

fn line(out: &mut String, values: &[u64], name: Option<&str>, width: usize) {
    let cols: Vec<String> = values.iter().map(|v| format!("{v:>width$}")).collect();
    out.push_str(&cols.join(" "));
    if let Some(name) = name {
        out.push(' ');
        out.push_str(name);
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn counts_match_coreutils_across_piece_boundaries() {
        let text = "héllo wörld\n\tx  y\nlast";
        for cut in 0..text.len() {
            let mut c = Counts::default();
            c.add(&text.as_bytes()[..cut]);
            c.add(&text.as_bytes()[cut..]);
            c.finish();
            assert_eq!(
                (c.lines, c.words, c.chars, c.bytes),
                (2, 5, 22, 24),
                "cut {cut}"
            );
            assert_eq!(c.longest, 12);
        }
    }
}
