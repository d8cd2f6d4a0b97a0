//! `git merge [--ff | --no-ff | --ff-only] [-m MSG] [--no-commit] REV` and
//! `git merge --abort`.
//!
//! A fast-forward moves the branch; otherwise a three-way merge against
//! the merge base is done path by path: a side that did not change a path
//! takes the other's version, and a file both changed is merged line by
//! line by gitoxide's `gix-merge` text driver, which writes git's
//! conflict markers (`<<<<<<< HEAD` … `>>>>>>> NAME`) when the changes
//! overlap. A conflicted path gets index stages 1–3 and the merge stops
//! for the user as in git (`MERGE_HEAD`, exit 1).

use super::{open, option_value, short, unknown_option};
use crate::checkout::{Overwrite, write_entry};
use crate::error::{Error, Result};
use crate::files::{FILE_PERM, join};
use crate::index::{Entry, Index, MODE_EXEC, MODE_FILE};
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::{BTreeSet, HashSet, VecDeque};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut ff, mut ff_only, mut abort, mut no_commit) = (true, false, false, false);
    let mut message = None;
    let mut revs = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if let Some(m) = option_value(args, &mut i, Some("-m"), Some("--message"))? {
            message = Some(m);
        } else {
            match a.as_str() {
                "--no-ff" => ff = false,
                "--ff" => ff = true,
                "--ff-only" => ff_only = true,
                "--abort" => abort = true,
                "--no-commit" => no_commit = true,
                "--no-edit" | "--commit" | "-q" | "--quiet" | "--no-stat" | "--stat" => {}
                _ if a.starts_with('-') => return Err(unknown_option("merge", &a)),
                _ => revs.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    let merge_head = join(&repo.git_dir, b"MERGE_HEAD");
    if abort {
        if repo.files.lstat(&merge_head)?.is_none() {
            return Err(Error::fatal(
                "There is no merge to abort (MERGE_HEAD missing).",
            ));
        }
        let head = repo
            .refs
            .resolve("HEAD")?
            .ok_or_else(|| Error::fatal("no commit to return to"))?;
        let tree = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &head)?)?;
        let mut index = Index::load(&repo.files, &repo.git_dir)?;
        super::checkout::restore_all(inv, &repo, &mut index, &tree)?;
        index.save(&repo.files, &repo.git_dir)?;
        clear_merge_state(&repo)?;
        return Ok(0);
    }
    if repo.files.lstat(&merge_head)?.is_some() {
        return Err(Error::fatal(
            "You have not concluded your merge (MERGE_HEAD exists).\nPlease, commit your changes before you merge.",
        ));
    }
    let [rev] = revs.as_slice() else {
        return Err(Error::fatal(
            "exactly one branch or commit to merge is supported here",
        ));
    };
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    if !index.conflicts().is_empty() {
        return Err(Error::fatal(
            "Merging is not possible because you have unmerged files.",
        ));
    }
    let theirs = crate::revision::peel(
        &repo,
        crate::revision::try_resolve(&repo, rev)?
            .ok_or_else(|| Error::fatal(format!("{rev} - not something we can merge")))?,
        Kind::Commit,
    )?;
    let Some(ours) = repo.refs.resolve("HEAD")? else {
        // An unborn branch just takes the other commit.
        let to = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &theirs)?)?;
        crate::checkout::switch(
            inv,
            &repo,
            &mut index,
            &Flat::new(),
            &to,
            Overwrite::Refuse,
            "merge",
        )?;
        index.save(&repo.files, &repo.git_dir)?;
        repo.refs.set_head_target(theirs)?;
        return Ok(0);
    };
    if is_ancestor(&repo, &theirs, &ours)? {
        out.stdout.extend_from_slice(b"Already up to date.\n");
        return Ok(0);
    }
    let ours_flat = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &ours)?)?;
    let theirs_flat =
        crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &theirs)?)?;
    if ff && is_ancestor(&repo, &ours, &theirs)? {
        crate::checkout::switch(
            inv,
            &repo,
            &mut index,
            &ours_flat,
            &theirs_flat,
            Overwrite::Refuse,
            "merge",
        )?;
        index.save(&repo.files, &repo.git_dir)?;
        repo.refs.set_head_target(theirs)?;
        let mut text = format!(
            "Updating {}..{}\nFast-forward\n",
            short(&ours),
            short(&theirs)
        );
        text.push_str(&stat(&repo, &ours_flat, &theirs_flat)?);
        out.stdout.extend_from_slice(text.as_bytes());
        return Ok(0);
    }
    if ff_only {
        return Err(Error::fatal("Not possible to fast-forward, aborting."));
    }
    let base = merge_base(&repo, &ours, &theirs)?;
    let base_flat = match base {
        Some(b) => crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &b)?)?,
        None => Flat::new(),
    };
    let label = rev.as_str();
    let outcome = merge_trees(&repo, &base_flat, &ours_flat, &theirs_flat, label)?;
    // Conflicted paths must be clean too: they get rewritten.
    let mut dirty = Vec::new();
    for c in &outcome.conflicts {
        if let Some(e) = index.get(&c.path).cloned() {
            let ours_entry = ours_flat.get(&c.path);
            let staged_ok = ours_entry.is_some_and(|(m, id)| *m == e.mode && *id == e.id);
            let work_ok = match repo.files.lstat(&repo.work_path(&c.path))? {
                Some(a) => {
                    crate::changes::work_change(&repo, &mut e.clone(), &a, index.written, inv.stop)?
                        .is_none()
                }
                None => false,
            };
            if !staged_ok || !work_ok {
                dirty.push(c.path.clone());
            }
        }
    }
    if !dirty.is_empty() {
        let files: String = dirty
            .iter()
            .map(|p| format!("\t{}\n", super::shown_path(&repo, p)))
            .collect();
        return Err(Error::Failed {
            code: 1,
            message: format!(
                "error: Your local changes to the following files would be overwritten by merge:\n{files}Please commit your changes or stash them before you merge.\nAborting"
            ),
        });
    }
    crate::checkout::switch(
        inv,
        &repo,
        &mut index,
        &ours_flat,
        &outcome.clean,
        Overwrite::Refuse,
        "merge",
    )?;
    let mut text = String::new();
    for p in &outcome.auto_merged {
        text.push_str(&format!("Auto-merging {}\n", String::from_utf8_lossy(p)));
    }
    for c in &outcome.conflicts {
        if let Some(w) = &c.warning {
            text.push_str(w);
        }
        text.push_str(&c.report);
        // The work tree gets the file with markers (or the surviving side).
        if let Some(data) = &c.work_content {
            let mode = c.work_mode.unwrap_or(MODE_FILE);
            let perm = if mode == MODE_EXEC {
                crate::files::EXEC_PERM
            } else {
                FILE_PERM
            };
            repo.files.write(&repo.work_path(&c.path), data, perm)?;
        }
        index.remove(&c.path);
        for (stage, side) in [(1u8, c.base), (2, c.ours), (3, c.theirs)] {
            if let Some((mode, id)) = side {
                index.entries.insert(
                    (c.path.clone(), stage),
                    Entry {
                        path: c.path.clone(),
                        id,
                        mode,
                        stage,
                        stat: Default::default(),
                    },
                );
            }
        }
    }
    let what = if repo.refs.read(&format!("refs/heads/{rev}"))?.is_some() {
        format!("branch '{rev}'")
    } else if repo.refs.read(&format!("refs/tags/{rev}"))?.is_some() {
        format!("tag '{rev}'")
    } else {
        format!("commit '{rev}'")
    };
    let current = repo.current_branch()?;
    let into = match current.as_deref() {
        Some("master") | Some("main") | None => String::new(),
        Some(b) => format!(" into {b}"),
    };
    let msg = message.unwrap_or_else(|| format!("Merge {what}{into}"));
    if !outcome.conflicts.is_empty() || no_commit {
        index.save(&repo.files, &repo.git_dir)?;
        repo.files.write(
            &merge_head,
            format!("{}\n", crate::odb::hex(&theirs)).as_bytes(),
            FILE_PERM,
        )?;
        repo.files.write(
            &join(&repo.git_dir, b"MERGE_MSG"),
            format!("{msg}\n").as_bytes(),
            FILE_PERM,
        )?;
        repo.files.write(
            &join(&repo.git_dir, b"MERGE_MODE"),
            if ff { b"" } else { b"no-ff" },
            FILE_PERM,
        )?;
        if outcome.conflicts.is_empty() {
            text.push_str("Automatic merge went well; stopped before committing as requested\n");
            out.stdout.extend_from_slice(text.as_bytes());
            return Ok(0);
        }
        text.push_str("Automatic merge failed; fix conflicts and then commit the result.\n");
        out.stdout.extend_from_slice(text.as_bytes());
        return Ok(1);
    }
    let tree = crate::tree::write_from_index(&repo.odb, &index)?;
    let commit = gix_object::Commit {
        tree,
        parents: [ours, theirs].into_iter().collect(),
        author: repo.identity(inv, "AUTHOR")?.signature(),
        committer: repo.identity(inv, "COMMITTER")?.signature(),
        encoding: None,
        message: format!("{msg}\n").into(),
        extra_headers: Vec::new(),
    };
    let id = repo.odb.write_object(&commit)?;
    index.save(&repo.files, &repo.git_dir)?;
    repo.refs.set_head_target(id)?;
    text.push_str("Merge made by the 'ort' strategy.\n");
    let merged = crate::tree::flatten(&repo.odb, &tree)?;
    text.push_str(&stat(&repo, &ours_flat, &merged)?);
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}

