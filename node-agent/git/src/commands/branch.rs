//! `git branch [--list] [-v] [-a] [--show-current]`, `git branch [-f] NAME
//! [START]`, `git branch -d | -D NAME…`, `git branch -m [OLD] NEW`.

use super::{open, short, unknown_option};
use crate::commit::subject;
use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::{Invocation, Output};
use gix_hash::ObjectId;
use gix_object::Kind;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (
        mut delete,
        mut force_delete,
        mut rename,
        mut force,
        mut verbose,
        mut all,
        mut show_current,
    ) = (false, false, false, false, false, false, false);
    let mut names = Vec::new();
    for a in args {
        match a.as_str() {
            "-d" | "--delete" => delete = true,
            "-D" => force_delete = true,
            "-m" | "--move" => rename = true,
            "-M" => {
                rename = true;
                force = true;
            }
            "-f" | "--force" => force = true,
            "-v" | "-vv" | "--verbose" => verbose = true,
            "-a" | "--all" | "-r" | "--remotes" => all = true,
            "--list" | "-l" | "--no-color" => {}
            "--show-current" => show_current = true,
            _ if a.starts_with('-') => return Err(unknown_option("branch", a)),
            _ => names.push(a.clone()),
        }
    }
    let repo = open(inv)?;
    if show_current {
        if let Some(b) = repo.current_branch()? {
            out.stdout.extend_from_slice(format!("{b}\n").as_bytes());
        }
        return Ok(0);
    }
    if delete || force_delete {
        return delete_branches(&repo, inv, &names, force_delete || force, out);
    }
    if rename {
        return rename_branch(&repo, &names, force, out);
    }
    if names.is_empty() {
        return list(&repo, verbose, all, out);
    }
    let name = &names[0];
    if !crate::refs::valid_name(name) || name == "HEAD" {
        return Err(Error::fatal(format!("'{name}' is not a valid branch name")));
    }
    let start = names.get(1).map(String::as_str).unwrap_or("HEAD");
    let id = match crate::revision::try_resolve(&repo, start)? {
        Some(id) => crate::revision::peel(&repo, id, Kind::Commit)?,
        None => {
            let shown = if start == "HEAD" {
                repo.current_branch()?.unwrap_or_else(|| "HEAD".into())
            } else {
                start.to_string()
            };
            return Err(Error::fatal(format!("not a valid object name: '{shown}'")));
        }
    };
    let full = format!("refs/heads/{name}");
    if repo.refs.read(&full)?.is_some() {
        if !force {
            return Err(Error::fatal(format!(
                "a branch named '{name}' already exists"
            )));
        }
        if repo.current_branch()?.as_deref() == Some(name.as_str()) {
            return Err(Error::fatal(
                "cannot force update the current branch".to_string(),
            ));
        }
    }
    repo.refs.set(&full, id)?;
    Ok(0)
}

fn list(repo: &Repo, verbose: bool, all: bool, out: &mut Output) -> Result<i32> {
    let current = repo.current_branch()?;
    let mut text = String::new();
    if current.is_none()
        && let Some(h) = repo.refs.resolve("HEAD")?
    {
        text.push_str(&format!("* (HEAD detached at {})\n", short(&h)));
    }
    let mut refs: Vec<(String, ObjectId)> = repo
        .refs
        .list("refs/heads/")?
        .into_iter()
        .map(|(n, id)| (n.trim_start_matches("refs/heads/").to_string(), id))
        .collect();
    if all {
        refs.extend(repo.refs.list("refs/remotes/")?.into_iter().map(|(n, id)| {
            (
                format!("remotes/{}", n.trim_start_matches("refs/remotes/")),
                id,
            )
        }));
    }
    let width = refs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, id) in refs {
        let mark = if current.as_deref() == Some(name.as_str()) {
            '*'
        } else {
            ' '
        };
        if verbose {
            let c = crate::commit::read(&repo.odb, &id)?;
            text.push_str(&format!(
                "{mark} {name:<width$} {} {}\n",
                short(&id),
                subject(&c.message)
            ));
        } else {
            text.push_str(&format!("{mark} {name}\n"));
        }
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}

fn delete_branches(
    repo: &Repo,
    inv: &Invocation,
    names: &[String],
    force: bool,
    out: &mut Output,
) -> Result<i32> {
    if names.is_empty() {
        return Err(Error::fatal("branch name required"));
    }
    let current = repo.current_branch()?;
    let head = repo.refs.resolve("HEAD")?;
    let mut code = 0;
    for name in names {
        let full = format!("refs/heads/{name}");
        let Some(id) = repo.refs.resolve(&full)? else {
            out.stderr
                .extend_from_slice(format!("error: branch '{name}' not found.\n").as_bytes());
            code = 1;
            continue;
        };
        if current.as_deref() == Some(name.as_str()) {
            out.stderr.extend_from_slice(
                format!(
                    "error: Cannot delete branch '{name}' checked out at '{}'\n",
                    inv.shown(&repo.top)
                )
                .as_bytes(),
            );
            code = 1;
            continue;
        }
        if !force
            && !head
                .map(|h| super::merge::is_ancestor(repo, &id, &h))
                .transpose()?
                .unwrap_or(false)
        {
            out.stderr.extend_from_slice(
                format!("error: The branch '{name}' is not fully merged.\nIf you are sure you want to delete it, run 'git branch -D {name}'.\n").as_bytes(),
            );
            code = 1;
            continue;
        }
        repo.refs.delete(&full)?;
        out.stdout
            .extend_from_slice(format!("Deleted branch {name} (was {}).\n", short(&id)).as_bytes());
    }
    Ok(code)
}

fn rename_branch(repo: &Repo, names: &[String], force: bool, _out: &mut Output) -> Result<i32> {
    let current = repo.current_branch()?;
    let (old, new) = match names {
        [new] => (
            current.clone().ok_or_else(|| {
                Error::fatal("cannot rename the current branch while not on any.")
            })?,
            new.clone(),
        ),
        [old, new] => (old.clone(), new.clone()),
        _ => return Err(Error::fatal("too many arguments for a rename operation")),
    };
    if !crate::refs::valid_name(&new) {
        return Err(Error::fatal(format!("'{new}' is not a valid branch name")));
    }
    let (old_full, new_full) = (format!("refs/heads/{old}"), format!("refs/heads/{new}"));
    let id = repo.refs.resolve(&old_full)?;
    if repo.refs.read(&new_full)?.is_some() && !force && old != new {
        return Err(Error::fatal(format!(
            "a branch named '{new}' already exists"
        )));
    }
    match id {
        Some(id) => {
            repo.refs.set(&new_full, id)?;
            if old != new {
                repo.refs.delete(&old_full)?;
            }
        }
        // An unborn current branch: only HEAD changes.
        None if current.as_deref() == Some(old.as_str()) => {}
        None => return Err(Error::fatal(format!("no branch named '{old}'"))),
    }
    if current.as_deref() == Some(old.as_str()) {
        repo.refs.set_symbolic("HEAD", &new_full)?;
    }
    Ok(0)
}
