//! `xxd`: a hex dump of one input, or (`-r`) the bytes of a hex dump, made
//! one step of the input at a time.
//!
//! bashkit's `xxd` read its input whole, built the whole dump in one string
//! and took any `-c`: `xxd -c 900000000` padded every short row to that
//! width in one call that never checked the stop flag. This one holds a
//! row of at most [`MAX_COLS`] bytes (GNU's cap for the normal dump) and
//! the text made from one input step, and checks the stop flag at every
//! step. `-p` takes any `-c` as GNU does: it only says where lines break,
//! and nothing is padded.

use super::input::Input;
use super::{Env, fail, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Xxd(pub Env);

/// The widest row of the normal dump, bytes (GNU xxd's `COLS`).
const MAX_COLS: u64 = 256;

struct Args {
    /// Bytes per row; 0 in `-p` means one line.
    cols: Option<u64>,
    /// Bytes per group; 0 means one group per row.
    group: Option<u64>,
    /// Bytes to dump at most (`-l`).
    length: Option<u64>,
    /// Where to start (`-s`): from the start, or from the end (`-s -N`).
    seek: Seek,
    /// Added to every printed address (`-o`).
    displace: u64,
    plain: bool,
    reverse: bool,
    upper: bool,
    file: Option<String>,
}

#[derive(Clone, Copy)]
enum Seek {
    Start(u64),
    FromEnd(u64),
}

/// A number as GNU xxd reads it (`strtol` base 0: `0x1f`, `017`, `15`).
fn number(text: &str) -> Option<u64> {
    let t = text.strip_prefix('+').unwrap_or(text);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        cols: None,
        group: None,
        length: None,
        seek: Seek::Start(0),
        displace: 0,
        plain: false,
        reverse: false,
        upper: false,
        file: None,
    };
    let mut operands = Vec::new();
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if options_done || arg == "-" || !arg.starts_with('-') {
            operands.push(arg.clone());
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        let (name, inline) = match arg.find(|c: char| c.is_ascii_digit()) {
            Some(at) if at > 1 => (&arg[1..at], Some(arg[at..].to_string())),
            _ => (&arg[1..], None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            let v = args
                .get(i)
                .cloned()
                .ok_or_else(|| format!("option requires an argument -- '{what}'"))?;
            i += 1;
            Ok(v)
        };
        match name {
            "p" | "ps" | "postscript" | "plain" => a.plain = true,
            "r" | "revert" => a.reverse = true,
            "u" => a.upper = true,
            "c" | "cols" => {
                let v = value("c")?;
                a.cols =
                    Some(number(&v).ok_or_else(|| format!("invalid number of columns: '{v}'"))?);
            }
            "g" | "groupsize" => {
                let v = value("g")?;
                a.group = Some(number(&v).ok_or_else(|| format!("invalid group size: '{v}'"))?);
            }
            "l" | "len" => {
                let v = value("l")?;
                a.length = Some(number(&v).ok_or_else(|| format!("invalid length: '{v}'"))?);
            }
            "o" => {
                let v = value("o")?;
                a.displace = number(&v).ok_or_else(|| format!("invalid offset: '{v}'"))?;
            }
            "s" | "seek" => {
                let v = value("s")?;
                let bad = || format!("invalid seek offset: '{v}'");
                a.seek = match v.strip_prefix('-') {
                    Some(n) => Seek::FromEnd(number(n).ok_or_else(bad)?),
                    None => Seek::Start(number(&v).ok_or_else(bad)?),
                };
            }
            _ => {
                let shown = arg[1..].chars().next().unwrap_or('-');
                return Err(format!("invalid option -- '{shown}'"));
            }
        }
    }
    match operands.len() {
        0 => {}
        1 => a.file = Some(operands.remove(0)),
        _ => {
            return Err(format!(
                "{}: writing to an output file is not supported; use a redirection",
                operands[1]
            ));
        }
    }
    if !a.plain && !a.reverse && a.cols.is_some_and(|c| c > MAX_COLS) {
        return Err(format!("invalid number of columns (max. {MAX_COLS})."));
    }
    Ok(a)
}

#[async_trait]
impl Command for Xxd {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let args = match parse(ctx.args) {
            Ok(a) => a,
            Err(message) => return fail(&ctx, message).await,
        };
        let name = args.file.clone().unwrap_or_else(|| "-".into());
        let mut input = match Input::open(&ctx, &self.0, &name).await {
            Ok(input) => input,
            Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                return Err(e);
            }
            Err(e) => {
                super::warn(&ctx, format!("xxd: {name}: {}\n", reason(&e))).await?;
                return Ok(CommandStatus::with_code(2));
            }
        };
        if args.reverse {
            revert(&ctx, &mut input, args.plain).await?;
        } else {
            dump(&ctx, &mut input, &args).await?;
        }
        Ok(CommandStatus::with_code(0))
    }
}

/// Writes the dump of `input`, one input step of rows at a time.
async fn dump(ctx: &CommandContext<'_>, input: &mut Input, args: &Args) -> bashkit::Result<()> {
    let start = match (args.seek, input.size) {
        (Seek::Start(n), _) => n,
        (Seek::FromEnd(n), Some(size)) => size.saturating_sub(n),
        (Seek::FromEnd(_), None) => {
            super::warn(ctx, "xxd: Sorry, cannot seek.\n".into()).await?;
            return Ok(());
        }
    };
    let mut skip = start;
    if skip > 0 && input.seek(skip) {
        skip = 0;
    }
    let mut row = Row::new(args, start);
    let mut left = args.length.unwrap_or(u64::MAX);
    while left > 0 {
        let Some(piece) = input.read().await? else {
            break;
        };
        let cut = piece.len().min(usize::try_from(skip).unwrap_or(usize::MAX));
        skip -= cut as u64;
        let take = (piece.len() - cut).min(usize::try_from(left).unwrap_or(usize::MAX));
        left -= take as u64;
        let mut text = Vec::new();
        for &b in &piece[cut..cut + take] {
            row.push(b, &mut text);
        }
        ctx.stdout.write_all(&text).await?;
    }
    let mut text = Vec::new();
    row.finish(&mut text);
    ctx.stdout.write_all(&text).await
}

