//! `git rev-parse [--verify] [--short[=N]] [--abbrev-ref] [-q] REV…` and
//! the repository queries `--show-toplevel`, `--git-dir`,
//! `--absolute-git-dir`, `--is-inside-work-tree`, `--show-prefix`.

use super::open;
use crate::error::{Error, Result};
use crate::odb::hex;
use crate::{Invocation, Output};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut verify, mut quiet, mut abbrev_ref) = (false, false, false);
    let mut short: Option<usize> = None;
    let mut text = String::new();
    let repo = open(inv);
    for a in args {
        match a.as_str() {
            "--verify" => verify = true,
            "-q" | "--quiet" => quiet = true,
            "--abbrev-ref" => abbrev_ref = true,
            "--short" => short = Some(7),
            "--is-inside-work-tree" => {
                text.push_str(if repo.is_ok() { "true\n" } else { "false\n" });
                if let Err(e) = repo {
                    return Err(e);
                }
            }
            "--is-inside-git-dir" => text.push_str("false\n"),
            "--show-toplevel" => {
                let r = repo
                    .as_ref()
                    .map_err(|_| Error::fatal(crate::repo::NOT_A_REPO))?;
                text.push_str(&format!("{}\n", inv.shown(&r.top)));
            }
            "--absolute-git-dir" => {
                let r = repo
                    .as_ref()
                    .map_err(|_| Error::fatal(crate::repo::NOT_A_REPO))?;
                text.push_str(&format!("{}\n", inv.shown(&r.git_dir)));
            }
            "--git-dir" => {
                let r = repo
                    .as_ref()
                    .map_err(|_| Error::fatal(crate::repo::NOT_A_REPO))?;
                if r.prefix.is_empty() && r.git_dir.ends_with(b"/.git") {
                    text.push_str(".git\n");
                } else {
                    text.push_str(&format!("{}\n", inv.shown(&r.git_dir)));
                }
            }
            "--show-prefix" => {
                let r = repo
                    .as_ref()
                    .map_err(|_| Error::fatal(crate::repo::NOT_A_REPO))?;
                if r.prefix.is_empty() {
                    text.push('\n');
                } else {
                    text.push_str(&format!("{}/\n", String::from_utf8_lossy(&r.prefix)));
                }
            }
            _ if a.starts_with("--short=") => {
                short = a[8..].parse().ok().map(|n: usize| n.clamp(4, 40))
            }
            _ if a.starts_with('-') => {
                return Err(Error::fatal(format!("unknown option {a}")));
            }
            rev => {
                let r = repo
                    .as_ref()
                    .map_err(|_| Error::fatal(crate::repo::NOT_A_REPO))?;
                if abbrev_ref {
                    let name = match crate::revision::full_ref(r, rev)? {
                        Some(full) if full == "HEAD" => {
                            r.current_branch()?.unwrap_or_else(|| "HEAD".into())
                        }
                        Some(full) => full
                            .trim_start_matches("refs/heads/")
                            .trim_start_matches("refs/tags/")
                            .trim_start_matches("refs/remotes/")
                            .to_string(),
                        None => return Err(crate::revision::unknown(rev)),
                    };
                    text.push_str(&format!("{name}\n"));
                    continue;
                }
                match crate::revision::try_resolve(r, rev)? {
                    Some(id) => {
                        let h = hex(&id);
                        text.push_str(&format!("{}\n", &h[..short.unwrap_or(40)]));
                    }
                    None if verify && quiet => return Ok(1),
                    None if verify => return Err(Error::fatal("Needed a single revision")),
                    None => {
                        out.stdout.extend_from_slice(text.as_bytes());
                        out.stdout.extend_from_slice(format!("{rev}\n").as_bytes());
                        return Err(crate::revision::unknown(rev));
                    }
                }
            }
        }
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}
