//! `seq`: numbers from FIRST by INCREMENT to LAST, written in steps as they
//! are made, for any count (bashkit's `seq` stops at 100 000 lines or
//! 1 MiB). Options as coreutils: `-s SEP`, `-w`, `-f FORMAT`.
//!
//! Integers are counted exactly (128-bit); other numbers as `f64` values
//! `FIRST + i * INCREMENT`, printed with as many decimals as FIRST or
//! INCREMENT has, as coreutils does.

use super::{Env, fail};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

pub(crate) struct Seq(pub Env);

/// Output is written once this many bytes are pending.
const FLUSH_BYTES: usize = 16 * 1024;

/// A parsed command line.
#[derive(Debug)]
struct Args {
    separator: String,
    equal_width: bool,
    format: Option<Format>,
    operands: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        separator: "\n".into(),
        equal_width: false,
        format: None,
        operands: Vec::new(),
    };
    let mut i = 0;
    let mut options_done = false;
    let value = |i: &mut usize, inline: &str, opt: &str| -> Result<String, String> {
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
        // A negative number is an operand, not an option.
        let numeric =
            arg.len() > 1 && arg[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.');
        if options_done || !arg.starts_with('-') || arg == "-" || numeric {
            out.operands.push(arg.clone());
        } else if arg == "--" {
            options_done = true;
        } else if let Some(v) = arg.strip_prefix("--separator=") {
            out.separator = v.to_string();
        } else if let Some(v) = arg.strip_prefix("--format=") {
            out.format = Some(Format::parse(v)?);
        } else if arg == "--equal-width" {
            out.equal_width = true;
        } else if arg.starts_with("--") {
            return Err(format!("unrecognized option '{arg}'"));
        } else {
            let flags = &arg[1..];
            for (pos, f) in flags.char_indices() {
                let rest = &flags[pos + 1..];
                match f {
                    's' => {
                        out.separator = value(&mut i, rest, "s")?;
                        break;
                    }
                    'f' => {
                        out.format = Some(Format::parse(&value(&mut i, rest, "f")?)?);
                        break;
                    }
                    'w' => out.equal_width = true,
                    other => return Err(format!("invalid option -- '{other}'")),
                }
            }
        }
        i += 1;
    }
    if out.format.is_some() && out.equal_width {
        return Err("format string may not be specified when printing equal width strings".into());
    }
    match out.operands.len() {
        0 => Err("missing operand".into()),
        1..=3 => Ok(out),
        _ => Err(format!("extra operand '{}'", out.operands[3])),
    }
}

/// One operand: its value and the decimals it is written with.
#[derive(Debug, Clone, Copy)]
struct Number {
    value: f64,
    /// Exact value when the operand is an integer.
    integer: Option<i128>,
    decimals: usize,
}

fn number(text: &str) -> Result<Number, String> {
    let invalid = || format!("invalid floating point argument: '{text}'");
    let t = text.trim_start();
    let body = t.strip_prefix('+').unwrap_or(t);
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
    {
        return Err(invalid());
    }
    let value: f64 = body.parse().map_err(|_| invalid())?;
    if value.is_nan() {
        return Err(invalid());
    }
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (
            &body[..at],
            body[at + 1..].parse::<i64>().map_err(|_| invalid())?,
        ),
        None => (body, 0),
    };
    let fraction = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i64;
    let decimals = (fraction - exponent).max(0) as usize;
    let integer = (decimals == 0 && value.abs() < 1e30)
        .then(|| {
            if exponent == 0 {
                body.parse::<i128>().ok()
            } else {
                Some(value as i128)
            }
        })
        .flatten();
    Ok(Number {
        value,
        integer,
        decimals,
    })
}

/// Largest field width or precision of a `-f` format, as bashkit's `printf`
/// and `awk` allow: each number is rendered into a buffer of that size, so
/// `seq -f %01000000000g 1 1` would otherwise allocate a gigabyte.
const MAX_FORMAT_WIDTH: usize = 10_000;

/// A width or precision of a format (`""` is 0); refused past
/// [`MAX_FORMAT_WIDTH`] with `format <what> N exceeds limit 10000`.
fn bounded(digits: &str, what: &str) -> Result<usize, String> {
    match digits.parse::<usize>() {
        Ok(n) if n <= MAX_FORMAT_WIDTH => Ok(n),
        _ if digits.is_empty() => Ok(0),
        _ => Err(format!(
            "format {what} {digits} exceeds limit {MAX_FORMAT_WIDTH}"
        )),
    }
}

