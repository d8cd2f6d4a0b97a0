//! The git subcommands, one file each, and what they share: global
//! options, opening the repository, and resolving typed paths.

mod add;
mod branch;
mod checkout;
mod clone;
mod commit;
mod config;
mod diff;
mod fetch;
mod init;
mod log;
mod ls_files;
mod merge;
mod mv;
mod push;
mod reset;
mod rev_parse;
mod rm;
mod show;
mod status;
mod tag;

use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::{Invocation, Output};

/// The version `git --version` reports: the real git release whose
/// behaviour the commands follow.
pub(crate) const GIT_VERSION: &str = "2.39.5";

/// The commands implemented, for `git help` and the docs.
pub(crate) const COMMANDS: &[&str] = &[
    "add",
    "branch",
    "checkout",
    "clone",
    "commit",
    "config",
    "diff",
    "fetch",
    "init",
    "log",
    "ls-files",
    "merge",
    "mv",
    "pull",
    "push",
    "reset",
    "restore",
    "rev-parse",
    "rm",
    "show",
    "status",
    "switch",
    "tag",
];

/// Runs `args` (without `git`); returns the exit status.
pub(crate) fn dispatch(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut i = 0;
    let mut cwd = inv.cwd.clone();
    while i < args.len() && args[i].starts_with('-') {
        match args[i].as_str() {
            "-C" => {
                let dir = args
                    .get(i + 1)
                    .ok_or_else(|| Error::Usage("error: switch `C' requires a value".into()))?;
                let here = Invocation {
                    cwd: cwd.clone(),
                    files: inv.files.clone(),
                    shown_root: inv.shown_root.clone(),
                    env: inv.env,
                    stop: inv.stop,
                    fallback_name: String::new(),
                    fallback_email: String::new(),
                    transport: None,
                };
                cwd = here.engine_path(dir.as_bytes()).ok_or_else(|| {
                    Error::fatal(format!(
                        "cannot change to '{dir}': No such file or directory"
                    ))
                })?;
                i += 2;
            }
            "--no-pager" | "--paginate" | "-P" | "--no-replace-objects" => i += 1,
            "-c" => i += 2,
            "--version" | "-v" => {
                out.stdout
                    .extend_from_slice(format!("git version {GIT_VERSION}\n").as_bytes());
                return Ok(0);
            }
            "--help" | "-h" => {
                out.stdout.extend_from_slice(usage().as_bytes());
                return Ok(0);
            }
            other => {
                return Err(Error::Usage(format!(
                    "unknown option: {other}\n{}",
                    usage()
                )));
            }
        }
    }
    let Some(name) = args.get(i) else {
        out.stdout.extend_from_slice(usage().as_bytes());
        return Ok(1);
    };
    let inv = Invocation {
        files: inv.files.clone(),
        cwd,
        shown_root: inv.shown_root.clone(),
        env: inv.env,
        stop: inv.stop,
        fallback_name: inv.fallback_name.clone(),
        fallback_email: inv.fallback_email.clone(),
        transport: inv.transport,
    };
    let valued = match name.as_str() {
        "commit" => "mFcCt",
        "log" => "n",
        "branch" | "checkout" => "bB",
        "switch" => "cC",
        "tag" | "merge" => "m",
        "restore" => "s",
        "init" => "b",
        _ => "",
    };
    // `status -uall` is an option with an attached optional value, not a bundle.
    let rest = &if name == "status" {
        args[i + 1..].to_vec()
    } else {
        expand_bundled(&args[i + 1..], valued)
    };
    let o = &mut *out;
    match name.as_str() {
        "init" => init::run(&inv, rest, o),
        "add" => add::run(&inv, rest, o),
        "rm" => rm::run(&inv, rest, o),
        "mv" => mv::run(&inv, rest, o),
        "commit" => commit::run(&inv, rest, o),
        "status" => status::run(&inv, rest, o),
        "log" => log::run(&inv, rest, o),
        "ls-files" => ls_files::run(&inv, rest, o),
        "show" => show::run(&inv, rest, o),
        "diff" => diff::run(&inv, rest, o),
        "branch" => branch::run(&inv, rest, o),
        "checkout" => checkout::checkout(&inv, rest, o),
        "switch" => checkout::switch(&inv, rest, o),
        "restore" => checkout::restore(&inv, rest, o),
        "reset" => reset::run(&inv, rest, o),
        "tag" => tag::run(&inv, rest, o),
        "merge" => merge::run(&inv, rest, o),
        "clone" => clone::run(&inv, rest, o),
        "fetch" => fetch::fetch(&inv, rest, o),
        "pull" => fetch::pull(&inv, rest, o),
        "push" => push::run(&inv, rest, o),
        "rev-parse" => rev_parse::run(&inv, rest, o),
        "config" => config::run(&inv, rest, o),
        "version" => {
            o.stdout
                .extend_from_slice(format!("git version {GIT_VERSION}\n").as_bytes());
            Ok(0)
        }
        "help" => {
            o.stdout.extend_from_slice(usage().as_bytes());
            Ok(0)
        }
        other => Err(Error::Failed {
            code: 1,
            message: format!(
                "git: '{other}' is not a git command here. The commands this runtime has: {}.\nReal git runs in the container runtime (--runtime container).",
                COMMANDS.join(", ")
            ),
        }),
    }
}

