//! `git mv [-f] [-n] [-v] SOURCE… DESTINATION`.

use super::{open, pathspecs, unknown_option};
use crate::error::{Error, Result};
use crate::index::{Index, stat_of};
use crate::{Invocation, Output};
use agentcomputer_fs::FileKind;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut force, mut dry_run, mut verbose) = (false, false, false);
    let mut paths = Vec::new();
    for a in args {
        match a.as_str() {
            "-f" | "--force" => force = true,
            "-n" | "--dry-run" => dry_run = true,
            "-v" | "--verbose" => verbose = true,
            "--" => {}
            _ if a.starts_with('-') => return Err(unknown_option("mv", a)),
            _ => paths.push(a.clone()),
        }
    }
    if paths.len() < 2 {
        return Err(Error::Usage(
            "usage: git mv [<options>] <source>... <destination>".into(),
        ));
    }
    let repo = open(inv)?;
    let specs = pathspecs(inv, &repo, &paths)?;
    let (sources, dest) = specs.split_at(specs.len() - 1);
    let dest = &dest[0];
    let dest_is_dir = repo
        .files
        .stat(&repo.work_path(dest))?
        .is_some_and(|a| a.kind == FileKind::Directory);
    if sources.len() > 1 && !dest_is_dir {
        return Err(Error::fatal(format!(
            "destination '{}' is not a directory",
            paths.last().unwrap_or(&String::new())
        )));
    }
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    let mut text = String::new();
    for (src, typed) in sources.iter().zip(&paths) {
        let name = src.rsplit(|b| *b == b'/').next().unwrap_or(src);
        let target = if dest_is_dir {
            if dest.is_empty() {
                name.to_vec()
            } else {
                [dest.as_slice(), b"/", name].concat()
            }
        } else {
            dest.clone()
        };
        let shown_dest = String::from_utf8_lossy(&target).into_owned();
        let tracked = index.paths_under(src);
        if tracked.is_empty() {
            let reason = if repo.files.lstat(&repo.work_path(src))?.is_none() {
                "bad source"
            } else {
                "not under version control"
            };
            return Err(Error::fatal(format!(
                "{reason}, source={typed}, destination={shown_dest}"
            )));
        }
        if repo.files.lstat(&repo.work_path(&target))?.is_some() && !force {
            return Err(Error::fatal(format!(
                "destination exists, source={typed}, destination={shown_dest}"
            )));
        }
        if crate::paths::is_under(&target, src) {
            return Err(Error::fatal(format!(
                "can not move directory into itself, source={typed}, destination={shown_dest}"
            )));
        }
        if verbose || dry_run {
            text.push_str(&format!(
                "Renaming {} to {shown_dest}\n",
                String::from_utf8_lossy(src)
            ));
        }
        if dry_run {
            continue;
        }
        repo.files
            .rename(&repo.work_path(src), &repo.work_path(&target))?;
        for old in tracked {
            let Some(e) = index.get(&old).cloned() else {
                continue;
            };
            let new_path = [target.as_slice(), &old[src.len()..]].concat();
            let stat = repo
                .files
                .lstat(&repo.work_path(&new_path))?
                .map(|a| stat_of(&a))
                .unwrap_or(e.stat);
            index.remove(&old);
            index.put(crate::index::Entry {
                path: new_path,
                stat,
                ..e
            });
        }
    }
    if !dry_run {
        index.save(&repo.files, &repo.git_dir)?;
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}
