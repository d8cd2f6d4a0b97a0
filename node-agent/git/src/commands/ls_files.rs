//! `git ls-files [-s | --stage] [-o | --others] [--exclude-standard]
//! [-m | --modified] [-d | --deleted] [-z] [--] [PATH…]`: the index's
//! paths (the default, `--cached`), or untracked, modified or deleted
//! files, shown relative to the current directory and limited to it, as
//! git does.

use super::{listed_path, open, pathspecs, shown_path, split_dashdash, unknown_option};
use crate::changes::work_change;
use crate::error::Result;
use crate::index::{Index, mode_of};
use crate::{Invocation, Output};
use std::collections::BTreeSet;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, _) = split_dashdash(args);
    let (mut stage, mut others, mut exclude, mut modified, mut deleted, mut cached, mut nul) =
        (false, false, false, false, false, false, false);
    for a in opts {
        match a.as_str() {
            "-s" | "--stage" => stage = true,
            "-o" | "--others" => others = true,
            "--exclude-standard" => exclude = true,
            "-m" | "--modified" => modified = true,
            "-d" | "--deleted" => deleted = true,
            "-c" | "--cached" => cached = true,
            "-z" => nul = true,
            "--full-name" | "-t" => {}
            _ if a.starts_with('-') => return Err(unknown_option("ls-files", &a)),
            _ => paths.push(a),
        }
    }
    let repo = open(inv)?;
    let mut specs = pathspecs(inv, &repo, &paths)?;
    if specs.is_empty() {
        specs.push(repo.prefix.clone());
    }
    let under = |p: &[u8]| specs.iter().any(|s| crate::paths::is_under(p, s));
    let index = Index::load(&repo.files, &repo.git_dir)?;
    let end = if nul { '\0' } else { '\n' };
    // -z prints paths as they are; otherwise quoted as git quotes them.
    let shown_path = |repo: &crate::repo::Repo, p: &[u8]| {
        if nul {
            shown_path(repo, p)
        } else {
            listed_path(repo, p, false)
        }
    };
    let mut text = String::new();
    let show_cached = cached || !(others || modified || deleted);
    if show_cached {
        for e in index.entries.values().filter(|e| under(&e.path)) {
            if stage {
                text.push_str(&format!(
                    "{:06o} {} {}\t{}{end}",
                    e.mode,
                    crate::odb::hex(&e.id),
                    e.stage,
                    shown_path(&repo, &e.path)
                ));
            } else if e.stage <= 1 || !index.entries.contains_key(&(e.path.clone(), e.stage - 1)) {
                text.push_str(&format!("{}{end}", shown_path(&repo, &e.path)));
            }
        }
    }
    if deleted || modified {
        let mut listed = BTreeSet::new();
        for e in index
            .entries
            .values()
            .filter(|e| e.stage == 0 && under(&e.path))
        {
            inv.check_stop()?;
            let work = repo
                .files
                .lstat(&repo.work_path(&e.path))?
                .filter(|a| mode_of(a).is_some());
            let gone = work.is_none();
            let changed = match work {
                Some(a) => {
                    work_change(&repo, &mut e.clone(), &a, index.written, inv.stop)?.is_some()
                }
                None => true,
            };
            // git lists a deleted file under both -d and -m.
            if ((deleted && gone) || (modified && changed)) && listed.insert(e.path.clone()) {
                text.push_str(&format!("{}{end}", shown_path(&repo, &e.path)));
            }
        }
    }
    if others {
        let scan = crate::worktree::scan(&repo.files, &repo.top, &repo.git_dir, b"", inv.stop)?;
        let mut untracked: BTreeSet<Vec<u8>> = scan
            .files
            .keys()
            .filter(|p| index.get(p).is_none() && !index.conflicted(p) && under(p))
            .cloned()
            .collect();
        if !exclude {
            for (p, is_dir) in &scan.ignored {
                if *is_dir {
                    let found =
                        crate::worktree::scan(&repo.files, &repo.top, &repo.git_dir, p, inv.stop)?;
                    untracked.extend(found.files.into_keys().filter(|q| under(q)));
                    // The walk below an ignored directory applies its rules again.
                    untracked.extend(
                        found
                            .ignored
                            .into_iter()
                            .filter(|(q, d)| !d && under(q))
                            .map(|(q, _)| q),
                    );
                } else if under(p) {
                    untracked.insert(p.clone());
                }
            }
        }
        for p in untracked {
            text.push_str(&format!("{}{end}", shown_path(&repo, &p)));
        }
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}