/// The row being filled, and how rows are laid out.
struct Row {
    plain: bool,
    /// Bytes per row (`u64::MAX`: one line, `-p -c 0`).
    cols: u64,
    group: u64,
    digits: &'static [u8; 16],
    /// Address of the row's first byte (the displacement added).
    address: u64,
    /// The row's bytes (normal dump, at most [`MAX_COLS`]), or how many
    /// the current plain line holds.
    bytes: Vec<u8>,
    in_line: u64,
}

impl Row {
    fn new(args: &Args, start: u64) -> Row {
        let cols = match (args.plain, args.cols) {
            (true, Some(0)) => u64::MAX,
            (true, Some(c)) => c,
            (true, None) => 30,
            (false, Some(c)) if c > 0 => c,
            (false, _) => 16,
        };
        let group = match args.group {
            Some(g) if g > 0 => g.min(cols),
            Some(_) => cols,
            None => 2.min(cols),
        };
        Row {
            plain: args.plain,
            cols,
            group,
            digits: if args.upper {
                b"0123456789ABCDEF"
            } else {
                b"0123456789abcdef"
            },
            address: start.wrapping_add(args.displace),
            bytes: Vec::new(),
            in_line: 0,
        }
    }

    fn hex(&self, b: u8, out: &mut Vec<u8>) {
        out.push(self.digits[usize::from(b >> 4)]);
        out.push(self.digits[usize::from(b & 15)]);
    }

    /// Adds byte `b`, writing a finished row or line to `out`.
    fn push(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.plain {
            self.hex(b, out);
            self.in_line += 1;
            if self.in_line == self.cols {
                out.push(b'\n');
                self.in_line = 0;
            }
            return;
        }
        self.bytes.push(b);
        if self.bytes.len() as u64 == self.cols {
            self.flush(out);
        }
    }

    /// Writes what is left of the last row or line.
    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.plain {
            if self.in_line > 0 {
                out.push(b'\n');
            }
        } else if !self.bytes.is_empty() {
            self.flush(out);
        }
    }

    /// Writes one row of the normal dump: address, hex in groups padded to
    /// the full row's width, then the printable characters.
    fn flush(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{:08x}: ", self.address).as_bytes());
        for i in 0..self.cols {
            match self.bytes.get(i as usize) {
                Some(&b) => self.hex(b, out),
                None => out.extend_from_slice(b"  "),
            }
            if (i + 1) % self.group == 0 || i + 1 == self.cols {
                out.push(b' ');
            }
        }
        out.push(b' ');
        for &b in &self.bytes {
            out.push(if (0x20..0x7f).contains(&b) { b } else { b'.' });
        }
        out.push(b'\n');
        self.address = self.address.wrapping_add(self.bytes.len() as u64);
        self.bytes.clear();
    }
}

/// Writes the bytes of a hex dump. With `plain`, every pair of hex digits
/// is a byte and anything else is skipped; otherwise each line's address
/// (up to `:`) and its text column (after two spaces) are skipped.
async fn revert(ctx: &CommandContext<'_>, input: &mut Input, plain: bool) -> bashkit::Result<()> {
    // Line state of the normal form: before the `:`, in the hex column,
    // or in the text column; the pending high nibble.
    #[derive(PartialEq)]
    enum Column {
        Address,
        Hex,
        Text,
    }
    let mut column = if plain { Column::Hex } else { Column::Address };
    let mut spaces = 0;
    let mut high: Option<u8> = None;
    while let Some(piece) = input.read().await? {
        let mut out = Vec::with_capacity(piece.len() / 2);
        for &c in &piece {
            if !plain {
                match (c, &column) {
                    (b'\n', _) => {
                        column = Column::Address;
                        spaces = 0;
                        high = None;
                        continue;
                    }
                    (b':', Column::Address) => {
                        column = Column::Hex;
                        continue;
                    }
                    (_, Column::Address | Column::Text) => continue,
                    (b' ', Column::Hex) => {
                        spaces += 1;
                        if spaces == 2 {
                            column = Column::Text;
                        }
                        continue;
                    }
                    _ => spaces = 0,
                }
            }
            let Some(nibble) = (c as char).to_digit(16) else {
                continue;
            };
            match high.take() {
                Some(h) => out.push((h << 4) | nibble as u8),
                None => high = Some(nibble as u8),
            }
        }
        ctx.stdout.write_all(&out).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn normal_rows_are_capped_plain_lines_are_not() {
        let e = args(&["-c", "900000000"]).err().unwrap();
        assert_eq!(e, "invalid number of columns (max. 256).");
        assert!(args(&["-c257"]).is_err());
        assert_eq!(args(&["-c", "256"]).unwrap().cols, Some(256));
        assert_eq!(
            args(&["-p", "-c", "900000000"]).unwrap().cols,
            Some(900000000)
        );
        assert_eq!(args(&["-g", "900000000"]).unwrap().group, Some(900000000));
        assert!(matches!(
            args(&["-s", "0x10"]).unwrap().seek,
            Seek::Start(16)
        ));
        assert!(matches!(
            args(&["-s", "-8"]).unwrap().seek,
            Seek::FromEnd(8)
        ));
        assert!(args(&["-l", "x"]).is_err());
    }
}