/// Splits bundled short options as git's parse-options does: `-qam MSG`
/// is `-q -a -m MSG`, and a letter in `valued` takes the rest of the word
/// as its value (`-mfix` is `-m fix`). Numbers (`-5`) and everything after
/// `--` stay as they are.
fn expand_bundled(args: &[String], valued: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut done = false;
    for a in args {
        let bundled = !done
            && a.len() > 2
            && a.starts_with('-')
            && !a.starts_with("--")
            && !a[1..].starts_with(|c: char| c.is_ascii_digit());
        if a == "--" {
            done = true;
        }
        if !bundled {
            out.push(a.clone());
            continue;
        }
        let letters = &a[1..];
        for (i, c) in letters.char_indices() {
            out.push(format!("-{c}"));
            if valued.contains(c) {
                let value = &letters[i + c.len_utf8()..];
                if !value.is_empty() {
                    out.push(value.to_string());
                }
                break;
            }
        }
    }
    out
}

fn usage() -> String {
    format!(
        "usage: git [-C <path>] [--version] <command> [<args>]\n\nCommands in this runtime:\n   {}\n",
        COMMANDS.join("\n   ")
    )
}

/// Opens the repository around the invocation's directory.
pub(crate) fn open(inv: &Invocation) -> Result<Repo> {
    Repo::discover(&inv.files, &inv.cwd)
}

/// The repository paths the typed `args` name. Errors: git's
/// "'…' is outside repository at '…'".
pub(crate) fn pathspecs(inv: &Invocation, repo: &Repo, args: &[String]) -> Result<Vec<Vec<u8>>> {
    args.iter()
        .map(|a| {
            inv.engine_path(a.as_bytes())
                .and_then(|abs| crate::paths::repo_path(&repo.top, b"/", &abs))
                .ok_or_else(|| {
                    Error::fatal(format!(
                        "{a}: '{a}' is outside repository at '{}'",
                        inv.shown(&repo.top)
                    ))
                })
        })
        .collect()
}

/// Splits `args` at a `--`: (before, after, whether there was one).
pub(crate) fn split_dashdash(args: &[String]) -> (Vec<String>, Vec<String>, bool) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec(), true),
        None => (args.to_vec(), Vec::new(), false),
    }
}

/// git's message for an option a command does not know.
pub(crate) fn unknown_option(command: &str, option: &str) -> Error {
    let shown = option.trim_start_matches('-');
    let kind = if option.starts_with("--") {
        "option"
    } else {
        "switch"
    };
    let quote = format!("`{shown}'");
    Error::Usage(format!(
        "error: unknown {kind} {quote}\nusage: git {command} …"
    ))
}

/// The value of an option given as `-mVALUE`, `-m VALUE`, `--opt=VALUE`
/// or `--opt VALUE`; advances `i` past what it used.
pub(crate) fn option_value(
    args: &[String],
    i: &mut usize,
    short: Option<&str>,
    long: Option<&str>,
) -> Result<Option<String>> {
    let a = &args[*i];
    if let Some(l) = long {
        if a == l {
            *i += 1;
            return args.get(*i).cloned().map(Some).ok_or_else(|| {
                Error::Usage(format!("error: option `{}' requires a value", &l[2..]))
            });
        }
        if let Some(v) = a.strip_prefix(&format!("{l}=")) {
            return Ok(Some(v.to_string()));
        }
    }
    if let Some(s) = short {
        if a == s {
            *i += 1;
            return args.get(*i).cloned().map(Some).ok_or_else(|| {
                Error::Usage(format!("error: switch `{}' requires a value", &s[1..]))
            });
        }
        if a.len() > s.len() && a.starts_with(s) && !a.starts_with("--") {
            return Ok(Some(a[s.len()..].to_string()));
        }
    }
    Ok(None)
}

/// Abbreviates `id` to git's default 7 hex digits.
pub(crate) fn short(id: &gix_hash::oid) -> String {
    crate::odb::hex(id)[..7].to_string()
}

/// Repository path shown relative to the current directory.
pub(crate) fn shown_path(repo: &Repo, path: &[u8]) -> String {
    String::from_utf8_lossy(&crate::paths::relative(path, &repo.prefix)).into_owned()
}

/// Repository path shown relative to the current directory and quoted as
/// git's listings quote it (see [`crate::paths::quote`]).
pub(crate) fn listed_path(repo: &Repo, path: &[u8], quote_space: bool) -> String {
    crate::paths::quote(&crate::paths::relative(path, &repo.prefix), quote_space)
}

#[cfg(test)]
mod tests {
    use super::expand_bundled;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn bundled_short_options_split_as_git_does() {
        assert_eq!(
            expand_bundled(&words(&["-qam", "msg"]), "m"),
            words(&["-q", "-a", "-m", "msg"])
        );
        assert_eq!(
            expand_bundled(&words(&["-mfix", "-5"]), "m"),
            words(&["-m", "fix", "-5"])
        );
        assert_eq!(
            expand_bundled(&words(&["--", "-ab"]), "m"),
            words(&["--", "-ab"])
        );
        assert_eq!(
            expand_bundled(&words(&["-bnew"]), "b"),
            words(&["-b", "new"])
        );
    }
}
