//! `git reset [--soft | --mixed | --hard] [-q] [REV]` and
//! `git reset [REV] [--] PATH…`.

use super::{open, short, split_dashdash, unknown_option};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::{Invocation, Output};
use gix_object::Kind;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, dashdash) = split_dashdash(args);
    let mut mode = "mixed";
    let mut quiet = false;
    let mut revs = Vec::new();
    for a in opts {
        match a.as_str() {
            "--soft" => mode = "soft",
            "--mixed" => mode = "mixed",
            "--hard" => mode = "hard",
            "--keep" | "--merge" => {
                return Err(Error::fatal(format!(
                    "{a} is not supported here; use --hard or --mixed"
                )));
            }
            "-q" | "--quiet" => quiet = true,
            _ if a.starts_with('-') => return Err(unknown_option("reset", &a)),
            _ => revs.push(a),
        }
    }
    let repo = open(inv)?;
    // Without `--`, arguments after the first that are not revisions are paths.
    if !dashdash && !revs.is_empty() {
        let first_is_rev = crate::revision::try_resolve(&repo, &revs[0])?.is_some();
        let split = if first_is_rev { 1 } else { 0 };
        paths.extend(revs.drain(split..));
    }
    let rev = revs.first().cloned().unwrap_or_else(|| "HEAD".into());
    if !paths.is_empty() {
        if mode != "mixed" {
            return Err(Error::fatal(format!("Cannot do {mode} reset with paths.")));
        }
        super::checkout::unstage(inv, &repo, &rev, &paths)?;
        return Ok(0);
    }
    let target = match crate::revision::try_resolve(&repo, &rev)? {
        Some(id) => crate::revision::peel(&repo, id, Kind::Commit)?,
        // `git reset` on an unborn branch empties the index.
        None if rev == "HEAD" => {
            if mode != "soft" {
                Index::default().save(&repo.files, &repo.git_dir)?;
            }
            return Ok(0);
        }
        None => return Err(crate::revision::unknown(&rev)),
    };
    let tree = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &target)?)?;
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    match mode {
        "soft" => {
            if !index.conflicts().is_empty() {
                return Err(Error::fatal(
                    "Cannot do a soft reset in the middle of a merge.",
                ));
            }
        }
        "mixed" => {
            let mut fresh = Index {
                written: index.written,
                ..Index::default()
            };
            for (path, (m, id)) in &tree {
                let stat = index
                    .get(path)
                    .filter(|e| e.id == *id && e.mode == *m)
                    .map(|e| e.stat)
                    .unwrap_or_default();
                fresh.put(crate::index::Entry {
                    path: path.clone(),
                    id: *id,
                    mode: *m,
                    stage: 0,
                    stat,
                });
            }
            fresh.save(&repo.files, &repo.git_dir)?;
            index = fresh;
        }
        _ => {
            super::checkout::restore_all(inv, &repo, &mut index, &tree)?;
            index.save(&repo.files, &repo.git_dir)?;
        }
    }
    repo.refs.set_head_target(target)?;
    for f in [&b"MERGE_HEAD"[..], b"MERGE_MSG", b"MERGE_MODE"] {
        repo.files
            .remove_file(&crate::files::join(&repo.git_dir, f))?;
    }
    if quiet {
        return Ok(0);
    }
    if mode == "hard" {
        let c = crate::commit::read(&repo.odb, &target)?;
        out.stdout.extend_from_slice(
            format!(
                "HEAD is now at {} {}\n",
                short(&target),
                crate::commit::subject(&c.message)
            )
            .as_bytes(),
        );
    } else if mode == "mixed" {
        let st = crate::changes::status(inv, &repo)?;
        if !st.unstaged.is_empty() {
            let mut text = String::from("Unstaged changes after reset:\n");
            for (p, c) in &st.unstaged {
                text.push_str(&format!("{}\t{}\n", c.letter(), String::from_utf8_lossy(p)));
            }
            out.stdout.extend_from_slice(text.as_bytes());
        }
        let _ = index;
    }
    Ok(0)
}
