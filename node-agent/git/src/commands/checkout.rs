//! `git checkout`, `git switch` and `git restore`: moving `HEAD` to a
//! branch or commit (the work tree and index follow), and restoring files
//! from the index or a commit.

use super::{open, option_value, pathspecs, short, split_dashdash, unknown_option};
use crate::changes::head_flat;
use crate::checkout::{Overwrite, switch as move_tree, write_entry};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use gix_hash::ObjectId;
use gix_object::Kind;

/// git 2.39's advice when `HEAD` becomes detached.
fn detached_advice(spec: &str) -> String {
    format!(
        "Note: switching to '{spec}'.\n\nYou are in 'detached HEAD' state. You can look around, make experimental\nchanges and commit them, and you can discard any commits you make in this\nstate without impacting any branches by switching back to a branch.\n\nIf you want to create a new branch to retain commits you create, you may\ndo so (now or later) by using -c with the switch command. Example:\n\n  git switch -c <new-branch-name>\n\nOr undo this operation with:\n\n  git switch -\n\nTurn off this advice by setting config variable advice.detachedHead to false\n\n"
    )
}

/// `git checkout [-f] [-b | -B NEW] [REV]` and `git checkout [REV] -- PATH…`.
pub(super) fn checkout(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    quietly(args, out, |out| checkout_inner(inv, args, out))
}

/// Runs `f`; with `-q`/`--quiet` before any `--`, what it printed on
/// success is dropped (errors still show), as git's `-q` does.
fn quietly(
    args: &[String],
    out: &mut Output,
    f: impl FnOnce(&mut Output) -> Result<i32>,
) -> Result<i32> {
    let quiet = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-q" || a == "--quiet");
    let code = f(out)?;
    if quiet && code == 0 {
        out.stdout.clear();
        out.stderr.clear();
    }
    Ok(code)
}

