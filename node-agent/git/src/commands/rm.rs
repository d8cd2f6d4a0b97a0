//! `git rm [-r] [-f] [--cached] [-q] [-n] [--] PATH…`.

use super::{open, pathspecs, split_dashdash, unknown_option};
use crate::changes::work_change;
use crate::error::{Error, Result};
use crate::index::{Index, mode_of};
use crate::{Invocation, Output};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, _) = split_dashdash(args);
    let (mut recursive, mut force, mut cached, mut quiet, mut dry_run) =
        (false, false, false, false, false);
    for a in opts {
        match a.as_str() {
            "-r" => recursive = true,
            "-f" | "--force" => force = true,
            "--cached" => cached = true,
            "-q" | "--quiet" => quiet = true,
            "-n" | "--dry-run" => dry_run = true,
            "-rf" | "-fr" => {
                recursive = true;
                force = true;
            }
            _ if a.starts_with('-') => return Err(unknown_option("rm", &a)),
            _ => paths.push(a),
        }
    }
    if paths.is_empty() {
        return Err(Error::Usage(
            "usage: git rm [<options>] [--] <file>...".into(),
        ));
    }
    let repo = open(inv)?;
    let specs = pathspecs(inv, &repo, &paths)?;
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    let head = crate::changes::head_flat(&repo)?;
    let mut doomed = Vec::new();
    for (spec, typed) in specs.iter().zip(&paths) {
        let matched = index.paths_under(spec);
        if matched.is_empty() {
            return Err(Error::fatal(format!(
                "pathspec '{typed}' did not match any files"
            )));
        }
        if !recursive && matched.iter().any(|p| p != spec) {
            return Err(Error::fatal(format!(
                "not removing '{typed}' recursively without -r"
            )));
        }
        doomed.extend(matched);
    }
    if !force {
        let mut modified = Vec::new();
        let mut staged = Vec::new();
        for p in &doomed {
            let Some(e) = index.get(p).cloned() else {
                continue;
            };
            let staged_differs = head
                .get(p)
                .is_none_or(|(m, id)| *m != e.mode || *id != e.id);
            let work_differs = match repo
                .files
                .lstat(&repo.work_path(p))?
                .filter(|a| mode_of(a).is_some())
            {
                Some(a) => {
                    work_change(&repo, &mut e.clone(), &a, index.written, inv.stop)?.is_some()
                }
                None => false,
            };
            if work_differs && !cached {
                modified.push(p.clone());
            } else if staged_differs && !cached && head.contains_key(p)
                || (staged_differs && work_differs)
            {
                staged.push(p.clone());
            }
        }
        let list = |v: &[Vec<u8>]| {
            v.iter()
                .map(|p| format!("    {}\n", super::shown_path(&repo, p)))
                .collect::<String>()
        };
        if !modified.is_empty() {
            let s = if modified.len() == 1 {
                "file has"
            } else {
                "files have"
            };
            return Err(Error::Failed {
                code: 1,
                message: format!(
                    "error: the following {s} local modifications:\n{}(use --cached to keep the file, or -f to force removal)",
                    list(&modified)
                ),
            });
        }
        if !staged.is_empty() {
            let s = if staged.len() == 1 {
                "file has"
            } else {
                "files have"
            };
            return Err(Error::Failed {
                code: 1,
                message: format!(
                    "error: the following {s} changes staged in the index:\n{}(use --cached to keep the file, or -f to force removal)",
                    list(&staged)
                ),
            });
        }
    }
    let mut text = String::new();
    for p in &doomed {
        text.push_str(&format!("rm '{}'\n", String::from_utf8_lossy(p)));
        if dry_run {
            continue;
        }
        index.remove(p);
        if !cached {
            crate::checkout::remove_entry(&repo, p)?;
        }
    }
    if !dry_run {
        index.save(&repo.files, &repo.git_dir)?;
    }
    if !quiet {
        out.stdout.extend_from_slice(text.as_bytes());
    }
    Ok(0)
}