/// A `-f` format: text around one `%` directive for a floating value.
#[derive(Debug, Clone)]
struct Format {
    before: String,
    after: String,
    flags: String,
    width: usize,
    precision: Option<usize>,
    conversion: char,
}

impl Format {
    fn parse(text: &str) -> Result<Format, String> {
        let literal = |s: &str| s.replace("%%", "%");
        let mut at = None;
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                if bytes.get(i + 1) == Some(&b'%') {
                    i += 2;
                    continue;
                }
                if at.is_some() {
                    return Err(format!("format '{text}' has too many % directives"));
                }
                at = Some(i);
            }
            i += 1;
        }
        let Some(start) = at else {
            return Err(format!("format '{text}' has no % directive"));
        };
        let rest = &text[start + 1..];
        let flags_len = rest
            .find(|c: char| !"-+ #0'".contains(c))
            .unwrap_or(rest.len());
        let flags = &rest[..flags_len];
        let rest = &rest[flags_len..];
        let width_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let width = bounded(&rest[..width_len], "width")?;
        let mut rest = &rest[width_len..];
        let mut precision = None;
        if let Some(p) = rest.strip_prefix('.') {
            let len = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
            precision = Some(bounded(&p[..len], "precision")?);
            rest = &p[len..];
        }
        let rest = rest.strip_prefix('L').unwrap_or(rest);
        let mut chars = rest.chars();
        let conversion = match chars.next() {
            Some(c @ ('f' | 'F' | 'e' | 'E' | 'g' | 'G')) => c,
            _ => {
                return Err(format!(
                    "format '{text}' has unknown %{} directive",
                    rest.chars().next().map(String::from).unwrap_or_default()
                ));
            }
        };
        Ok(Format {
            before: literal(&text[..start]),
            after: literal(chars.as_str()),
            flags: flags.to_string(),
            width,
            precision,
            conversion,
        })
    }

    fn render(&self, value: f64) -> String {
        let precision = self.precision.unwrap_or(6);
        let alternate = self.flags.contains('#');
        let mut body = match self.conversion {
            'f' | 'F' => format!("{:.*}", precision, value.abs()),
            'e' | 'E' => exponential(value.abs(), precision),
            _ => general(value.abs(), precision, alternate),
        };
        if self.conversion.is_ascii_uppercase() {
            body = body.to_uppercase();
        }
        let sign = if value.is_sign_negative() && value != 0.0 || value < 0.0 {
            "-"
        } else if self.flags.contains('+') {
            "+"
        } else if self.flags.contains(' ') {
            " "
        } else {
            ""
        };
        let len = sign.len() + body.len();
        let pad = self.width.saturating_sub(len);
        let field = if self.flags.contains('-') {
            format!("{sign}{body}{}", " ".repeat(pad))
        } else if self.flags.contains('0') {
            format!("{sign}{}{body}", "0".repeat(pad))
        } else {
            format!("{}{sign}{body}", " ".repeat(pad))
        };
        format!("{}{field}{}", self.before, self.after)
    }
}