fn checkout_inner(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, paths, dashdash) = split_dashdash(args);
    let mut force = false;
    let mut new_branch = None;
    let mut reset_branch = false;
    let mut detach = false;
    let mut rest = Vec::new();
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i].clone();
        if let Some(b) = option_value(&opts, &mut i, Some("-b"), None)? {
            new_branch = Some(b);
        } else if let Some(b) = option_value(&opts, &mut i, Some("-B"), None)? {
            new_branch = Some(b);
            reset_branch = true;
        } else {
            match a.as_str() {
                "-f" | "--force" => force = true,
                "--detach" => detach = true,
                "-q" | "--quiet" => {}
                _ if a.starts_with('-') => return Err(unknown_option("checkout", &a)),
                _ => rest.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    if dashdash
        || (new_branch.is_none()
            && rest.len() == 1
            && !is_rev(&repo, &rest[0])?
            && !paths.is_empty())
    {
        let (source, files) = if dashdash {
            (rest.first().cloned(), paths)
        } else {
            (None, rest)
        };
        return restore_paths(
            inv,
            &repo,
            source.as_deref(),
            &files,
            true,
            source.is_some(),
            out,
        );
    }
    if rest.len() > 1 {
        // `git checkout REV PATH…` without `--`.
        let source = rest[0].clone();
        return restore_paths(inv, &repo, Some(&source), &rest[1..], true, true, out);
    }
    if rest.len() == 1 && new_branch.is_none() && !is_rev(&repo, &rest[0])? {
        if let Some(remote) = remote_branch(&repo, &rest[0])? {
            return track(inv, &repo, &rest[0], &remote, force, out);
        }
        // A path, not a revision.
        return restore_paths(inv, &repo, None, &rest, true, false, out);
    }
    let target = rest.first().cloned();
    go_to(
        inv,
        &repo,
        target.as_deref(),
        new_branch.as_deref(),
        reset_branch,
        detach,
        force,
        "checkout",
        out,
    )
}

/// `git switch [-c | -C NEW] [--detach] [-f | --discard-changes] BRANCH`.
pub(super) fn switch(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    quietly(args, out, |out| switch_inner(inv, args, out))
}

fn switch_inner(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut force = false;
    let mut new_branch = None;
    let mut reset_branch = false;
    let mut detach = false;
    let mut rest = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if let Some(b) = option_value(args, &mut i, Some("-c"), Some("--create"))? {
            new_branch = Some(b);
        } else if let Some(b) = option_value(args, &mut i, Some("-C"), Some("--force-create"))? {
            new_branch = Some(b);
            reset_branch = true;
        } else {
            match a.as_str() {
                "-f" | "--force" | "--discard-changes" => force = true,
                "-d" | "--detach" => detach = true,
                "-q" | "--quiet" => {}
                _ if a.starts_with('-') && a != "-" => return Err(unknown_option("switch", &a)),
                _ => rest.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    let target = rest.first().cloned();
    if new_branch.is_none() && !detach {
        let Some(t) = &target else {
            return Err(Error::fatal("missing branch or commit argument"));
        };
        if repo.refs.read(&format!("refs/heads/{t}"))?.is_none() {
            if let Some(remote) = remote_branch(&repo, t)? {
                return track(inv, &repo, t, &remote, force, out);
            }
            if crate::revision::try_resolve(&repo, t)?.is_some() {
                return Err(Error::fatal(format!(
                    "a branch is expected, got '{t}'\nhint: If you want to detach HEAD at the commit, try again with the --detach option."
                )));
            }
            return Err(Error::fatal(format!("invalid reference: {t}")));
        }
    }
    go_to(
        inv,
        &repo,
        target.as_deref(),
        new_branch.as_deref(),
        reset_branch,
        detach,
        force,
        "checkout",
        out,
    )
}

/// The one remote-tracking branch `NAME` stands for (`origin/NAME`), as
/// git's checkout guesses it when no local branch has the name.
fn remote_branch(repo: &Repo, name: &str) -> Result<Option<String>> {
    if !crate::refs::valid_name(name) {
        return Ok(None);
    }
    let found: Vec<String> = repo
        .refs
        .list("refs/remotes/")?
        .into_keys()
        .filter(|full| {
            full.rsplit_once('/')
                .is_some_and(|(rest, last)| last == name && rest.matches('/').count() == 2)
        })
        .collect();
    Ok(match found.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    })
}

/// Creates branch `name` at remote-tracking branch `remote`
/// (`refs/remotes/origin/NAME`), set to track it, and switches to it.
fn track(
    inv: &Invocation,
    repo: &Repo,
    name: &str,
    remote: &str,
    force: bool,
    out: &mut Output,
) -> Result<i32> {
    let short = remote.trim_start_matches("refs/remotes/");
    let remote_name = short.split('/').next().unwrap_or("origin").to_string();
    let code = go_to(
        inv,
        repo,
        Some(short),
        Some(name),
        false,
        false,
        force,
        "checkout",
        out,
    )?;
    let mut config = crate::config::ConfigFile::load(
        &repo.files,
        &crate::files::join(&repo.git_dir, b"config"),
    )?;
    config.set(&format!("branch.{name}.remote"), &remote_name)?;
    config.set(
        &format!("branch.{name}.merge"),
        &format!("refs/heads/{name}"),
    )?;
    config.save(&repo.files)?;
    let mut text = format!("branch '{name}' set up to track '{short}'.\n").into_bytes();
    text.append(&mut out.stdout);
    out.stdout = text;
    Ok(code)
}

fn is_rev(repo: &Repo, spec: &str) -> Result<bool> {
    Ok(crate::revision::try_resolve(repo, spec)?.is_some())
}

/// Moves `HEAD` (and the index and work tree) to `target`, or to a new
/// branch `new_branch` starting there.
#[allow(clippy::too_many_arguments)]
fn go_to(
    inv: &Invocation,
    repo: &Repo,
    target: Option<&str>,
    new_branch: Option<&str>,
    reset_branch: bool,
    detach: bool,
    force: bool,
    verb: &str,
    out: &mut Output,
) -> Result<i32> {
    let head = repo.refs.resolve("HEAD")?;
    let target_id: Option<ObjectId> = match target {
        Some(t) => Some(crate::revision::peel(
            repo,
            crate::revision::try_resolve(repo, t)?.ok_or_else(|| crate::revision::unknown(t))?,
            Kind::Commit,
        )?),
        None => head,
    };
    let is_branch = |t: &str| -> Result<bool> {
        Ok(!detach && repo.refs.read(&format!("refs/heads/{t}"))?.is_some())
    };
    if let Some(b) = new_branch {
        if !crate::refs::valid_name(b) {
            return Err(Error::fatal(format!("'{b}' is not a valid branch name")));
        }
        if repo.refs.read(&format!("refs/heads/{b}"))?.is_some() && !reset_branch {
            return Err(Error::fatal(format!("a branch named '{b}' already exists")));
        }
    }
    // Move the files.
    if let Some(to_id) = target_id {
        let mut index = Index::load(&repo.files, &repo.git_dir)?;
        let from = head_flat(repo)?;
        let to = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &to_id)?)?;
        let overwrite = if force {
            Overwrite::Force
        } else {
            Overwrite::Refuse
        };
        move_tree(inv, repo, &mut index, &from, &to, overwrite, verb)?;
        if force {
            restore_all(inv, repo, &mut index, &to)?;
        }
        index.save(&repo.files, &repo.git_dir)?;
    }
    // Move HEAD.
    if let Some(b) = new_branch {
        let full = format!("refs/heads/{b}");
        if let Some(id) = target_id {
            repo.refs.set(&full, id)?
        }
        repo.refs.set_symbolic("HEAD", &full)?;
        let verb = if reset_branch {
            "Switched to and reset branch"
        } else {
            "Switched to a new branch"
        };
        out.stderr
            .extend_from_slice(format!("{verb} '{b}'\n").as_bytes());
        return Ok(0);
    }
    let Some(t) = target else {
        return Ok(0);
    };
    if is_branch(t)? {
        let already = repo.current_branch()?.as_deref() == Some(t);
        repo.refs.set_symbolic("HEAD", &format!("refs/heads/{t}"))?;
        let line = if already {
            format!("Already on '{t}'\n")
        } else {
            format!("Switched to branch '{t}'\n")
        };
        out.stderr.extend_from_slice(line.as_bytes());
    } else {
        let id = target_id.unwrap_or_else(|| ObjectId::null(crate::odb::HASH));
        let was_detached = repo.current_branch()?.is_none() && head.is_some();
        repo.refs.set("HEAD", id)?;
        let c = crate::commit::read(&repo.odb, &id)?;
        let mut msg = if was_detached {
            format!(
                "Previous HEAD position was {}\n",
                head.map(|h| short(&h)).unwrap_or_default()
            )
        } else {
            detached_advice(t)
        };
        msg.push_str(&format!(
            "HEAD is now at {} {}\n",
            short(&id),
            crate::commit::subject(&c.message)
        ));
        out.stderr.extend_from_slice(msg.as_bytes());
    }
    Ok(0)
}