fn clear_merge_state(repo: &Repo) -> Result<()> {
    for f in [&b"MERGE_HEAD"[..], b"MERGE_MSG", b"MERGE_MODE"] {
        repo.files.remove_file(&join(&repo.git_dir, f))?;
    }
    Ok(())
}

/// The diffstat and mode lines git prints after a merge.
fn stat(repo: &Repo, before: &Flat, after: &Flat) -> Result<String> {
    let mut text = String::new();
    super::diff::print_changes(
        repo,
        before,
        after,
        super::show::Changes::Stat,
        &mut text,
        &|_| None,
    )?;
    let summary = super::commit::summary(repo, before, after)?;
    // Only the mode lines of the commit summary; the totals are in the stat.
    for line in summary.lines().skip(1) {
        text.push_str(line);
        text.push('\n');
    }
    Ok(text)
}

/// Whether `ancestor` is reachable from `descendant` (or is it).
pub(crate) fn is_ancestor(repo: &Repo, ancestor: &ObjectId, descendant: &ObjectId) -> Result<bool> {
    let mut queue = VecDeque::from([*descendant]);
    let mut seen = HashSet::new();
    while let Some(id) = queue.pop_front() {
        if id == *ancestor {
            return Ok(true);
        }
        if seen.insert(id) {
            queue.extend(crate::commit::read(&repo.odb, &id)?.parents);
        }
    }
    Ok(false)
}

