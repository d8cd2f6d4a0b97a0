//! `git diff [--cached | --staged] [--name-only | --name-status | --stat]
//! [--quiet | --exit-code] [REV [REV] | REV..REV] [-- PATH…]`.
//!
//! Without revisions: the index against the work tree; `--cached`: `HEAD`
//! (or REV) against the index; one revision: it against the work tree;
//! two: tree against tree. Work-tree files are hashed only when their
//! stat data differs from the index's.

use super::show::Changes;
use super::{open, pathspecs, short, split_dashdash, unknown_option};
use crate::changes::{Change, hash_work_file, head_flat};
use crate::diff_text::{Side, patch};
use crate::error::{Error, Result};
use crate::index::{Index, mode_of};
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use agentcomputer_fs::Attr;
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, _) = split_dashdash(args);
    let (mut cached, mut quiet, mut exit_code) = (false, false, false);
    let mut changes = Changes::Patch;
    let mut revs = Vec::new();
    for a in opts {
        match a.as_str() {
            "--cached" | "--staged" => cached = true,
            "--name-only" => changes = Changes::NameOnly,
            "--name-status" => changes = Changes::NameStatus,
            "--stat" => changes = Changes::Stat,
            "--quiet" => {
                quiet = true;
                exit_code = true;
            }
            "--exit-code" => exit_code = true,
            "-p" | "-u" | "--patch" | "--no-color" | "--no-ext-diff" => {}
            _ if a.starts_with('-') => return Err(unknown_option("diff", &a)),
            _ => revs.push(a),
        }
    }
    let repo = open(inv)?;
    // Arguments that are not revisions are paths (git's DWIM).
    let mut rev_ids = Vec::new();
    for r in revs {
        if let Some((a, b)) = r.split_once("..") {
            rev_ids.push(crate::revision::resolve(
                &repo,
                if a.is_empty() { "HEAD" } else { a },
            )?);
            rev_ids.push(crate::revision::resolve(
                &repo,
                if b.is_empty() { "HEAD" } else { b },
            )?);
        } else if let Some(id) = crate::revision::try_resolve(&repo, &r)? {
            rev_ids.push(id);
        } else if names_a_path(inv, &repo, &r)? {
            paths.push(r);
        } else {
            // Neither a revision nor a path: git refuses rather than
            // answer "no differences".
            return Err(crate::revision::unknown(&r));
        }
    }
    let specs = pathspecs(inv, &repo, &paths)?;
    let index = Index::load(&repo.files, &repo.git_dir)?;
    let tree_of = |id: &ObjectId| -> Result<Flat> {
        crate::tree::flatten(&repo.odb, &crate::revision::peel(&repo, *id, Kind::Tree)?)
    };
    let mut work = BTreeMap::new();
    let (before, after) = match (rev_ids.as_slice(), cached) {
        ([], false) => (
            index_flat(&index),
            work_flat(inv, &repo, &index, &mut work)?,
        ),
        ([], true) => (head_flat(&repo)?, index_flat(&index)),
        ([a], true) => (tree_of(a)?, index_flat(&index)),
        ([a], false) => (tree_of(a)?, work_flat(inv, &repo, &index, &mut work)?),
        ([a, b], _) => (tree_of(a)?, tree_of(b)?),
        _ => {
            return Err(Error::Usage(
                "usage: git diff [<options>] [<commit>] [--] [<path>...]".into(),
            ));
        }
    };
    let keep = |m: &Flat| -> Flat {
        m.iter()
            .filter(|(p, _)| specs.is_empty() || specs.iter().any(|s| crate::paths::is_under(p, s)))
            .map(|(p, v)| (p.clone(), *v))
            .collect()
    };
    let (before, after) = (keep(&before), keep(&after));
    let differs = before != after;
    if !quiet {
        let mut text = String::new();
        let work_read = |path: &[u8]| -> Option<Vec<u8>> {
            let a = work.get(path)?;
            crate::changes::read_work_file(&repo, path, a).ok()
        };
        print_changes(&repo, &before, &after, changes, &mut text, &work_read)?;
        out.stdout.extend_from_slice(text.as_bytes());
    }
    Ok(if exit_code && differs { 1 } else { 0 })
}

/// Whether `arg` names a path of the work tree or the index (git's rule
/// for an argument before `--` that is not a revision).
fn names_a_path(inv: &Invocation, repo: &Repo, arg: &str) -> Result<bool> {
    let Some(path) = inv
        .engine_path(arg.as_bytes())
        .and_then(|abs| crate::paths::repo_path(&repo.top, b"/", &abs))
    else {
        return Ok(false);
    };
    if repo.files.lstat(&repo.work_path(&path))?.is_some() {
        return Ok(true);
    }
    Ok(!Index::load(&repo.files, &repo.git_dir)?
        .paths_under(&path)
        .is_empty())
}

/// The index's stage-0 entries as a flat tree.
fn index_flat(index: &Index) -> Flat {
    index
        .entries
        .values()
        .filter(|e| e.stage == 0)
        .map(|e| (e.path.clone(), (e.mode, e.id)))
        .collect()
}

