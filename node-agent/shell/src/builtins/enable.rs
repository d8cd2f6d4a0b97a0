//! `enable [-a] [-dnps] [-f FILE] [NAME ...]`: the shell builtins, as bash
//! lists them.
//!
//! bashkit's `enable` listed every command it has (`cat`, `awk`, `jq`...,
//! which bash runs as programs and `type` reports at `/usr/bin`) and
//! failed `enable -n` even with no name. This one knows bash 5.2's
//! builtins ([`BASH_BUILTINS`], those the runtime answers):
//!
//! - no name (`-a`, `-p` alike): `enable NAME` per builtin, sorted; `-s`
//!   the POSIX special builtins only; `-n` lists disabled ones: none;
//! - `NAME ...`: status 0 when each is a builtin, else `enable: NAME: not a
//!   shell builtin`, status 1;
//! - `-n NAME`, `-f`, `-d`: disabling or loading builtins is not supported
//!   here: a message saying so, status 1 (loud, nothing changes);
//! - another option: `invalid option` and the usage line, status 2.

use async_trait::async_trait;
use bashkit::{Builtin, BuiltinContext, ExecResult};

/// `enable`, registered in place of bashkit's.
pub(crate) struct Enable;

/// GNU bash 5.2's builtins (`enable -a`), in its order.
const BASH_BUILTINS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

/// The POSIX special builtins (`enable -s`).
const SPECIAL: &[&str] = &[
    ".", ":", "break", "continue", "eval", "exec", "exit", "export", "readonly", "return", "set",
    "shift", "source", "times", "trap", "unset",
];

const USAGE: &str = "enable: usage: enable [-a] [-dnps] [-f filename] [name ...]\n";

/// The builtins the runtime answers.
fn builtins() -> impl Iterator<Item = &'static str> {
    let have = crate::auto::shell_commands();
    BASH_BUILTINS.iter().copied().filter(|n| have.contains(*n))
}

fn enable(args: &[String]) -> ExecResult {
    let mut special = false;
    let mut disable = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg.len() < 2 {
            break;
        }
        for flag in arg[1..].chars() {
            match flag {
                'a' | 'p' => {}
                's' => special = true,
                'n' => disable = true,
                'f' | 'd' => {
                    return ExecResult::err(
                        format!(
                            "enable: -{flag}: loading builtins is not supported by the shell \
                             runtime\n"
                        ),
                        1,
                    );
                }
                _ => {
                    return ExecResult::err(format!("enable: -{flag}: invalid option\n{USAGE}"), 2);
                }
            }
        }
        i += 1;
    }
    let names = &args[i..];
    if names.is_empty() {
        if disable {
            // Nothing is ever disabled.
            return ExecResult::ok(String::new());
        }
        let list: String = builtins()
            .filter(|n| !special || SPECIAL.contains(n))
            .map(|n| format!("enable {n}\n"))
            .collect();
        return ExecResult::ok(list);
    }
    let mut stderr = String::new();
    for name in names {
        if !builtins().any(|n| n == name) {
            stderr.push_str(&format!("enable: {name}: not a shell builtin\n"));
        } else if disable {
            stderr.push_str(&format!(
                "enable: {name}: disabling builtins is not supported by the shell runtime\n"
            ));
        }
    }
    match stderr.is_empty() {
        true => ExecResult::ok(String::new()),
        false => ExecResult::err(stderr, 1),
    }
}

#[async_trait]
impl Builtin for Enable {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        Ok(enable(ctx.args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(a: &[&str]) -> (String, String, i32) {
        let args: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        let r = enable(&args);
        (
            r.stdout.text_lossy().into_owned(),
            r.stderr.text_lossy().into_owned(),
            r.exit_code,
        )
    }

    #[test]
    fn lists_bash_builtins_only() {
        let (out, _, code) = run(&[]);
        assert_eq!(code, 0);
        assert!(
            out.starts_with("enable .\nenable :\nenable [\nenable alias\n"),
            "{out}"
        );
        assert!(!out.contains("enable cat\n"));
        assert_eq!(run(&["-a"]).0, out);
        let (special, _, _) = run(&["-s"]);
        assert!(
            special.starts_with("enable .\nenable :\nenable break\n"),
            "{special}"
        );
        assert!(special.ends_with("enable unset\n"));
        assert_eq!(run(&["-n"]), (String::new(), String::new(), 0));
    }

    #[test]
    fn names_are_checked_and_disabling_is_refused() {
        assert_eq!(run(&["cd", "echo"]).2, 0);
        assert_eq!(run(&["cat"]).1, "enable: cat: not a shell builtin\n");
        assert_eq!(run(&["-n", "echo"]).2, 1);
        assert_eq!(run(&["-x"]).2, 2);
    }
}
