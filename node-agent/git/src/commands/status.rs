//! `git status [-s | --short | --porcelain[=v1]] [-b] [-u[no|normal|all]]`.

use super::{listed_path, open, short, unknown_option};
use crate::changes::{Change, Status, collapse_untracked};
use crate::error::Result;
use crate::repo::Repo;
use crate::{Invocation, Output};
use std::collections::BTreeSet;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut short_form, mut porcelain, mut branch) = (false, false, false);
    let mut untracked_mode = "normal";
    for a in args {
        match a.as_str() {
            "-s" | "--short" => short_form = true,
            "--porcelain" | "--porcelain=v1" => porcelain = true,
            "-b" | "--branch" => branch = true,
            "--long" => {}
            "-u" | "-uall" | "--untracked-files" | "--untracked-files=all" => {
                untracked_mode = "all"
            }
            "-uno" | "--untracked-files=no" => untracked_mode = "no",
            "-unormal" | "--untracked-files=normal" => untracked_mode = "normal",
            _ => return Err(unknown_option("status", a)),
        }
    }
    let repo = open(inv)?;
    let mut st = crate::changes::status(inv, &repo)?;
    if st.index_refreshed {
        // Like git, keep the fresh stat data if nobody else holds the lock.
        let _ = st.index.save(&repo.files, &repo.git_dir);
    }
    match untracked_mode {
        "no" => st.untracked.clear(),
        "all" => {}
        _ => {
            st.untracked = collapse_untracked(&st.untracked, &st.index)
                .into_iter()
                .collect()
        }
    }
    if short_form || porcelain {
        short_format(&repo, &st, out, porcelain, branch)?;
    } else {
        long_format(inv, &repo, &st, out, false)?;
    }
    Ok(0)
}

fn label(c: Change) -> &'static str {
    match c {
        Change::Added => "new file:   ",
        Change::Modified => "modified:   ",
        Change::Deleted => "deleted:    ",
        Change::TypeChanged => "typechange: ",
    }
}

/// The long form `git status` and a `git commit` with nothing to commit
/// print (git 2.39 wording, hints included).
pub(crate) fn long_format(
    _inv: &Invocation,
    repo: &Repo,
    st: &Status,
    out: &mut Output,
    for_commit: bool,
) -> Result<()> {
    let mut s = String::new();
    let head = repo.refs.resolve("HEAD")?;
    match repo.current_branch()? {
        Some(b) => s.push_str(&format!("On branch {b}\n")),
        None => s.push_str(&format!(
            "HEAD detached at {}\n",
            head.map(|h| short(&h)).unwrap_or_default()
        )),
    }
    let merging = repo
        .files
        .lstat(&crate::files::join(&repo.git_dir, b"MERGE_HEAD"))?
        .is_some();
    if merging {
        if st.conflicted.is_empty() {
            s.push_str("All conflicts fixed but you are still merging.\n  (use \"git commit\" to conclude merge)\n\n");
        } else {
            s.push_str("You have unmerged paths.\n  (fix conflicts and run \"git commit\")\n  (use \"git merge --abort\" to abort the merge)\n\n");
        }
    }
    if head.is_none() {
        s.push_str("\nNo commits yet\n\n");
    }
    let untracked: BTreeSet<&Vec<u8>> = st.untracked.iter().collect();
    if !st.staged.is_empty() {
        s.push_str("Changes to be committed:\n");
        if merging {
            // git gives no unstage hint while a merge is in progress.
        } else if head.is_none() {
            s.push_str("  (use \"git rm --cached <file>...\" to unstage)\n");
        } else {
            s.push_str("  (use \"git restore --staged <file>...\" to unstage)\n");
        }
        for (path, c) in &st.staged {
            match st.renames.get(path) {
                Some(old) => s.push_str(&format!(
                    "\trenamed:    {} -> {}\n",
                    listed_path(repo, old, false),
                    listed_path(repo, path, false)
                )),
                None => s.push_str(&format!(
                    "\t{}{}\n",
                    label(*c),
                    listed_path(repo, path, false)
                )),
            }
        }
        s.push('\n');
    }
    if !st.conflicted.is_empty() {
        let kinds: Vec<(&Vec<u8>, Unmerged)> = st
            .conflicted
            .iter()
            .map(|p| (p, unmerged(&st.index, p)))
            .collect();
        if kinds
            .iter()
            .all(|(_, k)| *k == Unmerged::BothModified || *k == Unmerged::BothAdded)
        {
            s.push_str("Unmerged paths:\n  (use \"git add <file>...\" to mark resolution)\n");
        } else {
            s.push_str("Unmerged paths:\n  (use \"git add/rm <file>...\" as appropriate to mark resolution)\n");
        }
        for (path, kind) in kinds {
            s.push_str(&format!(
                "\t{:<17}{}\n",
                kind.label(),
                listed_path(repo, path, false)
            ));
        }
        s.push('\n');
    }
    if !st.unstaged.is_empty() {
        s.push_str("Changes not staged for commit:\n");
        let any_deleted = st.unstaged.values().any(|c| *c == Change::Deleted);
        if any_deleted {
            s.push_str("  (use \"git add/rm <file>...\" to update what will be committed)\n");
        } else {
            s.push_str("  (use \"git add <file>...\" to update what will be committed)\n");
        }
        s.push_str("  (use \"git restore <file>...\" to discard changes in working directory)\n");
        for (path, c) in &st.unstaged {
            s.push_str(&format!(
                "\t{}{}\n",
                label(*c),
                listed_path(repo, path, false)
            ));
        }
        s.push('\n');
    }
    if !untracked.is_empty() {
        s.push_str("Untracked files:\n  (use \"git add <file>...\" to include in what will be committed)\n");
        for path in &untracked {
            s.push_str(&format!("\t{}\n", listed_path(repo, path, false)));
        }
        s.push('\n');
    }
    if st.staged.is_empty() {
        if !st.unstaged.is_empty() {
            s.push_str("no changes added to commit (use \"git add\" and/or \"git commit -a\")\n");
        } else if !untracked.is_empty() {
            s.push_str(
                "nothing added to commit but untracked files present (use \"git add\" to track)\n",
            );
        } else if head.is_none() {
            s.push_str("nothing to commit (create/copy files and use \"git add\" to track)\n");
        } else if st.conflicted.is_empty() {
            s.push_str("nothing to commit, working tree clean\n");
        } else {
            s.push_str("no changes added to commit (use \"git add\" and/or \"git commit -a\")\n");
        }
    } else if for_commit {
        // Only reached for an empty commit after `--amend` edge cases.
    }
    out.stdout.extend_from_slice(s.as_bytes());
    Ok(())
}

