//! `git add [-A | -u] [-f] [-n] [-v] [--] [PATHSPEC…]`.
//!
//! As in git 2.x, adding a directory also stages the removal of files
//! deleted under it; `-u` stages only tracked files.

use super::{open, pathspecs, shown_path, split_dashdash, unknown_option};
use crate::changes::work_change;
use crate::error::{Error, Result};
use crate::index::{Entry, Index, mode_of, stat_of};
use crate::paths::is_under;
use crate::repo::Repo;
use crate::{Invocation, Output};
use agentcomputer_fs::Attr;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, _) = split_dashdash(args);
    let (mut all, mut update, mut force, mut dry_run, mut verbose) =
        (false, false, false, false, false);
    for a in opts {
        match a.as_str() {
            "-A" | "--all" | "--no-ignore-removal" => all = true,
            "-u" | "--update" => update = true,
            "-f" | "--force" => force = true,
            "-n" | "--dry-run" => dry_run = true,
            "-v" | "--verbose" => verbose = true,
            _ if a.starts_with('-') && a.len() > 1 => return Err(unknown_option("add", &a)),
            _ => paths.push(a),
        }
    }
    let repo = open(inv)?;
    if paths.is_empty() && !all && !update {
        out.stderr.extend_from_slice(b"Nothing specified, nothing added.\nhint: Maybe you wanted to say 'git add .'?\nhint: Turn this message off by running\nhint: \"git config advice.addEmptyPathspec false\"\n");
        return Ok(0);
    }
    let specs = if paths.is_empty() {
        vec![Vec::new()]
    } else {
        pathspecs(inv, &repo, &paths)?
    };
    for (spec, typed) in specs
        .iter()
        .zip(paths.iter().chain(std::iter::repeat(&String::new())))
    {
        if crate::paths::forbidden(spec) && !spec.is_empty() {
            return Err(Error::fatal(format!(
                "'{typed}' is beyond a symbolic link or inside .git"
            )));
        }
    }
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    let mut ignored_named = Vec::new();
    let mut changed = Vec::new();
    for (n, spec) in specs.iter().enumerate() {
        inv.check_stop()?;
        let scan = crate::worktree::scan(&repo.files, &repo.top, &repo.git_dir, spec, inv.stop)?;
        let tracked = index.paths_under(spec);
        let mut matched = !scan.files.is_empty() || !tracked.is_empty();
        // Ignored files are added only when named (or with -f).
        for (path, is_dir) in &scan.ignored {
            if index.get(path).is_some() || tracked.iter().any(|t| is_under(t, path)) {
                continue;
            }
            if path == spec && !force {
                ignored_named.push(path.clone());
                matched = true;
            } else if force
                && !*is_dir
                && let Some(a) = repo.files.lstat(&repo.work_path(path))?
            {
                matched = true;
                changed.extend(stage(inv, &repo, &mut index, path, &a, dry_run)?);
            }
        }
        // Only a path that was named must match: `add -A` in an empty work
        // tree adds nothing, as real git's does.
        if !matched && !paths.is_empty() {
            let typed = paths.get(n).cloned().unwrap_or_default();
            return Err(Error::fatal(format!(
                "pathspec '{typed}' did not match any files"
            )));
        }
        for (path, a) in &scan.files {
            if update && index.get(path).is_none() {
                continue;
            }
            changed.extend(stage(inv, &repo, &mut index, path, a, dry_run)?);
        }
        // Tracked files gone from the work tree (also those in ignored
        // directories the walk skipped, looked up one by one).
        for path in tracked {
            if scan.files.contains_key(&path) {
                continue;
            }
            let still_there = repo
                .files
                .lstat(&repo.work_path(&path))?
                .filter(|a| mode_of(a).is_some());
            match still_there {
                Some(a) => changed.extend(stage(inv, &repo, &mut index, &path, &a, dry_run)?),
                None => {
                    if !dry_run {
                        index.remove(&path);
                    }
                    changed.push(format!("remove '{}'", shown_path(&repo, &path)));
                }
            }
        }
    }
    if !dry_run {
        index.save(&repo.files, &repo.git_dir)?;
    }
    if verbose || dry_run {
        for line in &changed {
            out.stdout.extend_from_slice(format!("{line}\n").as_bytes());
        }
    }
    if !ignored_named.is_empty() {
        let mut message =
            String::from("The following paths are ignored by one of your .gitignore files:\n");
        for p in &ignored_named {
            message.push_str(&shown_path(&repo, p));
            message.push('\n');
        }
        message.push_str("hint: Use -f if you really want to add them.\nhint: Turn this message off by running\nhint: \"git config advice.addIgnoredFile false\"");
        return Err(Error::Failed { code: 1, message });
    }
    Ok(0)
}

/// Stages the work-tree file `path` (attributes `a`) unless the index
/// already holds it; returns the `add '…'` line when it changed.
pub(crate) fn stage(
    inv: &Invocation,
    repo: &Repo,
    index: &mut Index,
    path: &[u8],
    a: &Attr,
    dry_run: bool,
) -> Result<Option<String>> {
    inv.check_stop()?;
    let Some(mode) = mode_of(a) else {
        return Ok(None);
    };
    if let Some(existing) = index.get(path) {
        let mut e = existing.clone();
        if work_change(repo, &mut e, a, index.written, inv.stop)?.is_none() {
            if !dry_run && e.stat != existing.stat {
                index.put(e);
            }
            return Ok(None);
        }
    }
    let line = Some(format!("add '{}'", shown_path(repo, path)));
    if dry_run {
        return Ok(line);
    }
    let id = crate::changes::store_work_file(repo, path, a, inv.stop)?;
    index.put(Entry {
        path: path.to_vec(),
        id,
        mode,
        stage: 0,
        stat: stat_of(a),
    });
    Ok(line)
}