/// C's `%.Pe` of a non-negative value: `1.500000e+00`.
fn exponential(value: f64, precision: usize) -> String {
    let text = format!("{:.*e}", precision, value);
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// C's `%.Pg` of a non-negative value: the shorter of `%e` and `%f` at P
/// significant digits, trailing zeros removed unless `#`.
fn general(value: f64, precision: usize, alternate: bool) -> String {
    let p = precision.max(1);
    let exponent = if value == 0.0 {
        0
    } else {
        // The exponent after rounding to P significant digits.
        let text = format!("{:.*e}", p - 1, value);
        text.split_once('e')
            .and_then(|(_, e)| e.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let mut text = if exponent < -4 || exponent >= p as i32 {
        exponential(value, p - 1)
    } else {
        format!("{:.*}", (p as i32 - 1 - exponent).max(0) as usize, value)
    };
    if !alternate && text.contains('.') {
        let (mantissa, suffix) = match text.find('e') {
            Some(at) => text.split_at(at),
            None => (text.as_str(), ""),
        };
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        text = format!("{mantissa}{suffix}");
    }
    text
}

/// Pads `text` with zeros after its sign to `width` characters.
fn zero_pad(text: String, width: usize) -> String {
    if text.len() >= width {
        return text;
    }
    let (sign, digits) = match text.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", text.as_str()),
    };
    format!("{sign}{}{digits}", "0".repeat(width - text.len()))
}

#[async_trait]
impl Command for Seq {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let args = match parse_args(ctx.args) {
            Ok(a) => a,
            Err(message) => return fail(&ctx, message).await,
        };
        let mut numbers = Vec::new();
        for text in &args.operands {
            match number(text) {
                Ok(n) => numbers.push(n),
                Err(message) => return fail(&ctx, message).await,
            }
        }
        let one = Number {
            value: 1.0,
            integer: Some(1),
            decimals: 0,
        };
        let (first, step, last) = match numbers.as_slice() {
            [last] => (one, one, *last),
            [first, last] => (*first, one, *last),
            [first, step, last] => (*first, *step, *last),
            _ => unreachable!("parse_args allows one to three operands"),
        };
        if step.value == 0.0 {
            let text = &args.operands[1];
            return fail(&ctx, format!("invalid Zero increment value: '{text}'")).await;
        }
        let decimals = first.decimals.max(step.decimals);
        let plain = |v: f64| format!("{:.*}", decimals, v);
        let width = if args.equal_width {
            plain(first.value).len().max(plain(last.value).len())
        } else {
            0
        };
        let render = |v: f64| match &args.format {
            Some(f) => f.render(v),
            None => zero_pad(plain(v), width),
        };

        let mut pending = String::new();
        let mut wrote_any = false;
        let mut emit = |text: String, pending: &mut String| {
            if wrote_any {
                pending.push_str(&args.separator);
            }
            wrote_any = true;
            pending.push_str(&text);
        };
        match (first.integer, step.integer, last.integer, &args.format) {
            (Some(a), Some(s), Some(b), None) => {
                let mut v = a;
                while (s > 0 && v <= b) || (s < 0 && v >= b) {
                    emit(zero_pad(v.to_string(), width), &mut pending);
                    if pending.len() >= FLUSH_BYTES {
                        self.flush(&ctx, &mut pending).await?;
                    }
                    let Some(next) = v.checked_add(s) else { break };
                    v = next;
                }
            }
            _ => {
                let mut i: u64 = 0;
                loop {
                    let v = first.value + i as f64 * step.value;
                    if (step.value > 0.0 && v > last.value) || (step.value < 0.0 && v < last.value)
                    {
                        break;
                    }
                    emit(render(v), &mut pending);
                    if pending.len() >= FLUSH_BYTES {
                        self.flush(&ctx, &mut pending).await?;
                    }
                    i += 1;
                }
            }
        }
        if wrote_any {
            pending.push('\n');
        }
        self.flush(&ctx, &mut pending).await?;
        Ok(CommandStatus::with_code(0))
    }
}

impl Seq {
    /// Writes what is pending, after checking the exec may go on.
    async fn flush(&self, ctx: &CommandContext<'_>, pending: &mut String) -> bashkit::Result<()> {
        if self.0.budget.step_stopped() {
            return Err(self.0.budget.stop_error());
        }
        if !pending.is_empty() {
            ctx.stdout.write_all(pending.as_bytes()).await?;
            pending.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_carry_their_decimals() {
        assert_eq!(number("1.50").unwrap().decimals, 2);
        assert_eq!(number("1e2").unwrap().integer, Some(100));
        assert_eq!(number("-3").unwrap().integer, Some(-3));
        assert!(number("abc").is_err());
        assert!(number("nan").is_err());
    }

    #[test]
    fn formats_follow_c_printf() {
        let f = Format::parse("%g").unwrap();
        assert_eq!(f.render(1.5), "1.5");
        assert_eq!(f.render(2.0), "2");
        assert_eq!(f.render(1e7), "1e+07");
        assert_eq!(Format::parse("%e").unwrap().render(1.0), "1.000000e+00");
        assert_eq!(Format::parse("%03.1f").unwrap().render(1.0), "1.0");
        assert_eq!(Format::parse("x%05.1fy").unwrap().render(-1.0), "x-01.0y");
        assert!(Format::parse("%d").is_err());
        assert!(Format::parse("%f %f").is_err());
    }

    #[test]
    fn widths_and_precisions_past_the_limit_are_refused_before_rendering() {
        assert_eq!(
            Format::parse("%01000000000g").unwrap_err(),
            "format width 1000000000 exceeds limit 10000"
        );
        assert_eq!(
            Format::parse("%.99999999999999999999f").unwrap_err(),
            "format precision 99999999999999999999 exceeds limit 10000"
        );
        assert_eq!(Format::parse("%010000.10000f").unwrap().width, 10_000);
    }

    #[test]
    fn equal_width_pads_after_the_sign() {
        assert_eq!(zero_pad("-3".into(), 2), "-3");
        assert_eq!(zero_pad("1".into(), 2), "01");
        assert_eq!(zero_pad("-1".into(), 3), "-01");
    }
}
