//! A `before_tool` hook that gives `bash -s ARG...` (and `sh -s`) its
//! arguments.
//!
//! With `-s` bash reads the script from standard input and the operands
//! are its positional parameters, `$0` being the shell's name: the usual
//! `curl -fsSL URL | bash -s -- --flag`. bashkit 0.20.2 accepts `-s` and
//! ignores it, so the first operand was taken for a script file (`bash:
//! arg1: No such file or directory`, status 127). bashkit's `bash` with
//! neither `-c` nor a file already runs its standard input; the hook
//! writes `-s` as `-c 'eval "$(cat)"' NAME`, the same script (read whole,
//! as bashkit reads it) run with those parameters. Without operands, with
//! `-c`, or for any other command the arguments pass through untouched.

use bashkit::hooks::{HookAction, ToolEvent};

/// The `-c` string that runs the shell's standard input as its script.
const RUN_STDIN: &str = "eval \"$(cat)\"";

/// Rewrites `bash`/`sh` arguments that hold `-s` and operands.
pub(crate) fn hook(mut event: ToolEvent) -> HookAction<ToolEvent> {
    if (event.name == "bash" || event.name == "sh")
        && let Some(args) = rewrite(&event.name, &event.args)
    {
        event.args = args;
    }
    HookAction::Continue(event)
}

/// `args` with `-s` written as `-c RUN_STDIN NAME`, when they hold `-s`
/// (alone or among other single-letter flags), no `-c`, and at least one
/// operand; else `None`.
fn rewrite(name: &str, args: &[String]) -> Option<Vec<String>> {
    let mut options: Vec<String> = Vec::new();
    let mut stdin_flag = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" || arg == "-" {
            i += 1;
            break;
        }
        if arg.starts_with("--") {
            // `--rcfile FILE` and the like take the next word.
            options.push(arg.clone());
            if matches!(arg.as_str(), "--rcfile" | "--init-file" | "--wordexp") {
                options.extend(args.get(i + 1).cloned());
                i += 1;
            }
            i += 1;
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            break;
        };
        if flags.is_empty() {
            break;
        }
        let on = arg.starts_with('-');
        if on && flags.contains('c') {
            return None;
        }
        if on && flags.contains('s') {
            stdin_flag = true;
            let rest: String = flags.chars().filter(|&c| c != 's').collect();
            if !rest.is_empty() {
                options.push(format!("-{rest}"));
            }
        } else {
            options.push(arg.clone());
        }
        // `-o NAME`, `-O NAME` (and the `+` forms) take the next word.
        if flags.contains('o') || flags.contains('O') {
            options.extend(args.get(i + 1).cloned());
            i += 1;
        }
        i += 1;
    }
    let operands = &args[i.min(args.len())..];
    if !stdin_flag || operands.is_empty() {
        return None;
    }
    options.extend(["-c".to_string(), RUN_STDIN.to_string(), name.to_string()]);
    options.extend(operands.iter().cloned());
    Some(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn stdin_scripts_get_their_operands() {
        assert_eq!(
            rewrite("bash", &args(&["-s", "a", "b"])),
            Some(args(&["-c", RUN_STDIN, "bash", "a", "b"]))
        );
        assert_eq!(
            rewrite("sh", &args(&["-es", "--", "--flag"])),
            Some(args(&["-e", "-c", RUN_STDIN, "sh", "--flag"]))
        );
        assert_eq!(
            rewrite("bash", &args(&["-o", "pipefail", "-s", "x"])),
            Some(args(&["-o", "pipefail", "-c", RUN_STDIN, "bash", "x"]))
        );
    }

    #[test]
    fn other_invocations_pass_through() {
        assert_eq!(rewrite("bash", &args(&["-s"])), None);
        assert_eq!(rewrite("bash", &args(&["-s", "--"])), None);
        assert_eq!(rewrite("bash", &args(&["-s", "-c", "echo hi"])), None);
        assert_eq!(rewrite("bash", &args(&["script.sh", "-s"])), None);
        assert_eq!(rewrite("bash", &args(&["+s", "x"])), None);
    }
}
