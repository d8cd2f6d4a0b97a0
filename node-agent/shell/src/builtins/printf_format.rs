//! A `before_tool` hook that hands bashkit's `printf` a format it reads as
//! bash does.
//!
//! bashkit 0.20.2 removes every `\x0`/`\x00` from a format before parsing
//! it, without regard to a preceding `\\`: `printf '\\x00|'` printed `\|`
//! instead of `\x00|`, and `printf '\x00'` printed nothing instead of a NUL
//! byte. bash's printf (builtins/printf.def, `tescape`) reads `\\` as one
//! backslash and `\xHH` (one or two hex digits) as that byte, NUL included.
//! The hook rewrites those two escapes to octal forms with the same meaning
//! (`\134` is a backslash, `\000` a NUL), which bashkit handles correctly.
//!
//! bashkit's `%b` also took `\"` in an argument for a double quote, where
//! bash's `%b` (the escapes of `echo -e`) keeps both characters:
//! `printf %b 'a\"b'` prints `a\"b`. The hook doubles the backslash of
//! `\"` in each argument a `%b` conversion consumes.

use bashkit::hooks::{HookAction, ToolEvent};

/// Rewrites the format operand of `printf`; every other command passes
/// through untouched.
pub(crate) fn hook(mut event: ToolEvent) -> HookAction<ToolEvent> {
    if event.name == "printf"
        && let Some(i) = format_index(&event.args)
    {
        let slots = conversions(&event.args[i]);
        if slots.contains(&Slot::Bytes) {
            for (arg, slot) in event.args[i + 1..].iter_mut().zip(slots.iter().cycle()) {
                if *slot == Slot::Bytes {
                    *arg = keep_escaped_quotes(arg);
                }
            }
        }
        if let Some(fixed) = rewrite(&event.args[i]) {
            event.args[i] = fixed;
        }
    }
    HookAction::Continue(event)
}

/// What a format consumes from the arguments, one entry per argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A `%b` argument.
    Bytes,
    /// Any other conversion's argument, or a `*` width or precision.
    Other,
}

/// The arguments one pass of `format` consumes, in order. bash reuses the
/// format while arguments remain, so they map onto this cyclically.
fn conversions(format: &str) -> Vec<Slot> {
    let bytes = format.as_bytes();
    let mut slots = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        i += 1;
        if bytes.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        while i < bytes.len() && b"-+ #0'".contains(&bytes[i]) {
            i += 1;
        }
        let mut width_and_precision = |i: &mut usize| {
            if bytes.get(*i) == Some(&b'*') {
                slots.push(Slot::Other);
                *i += 1;
            }
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
        };
        width_and_precision(&mut i);
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            width_and_precision(&mut i);
        }
        while i < bytes.len() && b"hlLqjzt".contains(&bytes[i]) {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'b') => slots.push(Slot::Bytes),
            // `%(datefmt)T`: one argument, the time.
            Some(b'(') => {
                while i < bytes.len() && bytes[i] != b')' {
                    i += 1;
                }
                slots.push(Slot::Other);
            }
            Some(_) => slots.push(Slot::Other),
            None => {}
        }
        i += 1;
    }
    slots
}

/// `arg` with the backslash of each `\"` doubled (an escaped backslash
/// `\\` is left as it is), so bashkit's `%b` prints `\"` as bash does.
fn keep_escaped_quotes(arg: &str) -> String {
    if !arg.contains("\\\"") {
        return arg.to_string();
    }
    let mut out = String::with_capacity(arg.len() + 4);
    let mut chars = arg.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push_str("\\\\\""),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Index of the format operand: after `-v NAME` (or `-vNAME`) and `--`.
fn format_index(args: &[String]) -> Option<usize> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        match arg.as_str() {
            "-v" => i += 2,
            "--" => return (i + 1 < args.len()).then_some(i + 1),
            a if a.starts_with("-v") => i += 1,
            _ => return Some(i),
        }
    }
    None
}

/// The format with `\\` and zero `\x` escapes in octal, or `None` when it
/// holds no `\x` that bashkit could misread.
fn rewrite(format: &str) -> Option<String> {
    if !format.contains("\\x") {
        return None;
    }
    let bytes = format.as_bytes();
    let mut out = String::with_capacity(format.len() + 8);
    let mut i = 0;
    let mut last = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match bytes[i + 1] {
            b'\\' => {
                out.push_str(&format[last..i]);
                out.push_str("\\134");
                i += 2;
                last = i;
            }
            b'x' => {
                let digits = bytes[i + 2..]
                    .iter()
                    .take(2)
                    .take_while(|b| b.is_ascii_hexdigit())
                    .count();
                let zero = digits > 0 && bytes[i + 2..i + 2 + digits].iter().all(|&b| b == b'0');
                if zero {
                    out.push_str(&format[last..i]);
                    out.push_str("\\000");
                    last = i + 2 + digits;
                }
                i += 2 + digits;
            }
            // Any other escape is two bytes long as far as `\\` pairing goes.
            _ => i += 2,
        }
    }
    out.push_str(&format[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn escaped_backslash_before_x_is_kept() {
        assert_eq!(rewrite(r"\\x00|").as_deref(), Some(r"\134x00|"));
        assert_eq!(rewrite(r"a\x00b\x0").as_deref(), Some(r"a\000b\000"));
        assert_eq!(rewrite(r"\x41\x001").as_deref(), Some(r"\x41\0001"));
        assert_eq!(rewrite(r"\\\x00").as_deref(), Some(r"\134\000"));
        assert_eq!(rewrite(r"%s\n"), None);
    }

    #[test]
    fn b_arguments_keep_the_backslash_of_an_escaped_quote() {
        assert_eq!(keep_escaped_quotes(r#"a\"b"#), r#"a\\"b"#);
        assert_eq!(keep_escaped_quotes(r#"a\\"b"#), r#"a\\"b"#);
        assert_eq!(keep_escaped_quotes(r#"\n\"\"#), r#"\n\\"\"#);
        assert_eq!(
            conversions("%s %b %*d %.*b %% %(%F)T %5.2f"),
            [
                Slot::Other,
                Slot::Bytes,
                Slot::Other,
                Slot::Other,
                Slot::Other,
                Slot::Bytes,
                Slot::Other,
                Slot::Other
            ]
        );
        let HookAction::Continue(e) = hook(ToolEvent {
            name: "printf".into(),
            args: args(&["%s|%b\n", r#"\""#, r#"\""#, r#"\""#, r#"\""#]),
        }) else {
            panic!("cancelled")
        };
        assert_eq!(
            e.args,
            args(&["%s|%b\n", r#"\""#, r#"\\""#, r#"\""#, r#"\\""#])
        );
    }

    #[test]
    fn format_operand_follows_options() {
        assert_eq!(format_index(&args(&["-v", "x", "%s", "a"])), Some(2));
        assert_eq!(format_index(&args(&["-vx", "%s"])), Some(1));
        assert_eq!(format_index(&args(&["--", "-%s"])), Some(1));
        assert_eq!(format_index(&args(&["%s"])), Some(0));
        assert_eq!(format_index(&args(&["-v", "x"])), None);
    }

    #[test]
    fn hook_touches_only_printf() {
        let event = |name: &str| ToolEvent {
            name: name.into(),
            args: args(&[r"\\x00"]),
        };
        let HookAction::Continue(e) = hook(event("printf")) else {
            panic!("cancelled")
        };
        assert_eq!(e.args, [r"\134x00"]);
        let HookAction::Continue(e) = hook(event("echo")) else {
            panic!("cancelled")
        };
        assert_eq!(e.args, [r"\\x00"]);
    }
}