/// Rewrites every path of `to` whose work-tree file or index entry differs
/// from it (`-f`, `reset --hard`), and drops tracked paths `to` lacks.
pub(crate) fn restore_all(
    inv: &Invocation,
    repo: &Repo,
    index: &mut Index,
    to: &Flat,
) -> Result<()> {
    let tracked: Vec<Vec<u8>> = index.entries.keys().map(|(p, _)| p.clone()).collect();
    for path in tracked {
        if !to.contains_key(&path) {
            crate::checkout::remove_entry(repo, &path)?;
            index.remove(&path);
        }
    }
    for (path, (mode, id)) in to {
        inv.check_stop()?;
        let clean = match (
            index.get(path).cloned(),
            repo.files.lstat(&repo.work_path(path))?,
        ) {
            (Some(mut e), Some(a)) if e.id == *id && e.mode == *mode => {
                crate::changes::work_change(repo, &mut e, &a, index.written, inv.stop)?.is_none()
            }
            _ => false,
        };
        if !clean {
            let e = write_entry(repo, path, *mode, *id, inv.stop)?;
            index.put(e);
        }
    }
    Ok(())
}

/// `git restore [-s REV | --source=REV] [-S | --staged] [-W | --worktree] PATH…`.
pub(super) fn restore(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, _) = split_dashdash(args);
    let (mut staged, mut worktree) = (false, false);
    let mut source = None;
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i].clone();
        if let Some(s) = option_value(&opts, &mut i, Some("-s"), Some("--source"))? {
            source = Some(s);
        } else {
            match a.as_str() {
                "-S" | "--staged" => staged = true,
                "-W" | "--worktree" => worktree = true,
                "-SW" | "-WS" => {
                    staged = true;
                    worktree = true;
                }
                "-q" | "--quiet" => {}
                _ if a.starts_with('-') => return Err(unknown_option("restore", &a)),
                _ => paths.push(a),
            }
        }
        i += 1;
    }
    if paths.is_empty() {
        return Err(Error::fatal("you must specify path(s) to restore"));
    }
    let repo = open(inv)?;
    if !staged {
        worktree = true;
    }
    if staged {
        let src = source.clone().unwrap_or_else(|| "HEAD".into());
        unstage(inv, &repo, &src, &paths)?;
    }
    if worktree {
        restore_paths(
            inv,
            &repo,
            source
                .as_deref()
                .or(if staged { Some("HEAD") } else { None }),
            &paths,
            false,
            false,
            out,
        )?;
    }
    Ok(0)
}

