//! Moving the index and the work tree from one tree to another, as
//! `checkout`, `switch`, `reset --hard`, `merge` and `clone` do: paths that
//! differ between the two trees are rewritten, everything else (and local
//! changes to it) is left alone, and a local change or an untracked file
//! that would be lost stops the move before anything is written (git's
//! "two-way merge", Documentation/technical, `unpack-trees`).

use crate::Invocation;
use crate::changes::work_change;
use crate::error::{Error, Result};
use crate::files::{EXEC_PERM, FILE_PERM};
use crate::index::{Entry, Index, MODE_EXEC, MODE_GITLINK, MODE_LINK, mode_of, stat_of};
use crate::repo::Repo;
use crate::tree::Flat;
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::BTreeSet;

/// Which local state a move may throw away.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overwrite {
    /// Refuse to lose local changes or untracked files (checkout, merge).
    Refuse,
    /// Overwrite them (`checkout -f`, `reset --hard`).
    Force,
}

/// Refuses a tree path that would write outside the work tree or into
/// `.git` (an empty, `.` or `..` component, a `.git` component in any
/// case), or through a symlink of the work tree: a tree with a symlink
/// `a -> /elsewhere` and a file `a/x` must not write `/elsewhere/x`
/// (git's `verify_path` and "beyond a symbolic link").
fn check_path(repo: &Repo, path: &[u8]) -> Result<()> {
    let shown = || String::from_utf8_lossy(path).into_owned();
    if crate::paths::forbidden(path) {
        return Err(Error::fatal(format!("invalid path '{}'", shown())));
    }
    let mut end = 0;
    while let Some(i) = path[end..].iter().position(|b| *b == b'/') {
        end += i;
        if let Some(a) = repo.files.lstat(&repo.work_path(&path[..end]))?
            && a.kind == agentcomputer_fs::FileKind::Symlink
        {
            return Err(Error::fatal(format!(
                "cannot create '{}': '{}' is beyond a symbolic link",
                shown(),
                String::from_utf8_lossy(&path[..end])
            )));
        }
        end += 1;
    }
    Ok(())
}

/// Writes blob `id` with `mode` at repository path `path` in the work
/// tree; returns its index entry.
pub(crate) fn write_entry(
    repo: &Repo,
    path: &[u8],
    mode: u32,
    id: ObjectId,
    stop: &dyn Fn() -> bool,
) -> Result<Entry> {
    check_path(repo, path)?;
    let target = repo.work_path(path);
    if mode == MODE_GITLINK {
        repo.files.mkdir_p(&target)?;
    } else {
        match repo.files.lstat(&target)? {
            // Only an empty directory may give way to a file.
            Some(a) if a.kind == agentcomputer_fs::FileKind::Directory => {
                repo.files.remove_empty_dirs(&target, &repo.top)?;
            }
            // A symlink is replaced, never written through.
            Some(a) if a.kind == agentcomputer_fs::FileKind::Symlink => {
                repo.files.remove_file(&target)?;
            }
            _ => {}
        }
        if mode == MODE_LINK {
            let data = repo.odb.read_kind(&id, Kind::Blob)?;
            repo.files.symlink(&target, &data)?;
        } else {
            let perm = if mode == MODE_EXEC {
                EXEC_PERM
            } else {
                FILE_PERM
            };
            repo.odb.checkout_blob(&id, &target, perm, stop)?;
        }
    }
    let a = repo.files.lstat(&target)?.ok_or_else(|| {
        Error::fatal(format!(
            "unable to create file {}",
            String::from_utf8_lossy(path)
        ))
    })?;
    Ok(Entry {
        path: path.to_vec(),
        id,
        mode,
        stage: 0,
        stat: stat_of(&a),
    })
}

/// Removes repository path `path` from the work tree, and the
/// directories it leaves empty.
pub(crate) fn remove_entry(repo: &Repo, path: &[u8]) -> Result<()> {
    let target = repo.work_path(path);
    repo.files.remove_file(&target)?;
    if let Some(i) = target.iter().rposition(|b| *b == b'/') {
        repo.files.remove_empty_dirs(&target[..i], &repo.top)?;
    }
    Ok(())
}

