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

use bashkit::hooks::{HookAction, ToolEvent};

/// Rewrites the format operand of `printf`; every other command passes
/// through untouched.
pub(crate) fn hook(mut event: ToolEvent) -> HookAction<ToolEvent> {
    if event.name == "printf"
        && let Some(i) = format_index(&event.args)
        && let Some(fixed) = rewrite(&event.args[i])
    {
        event.args[i] = fixed;
    }
    HookAction::Continue(event)
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