/// The tracked files of the work tree as a flat tree, hashing only files
/// whose stat data changed; `work` receives their attributes.
fn work_flat(
    inv: &Invocation,
    repo: &Repo,
    index: &Index,
    work: &mut BTreeMap<Vec<u8>, Attr>,
) -> Result<Flat> {
    let mut out = Flat::new();
    for e in index.entries.values().filter(|e| e.stage == 0) {
        inv.check_stop()?;
        let Some(a) = repo
            .files
            .lstat(&repo.work_path(&e.path))?
            .filter(|a| mode_of(a).is_some())
        else {
            continue;
        };
        let mut probe = e.clone();
        let id = match crate::changes::work_change(repo, &mut probe, &a, index.written, inv.stop)? {
            None => e.id,
            Some(Change::Deleted) => continue,
            Some(_) => hash_work_file(repo, &e.path, &a, inv.stop)?,
        };
        out.insert(e.path.clone(), (mode_of(&a).unwrap_or(e.mode), id));
        work.insert(e.path.clone(), a);
    }
    Ok(out)
}

/// Appends the changes from `before` to `after` in the form asked.
/// `work_read` supplies contents that are not objects (work-tree files).
pub(crate) fn print_changes(
    repo: &Repo,
    before: &Flat,
    after: &Flat,
    form: Changes,
    text: &mut String,
    work_read: &dyn Fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<()> {
    let paths: BTreeSet<&Vec<u8>> = before.keys().chain(after.keys()).collect();
    let mut stats = Vec::new();
    for path in paths {
        let (old, new) = (before.get(path), after.get(path));
        if old == new {
            continue;
        }
        let name = String::from_utf8_lossy(path).into_owned();
        let listed = crate::paths::quote(path, false);
        let content = |side: Option<&(u32, ObjectId)>| -> Result<Vec<u8>> {
            match side {
                None => Ok(Vec::new()),
                Some((m, _)) if *m == crate::index::MODE_GITLINK => Ok(Vec::new()),
                Some((_, id)) => match repo.odb.try_read(id)? {
                    Some(o) => Ok(o.data),
                    None => work_read(path).ok_or_else(|| {
                        Error::Corrupt(format!("unable to read {}", crate::odb::hex(id)))
                    }),
                },
            }
        };
        match form {
            Changes::NameOnly => text.push_str(&format!("{listed}\n")),
            Changes::NameStatus => {
                let c = match (old, new) {
                    (None, _) => 'A',
                    (_, None) => 'D',
                    (Some(a), Some(b))
                        if (a.0 == crate::index::MODE_LINK) != (b.0 == crate::index::MODE_LINK) =>
                    {
                        'T'
                    }
                    _ => 'M',
                };
                text.push_str(&format!("{c}\t{listed}\n"));
            }
            Changes::Stat => {
                let (a, b) = (content(old)?, content(new)?);
                let binary = a.contains(&0) || b.contains(&0);
                let (ins, del) = if binary {
                    (0, 0)
                } else {
                    super::commit::line_counts(&a, &b)
                };
                stats.push((name, ins, del, binary));
            }
            Changes::Patch => {
                let (a, b) = (content(old)?, content(new)?);
                let zeros = "0000000".to_string();
                let (ida, idb) = (
                    old.map(|o| short(&o.1)).unwrap_or(zeros.clone()),
                    new.map(|n| short(&n.1)).unwrap_or(zeros),
                );
                patch(
                    text,
                    &name,
                    Side {
                        mode: old.map(|o| o.0),
                        id: &ida,
                        data: &a,
                    },
                    Side {
                        mode: new.map(|n| n.0),
                        id: &idb,
                        data: &b,
                    },
                );
            }
            Changes::None => {}
        }
    }
    if form == Changes::Stat && !stats.is_empty() {
        text.push_str(&stat_lines(&stats));
    }
    Ok(())
}

/// git's `--stat` block: ` NAME | N +++--` lines, then the totals.
pub(crate) fn stat_lines(stats: &[(String, usize, usize, bool)]) -> String {
    let width = stats.iter().map(|s| s.0.chars().count()).max().unwrap_or(0);
    let count_width = stats
        .iter()
        .map(|s| (s.1 + s.2).to_string().len())
        .max()
        .unwrap_or(1);
    let max_changes = stats.iter().map(|s| s.1 + s.2).max().unwrap_or(0);
    // git fits the bars into 80 columns.
    let bar_room = 80usize.saturating_sub(width + count_width + 4).max(10);
    let mut out = String::new();
    let (mut ins, mut del) = (0, 0);
    for (name, i, d, binary) in stats {
        ins += i;
        del += d;
        if *binary {
            out.push_str(&format!(" {name:<width$} | Bin\n"));
            continue;
        }
        let total = i + d;
        let (pi, pd) = if max_changes > bar_room {
            let scale = |n: usize| {
                if n == 0 {
                    0
                } else {
                    (n * bar_room / max_changes).max(1)
                }
            };
            (scale(*i), scale(*d))
        } else {
            (*i, *d)
        };
        out.push_str(
            &format!(
                " {name:<width$} | {total:>count_width$} {}{}\n",
                "+".repeat(pi),
                "-".repeat(pd)
            )
            .replace(
                &format!("| {:>count_width$} \n", total),
                &format!("| {total:>count_width$}\n"),
            ),
        );
    }
    let files = stats.len();
    let mut line = format!(" {files} file{} changed", if files == 1 { "" } else { "s" });
    if ins > 0 || del == 0 {
        line.push_str(&format!(
            ", {ins} insertion{}(+)",
            if ins == 1 { "" } else { "s" }
        ));
    }
    if del > 0 {
        line.push_str(&format!(
            ", {del} deletion{}(-)",
            if del == 1 { "" } else { "s" }
        ));
    }
    out.push_str(&line);
    out.push('\n');
    out
}