/// A best common ancestor of `a` and `b`: the newest (by committer date)
/// commit reachable from both.
fn merge_base(repo: &Repo, a: &ObjectId, b: &ObjectId) -> Result<Option<ObjectId>> {
    let mut from_a = HashSet::new();
    let mut queue = VecDeque::from([*a]);
    while let Some(id) = queue.pop_front() {
        if from_a.insert(id) {
            queue.extend(crate::commit::read(&repo.odb, &id)?.parents);
        }
    }
    let mut best: Option<(i64, ObjectId)> = None;
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([*b]);
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id) {
            continue;
        }
        let c = crate::commit::read(&repo.odb, &id)?;
        if from_a.contains(&id) {
            let t = c.committer.time.seconds;
            if best.is_none_or(|(bt, _)| t > bt) {
                best = Some((t, id));
            }
            continue;
        }
        queue.extend(c.parents);
    }
    Ok(best.map(|(_, id)| id))
}

/// One path the merge could not settle.
struct Conflict {
    path: Vec<u8>,
    base: Option<(u32, ObjectId)>,
    ours: Option<(u32, ObjectId)>,
    theirs: Option<(u32, ObjectId)>,
    /// What the work tree gets: the file with markers, or the side that
    /// still has the file.
    work_content: Option<Vec<u8>>,
    work_mode: Option<u32>,
    /// git's `CONFLICT (…)` lines.
    report: String,
    /// A line git prints before the report (binary files).
    warning: Option<String>,
}

/// The result of merging three trees.
struct Outcome {
    /// Every path settled, plus `ours` for the conflicted ones.
    clean: Flat,
    auto_merged: Vec<Vec<u8>>,
    conflicts: Vec<Conflict>,
}