/// Moves `index` and the work tree from tree `from` to tree `to`.
///
/// Errors: [`Error::Failed`] (exit 1) naming the files whose local
/// changes, or untracked files, would be overwritten; nothing is written
/// then. `verb` names the command in that message (`checkout`, `merge`).
pub(crate) fn switch(
    inv: &Invocation,
    repo: &Repo,
    index: &mut Index,
    from: &Flat,
    to: &Flat,
    overwrite: Overwrite,
    verb: &str,
) -> Result<()> {
    let paths: BTreeSet<&Vec<u8>> = from.keys().chain(to.keys()).collect();
    let mut changed = Vec::new();
    let mut dirty = Vec::new();
    let mut untracked = Vec::new();
    for path in paths {
        let (old, new) = (from.get(path), to.get(path));
        if old == new {
            continue;
        }
        inv.check_stop()?;
        changed.push(path.clone());
        if overwrite == Overwrite::Force {
            continue;
        }
        let work = repo
            .files
            .lstat(&repo.work_path(path))?
            .filter(|a| mode_of(a).is_some());
        match index.get(path).cloned() {
            Some(mut e) => {
                // The index must hold what `from` holds (or already what `to` holds)...
                let staged_ok = old.is_some_and(|(m, id)| *m == e.mode && *id == e.id)
                    || new.is_some_and(|(m, id)| *m == e.mode && *id == e.id);
                // ... and the work tree what the index holds.
                let work_ok = match work {
                    Some(a) => work_change(repo, &mut e, &a, index.written, inv.stop)?.is_none(),
                    None => false,
                };
                if !staged_ok || !work_ok {
                    dirty.push(path.clone());
                }
            }
            None if index.conflicted(path) => dirty.push(path.clone()),
            None => {
                if work.is_some() && new.is_some() {
                    untracked.push(path.clone());
                }
            }
        }
    }
    if !dirty.is_empty() || !untracked.is_empty() {
        let mut message = String::new();
        if !dirty.is_empty() {
            message.push_str(&format!(
                "error: Your local changes to the following files would be overwritten by {verb}:\n"
            ));
            for p in &dirty {
                message.push_str(&format!(
                    "\t{}\n",
                    String::from_utf8_lossy(&crate::paths::relative(p, &repo.prefix))
                ));
            }
            message.push_str(&format!(
                "Please commit your changes or stash them before you {}.\n",
                if verb == "checkout" {
                    "switch branches"
                } else {
                    verb
                }
            ));
        }
        if !untracked.is_empty() {
            message.push_str(&format!("error: The following untracked working tree files would be overwritten by {verb}:\n"));
            for p in &untracked {
                message.push_str(&format!(
                    "\t{}\n",
                    String::from_utf8_lossy(&crate::paths::relative(p, &repo.prefix))
                ));
            }
            message.push_str(&format!(
                "Please move or remove them before you {}.\n",
                if verb == "checkout" {
                    "switch branches"
                } else {
                    verb
                }
            ));
        }
        message.push_str("Aborting");
        return Err(Error::Failed { code: 1, message });
    }
    // A path git would refuse stops the move before anything is written.
    if let Some(bad) = changed
        .iter()
        .find(|p| to.contains_key(*p) && crate::paths::forbidden(p))
    {
        return Err(Error::fatal(format!(
            "invalid path '{}'",
            String::from_utf8_lossy(bad)
        )));
    }
    // Removals first: a file may give way to a directory of the same name.
    for path in &changed {
        if !to.contains_key(path) {
            inv.check_stop()?;
            remove_entry(repo, path)?;
            index.remove(path);
        }
    }
    for path in &changed {
        if let Some((mode, id)) = to.get(path) {
            inv.check_stop()?;
            let e = write_entry(repo, path, *mode, *id, inv.stop)?;
            index.put(e);
        }
    }
    Ok(())
}