/// `--short` (paths from the current directory) and `--porcelain`
/// (paths from the top), two status letters and the path.
fn short_format(
    repo: &Repo,
    st: &Status,
    out: &mut Output,
    porcelain: bool,
    branch: bool,
) -> Result<()> {
    let mut s = String::new();
    if branch {
        let head = repo.refs.resolve("HEAD")?;
        match (repo.current_branch()?, head) {
            (Some(b), Some(_)) => s.push_str(&format!("## {b}\n")),
            (Some(b), None) => s.push_str(&format!("## No commits yet on {b}\n")),
            (None, _) => s.push_str("## HEAD (no branch)\n"),
        }
    }
    let show = |p: &[u8]| {
        if porcelain {
            crate::paths::quote(p, true)
        } else {
            listed_path(repo, p, true)
        }
    };
    let paths: BTreeSet<&Vec<u8>> = st
        .staged
        .keys()
        .chain(st.unstaged.keys())
        .chain(st.conflicted.iter())
        .collect();
    for path in paths {
        if st.conflicted.contains(path) {
            s.push_str(&format!(
                "{} {}\n",
                unmerged(&st.index, path).code(),
                show(path)
            ));
            continue;
        }
        let y = st.unstaged.get(path).map(|c| c.letter()).unwrap_or(' ');
        if let Some(old) = st.renames.get(path.as_slice()) {
            s.push_str(&format!("R{y} {} -> {}\n", show(old), show(path)));
            continue;
        }
        let x = st.staged.get(path).map(|c| c.letter()).unwrap_or(' ');
        s.push_str(&format!("{x}{y} {}\n", show(path)));
    }
    for path in &st.untracked {
        s.push_str(&format!("?? {}\n", show(path)));
    }
    out.stdout.extend_from_slice(s.as_bytes());
    Ok(())
}

/// How a path is unmerged, from the index stages it has (1 base, 2 ours,
/// 3 theirs), as git-status(1) "Short Format" names the combinations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unmerged {
    BothDeleted,
    AddedByUs,
    DeletedByThem,
    AddedByThem,
    DeletedByUs,
    BothAdded,
    BothModified,
}

fn unmerged(index: &crate::index::Index, path: &[u8]) -> Unmerged {
    let has = |stage: u8| index.entries.contains_key(&(path.to_vec(), stage));
    match (has(1), has(2), has(3)) {
        (true, false, false) => Unmerged::BothDeleted,
        (false, true, false) => Unmerged::AddedByUs,
        (true, true, false) => Unmerged::DeletedByThem,
        (false, false, true) => Unmerged::AddedByThem,
        (true, false, true) => Unmerged::DeletedByUs,
        (false, true, true) => Unmerged::BothAdded,
        _ => Unmerged::BothModified,
    }
}

impl Unmerged {
    /// The two letters of `status --short`.
    fn code(self) -> &'static str {
        match self {
            Unmerged::BothDeleted => "DD",
            Unmerged::AddedByUs => "AU",
            Unmerged::DeletedByThem => "UD",
            Unmerged::AddedByThem => "UA",
            Unmerged::DeletedByUs => "DU",
            Unmerged::BothAdded => "AA",
            Unmerged::BothModified => "UU",
        }
    }

    /// The label of the long form.
    fn label(self) -> &'static str {
        match self {
            Unmerged::BothDeleted => "both deleted:",
            Unmerged::AddedByUs => "added by us:",
            Unmerged::DeletedByThem => "deleted by them:",
            Unmerged::AddedByThem => "added by them:",
            Unmerged::DeletedByUs => "deleted by us:",
            Unmerged::BothAdded => "both added:",
            Unmerged::BothModified => "both modified:",
        }
    }
}