/// Sets the index entries of `paths` to what `source` holds (`reset --
/// PATH`, `restore --staged`).
pub(crate) fn unstage(inv: &Invocation, repo: &Repo, source: &str, paths: &[String]) -> Result<()> {
    let specs = pathspecs(inv, repo, paths)?;
    let tree = match crate::revision::try_resolve(repo, source)? {
        Some(id) => crate::tree::flatten(&repo.odb, &crate::revision::peel(repo, id, Kind::Tree)?)?,
        None if source == "HEAD" => Flat::new(),
        None => return Err(crate::revision::unknown(source)),
    };
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    for (spec, typed) in specs.iter().zip(paths) {
        let in_index = index.paths_under(spec);
        let in_tree: Vec<&Vec<u8>> = tree
            .keys()
            .filter(|p| crate::paths::is_under(p, spec))
            .collect();
        if in_index.is_empty() && in_tree.is_empty() {
            return Err(Error::Failed {
                code: 1,
                message: format!(
                    "error: pathspec '{typed}' did not match any file(s) known to git"
                ),
            });
        }
        for p in in_index {
            if !tree.contains_key(&p) {
                index.remove(&p);
            }
        }
        for p in in_tree {
            let (mode, id) = tree[p];
            let stat = index
                .get(p)
                .filter(|e| e.id == id && e.mode == mode)
                .map(|e| e.stat)
                .unwrap_or_default();
            index.put(crate::index::Entry {
                path: p.clone(),
                id,
                mode,
                stage: 0,
                stat,
            });
        }
    }
    index.save(&repo.files, &repo.git_dir)
}

/// Writes `paths` into the work tree from `source` (a revision) or from
/// the index; with `update_index` (checkout) the index takes the
/// source's entries too.
fn restore_paths(
    inv: &Invocation,
    repo: &Repo,
    source: Option<&str>,
    paths: &[String],
    announce: bool,
    update_index: bool,
    out: &mut Output,
) -> Result<i32> {
    let specs = pathspecs(inv, repo, paths)?;
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    let from: Flat = match source {
        Some(s) => {
            let id = crate::revision::try_resolve(repo, s)?
                .ok_or_else(|| crate::revision::unknown(s))?;
            crate::tree::flatten(&repo.odb, &crate::revision::peel(repo, id, Kind::Tree)?)?
        }
        None => index
            .entries
            .values()
            .filter(|e| e.stage == 0)
            .map(|e| (e.path.clone(), (e.mode, e.id)))
            .collect(),
    };
    let mut count = 0;
    for (spec, typed) in specs.iter().zip(paths) {
        let matched: Vec<(Vec<u8>, (u32, ObjectId))> = from
            .iter()
            .filter(|(p, _)| crate::paths::is_under(p, spec))
            .map(|(p, v)| (p.clone(), *v))
            .collect();
        if matched.is_empty() {
            let message = if source.is_none() && index.conflicted(spec) {
                format!("error: path '{typed}' is unmerged")
            } else {
                format!("error: pathspec '{typed}' did not match any file(s) known to git")
            };
            return Err(Error::Failed { code: 1, message });
        }
        for (path, (mode, id)) in matched {
            inv.check_stop()?;
            let e = write_entry(repo, &path, mode, id, inv.stop)?;
            if update_index || source.is_none() {
                // Fresh stat data for an unchanged entry; new content for checkout REV -- PATH.
                index.put(e);
            }
            count += 1;
        }
    }
    index.save(&repo.files, &repo.git_dir)?;
    if announce {
        let from_what = match source {
            Some(s) => {
                let id = crate::revision::resolve(repo, s)?;
                format!("from {}", short(&id))
            }
            None => "from the index".into(),
        };
        out.stderr.extend_from_slice(
            format!(
                "Updated {count} path{} {from_what}\n",
                if count == 1 { "" } else { "s" }
            )
            .as_bytes(),
        );
    }
    Ok(0)
}