fn merge_trees(
    repo: &Repo,
    base: &Flat,
    ours: &Flat,
    theirs: &Flat,
    their_label: &str,
) -> Result<Outcome> {
    let mut clean = Flat::new();
    let mut auto_merged = Vec::new();
    let mut conflicts = Vec::new();
    let paths: BTreeSet<&Vec<u8>> = base
        .keys()
        .chain(ours.keys())
        .chain(theirs.keys())
        .collect();
    for path in paths {
        let (b, o, t) = (
            base.get(path).copied(),
            ours.get(path).copied(),
            theirs.get(path).copied(),
        );
        let settled = if o == t {
            Some(o)
        } else if b == o {
            Some(t)
        } else if b == t {
            Some(o)
        } else {
            None
        };
        if let Some(result) = settled {
            if let Some(v) = result {
                clean.insert(path.clone(), v);
            }
            continue;
        }
        let shown = String::from_utf8_lossy(path).into_owned();
        let text_file =
            |s: Option<(u32, ObjectId)>| s.is_some_and(|(m, _)| m == MODE_FILE || m == MODE_EXEC);
        match (o, t) {
            (Some(ov), Some(tv))
                if text_file(o) && text_file(t) && b.is_none_or(|bv| text_file(Some(bv))) =>
            {
                let read = |id: &ObjectId| repo.odb.read_kind(id, Kind::Blob);
                let (od, td) = (read(&ov.1)?, read(&tv.1)?);
                let bd = match b {
                    Some(bv) => read(&bv.1)?,
                    None => Vec::new(),
                };
                // Binary files are not merged line by line: ours stays in
                // the work tree untouched, as git's binary driver does.
                let binary = |d: &[u8]| d[..d.len().min(8000)].contains(&0);
                if binary(&od) || binary(&td) || binary(&bd) {
                    conflicts.push(Conflict {
                        path: path.clone(),
                        base: b,
                        ours: o,
                        theirs: t,
                        work_content: None,
                        work_mode: Some(ov.0),
                        report: format!(
                            "Auto-merging {shown}\nCONFLICT (content): Merge conflict in {shown}\n"
                        ),
                        warning: Some(format!(
                            "warning: Cannot merge binary files: {shown} (HEAD vs. {their_label})\n"
                        )),
                    });
                    clean.insert(path.clone(), ov);
                    continue;
                }
                // The mode: whichever side changed it.
                let mode = if b.is_some_and(|bv| bv.0 == ov.0) {
                    tv.0
                } else {
                    ov.0
                };
                let mut merged = Vec::new();
                let mut input = imara_diff::InternedInput::default();
                let labels = gix_merge::blob::builtin_driver::text::Labels {
                    ancestor: None,
                    current: Some("HEAD".into()),
                    other: Some(their_label.into()),
                };
                let resolution = gix_merge::blob::builtin_driver::text(
                    &mut merged,
                    &mut input,
                    labels,
                    &od,
                    &bd,
                    &td,
                    Default::default(),
                );
                auto_merged.push(path.clone());
                if resolution == gix_merge::blob::Resolution::Conflict {
                    let kind = if b.is_none() { "add/add" } else { "content" };
                    conflicts.push(Conflict {
                        path: path.clone(),
                        base: b,
                        ours: o,
                        theirs: t,
                        work_content: Some(merged),
                        work_mode: Some(mode),
                        report: format!("CONFLICT ({kind}): Merge conflict in {shown}\n"),
                        warning: None,
                    });
                    clean.insert(path.clone(), ov);
                } else {
                    let id = repo.odb.write(Kind::Blob, &merged)?;
                    clean.insert(path.clone(), (mode, id));
                }
            }
            (Some(ov), None) => {
                conflicts.push(Conflict {
                    path: path.clone(),
                    base: b,
                    ours: o,
                    theirs: None,
                    work_content: None,
                    work_mode: Some(ov.0),
                    report: format!("CONFLICT (modify/delete): {shown} deleted in {their_label} and modified in HEAD.  Version HEAD of {shown} left in tree.\n"),
                    warning: None,
                });
                clean.insert(path.clone(), ov);
            }
            (None, Some(tv)) => {
                let data = repo.odb.read_kind(&tv.1, Kind::Blob)?;
                conflicts.push(Conflict {
                    path: path.clone(),
                    base: b,
                    ours: None,
                    theirs: t,
                    work_content: Some(data),
                    work_mode: Some(tv.0),
                    report: format!("CONFLICT (modify/delete): {shown} deleted in HEAD and modified in {their_label}.  Version {their_label} of {shown} left in tree.\n"),
                    warning: None,
                });
            }
            _ => {
                // Symlinks, submodules or binary changes on both sides: keep ours in the tree.
                conflicts.push(Conflict {
                    path: path.clone(),
                    base: b,
                    ours: o,
                    theirs: t,
                    work_content: None,
                    work_mode: o.map(|v| v.0),
                    report: format!("CONFLICT (content): Merge conflict in {shown}\n"),
                    warning: None,
                });
                if let Some(ov) = o {
                    clean.insert(path.clone(), ov);
                }
            }
        }
    }
    let _ = write_entry;
    Ok(Outcome {
        clean,
        auto_merged,
        conflicts,
    })
}
