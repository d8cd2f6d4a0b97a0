//! `git commit [-a] [-m MSG…] [-F FILE] [--amend] [--allow-empty]
//! [--allow-empty-message] [--author "NAME <EMAIL>"] [-q]`.

use super::{open, option_value, short, split_dashdash, status, unknown_option};
use crate::changes::Change;
use crate::commit::{Identity, clean_message};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use bstr::ByteSlice;
use gix_object::Kind;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, paths, _) = split_dashdash(args);
    if !paths.is_empty() {
        return Err(Error::fatal(
            "committing only some paths is not supported here; stage them with git add and commit",
        ));
    }
    let mut messages: Vec<String> = Vec::new();
    let mut file = None;
    let (mut all, mut amend, mut allow_empty, mut allow_empty_message, mut quiet) =
        (false, false, false, false, false);
    let mut author = None;
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i].clone();
        if let Some(m) = option_value(&opts, &mut i, Some("-m"), Some("--message"))? {
            messages.push(m);
        } else if let Some(f) = option_value(&opts, &mut i, Some("-F"), Some("--file"))? {
            file = Some(f);
        } else if let Some(x) = option_value(&opts, &mut i, None, Some("--author"))? {
            author = Some(x);
        } else {
            match a.as_str() {
                "-a" | "--all" => all = true,
                "--amend" => amend = true,
                "--allow-empty" => allow_empty = true,
                "--allow-empty-message" => allow_empty_message = true,
                "-q" | "--quiet" => quiet = true,
                "--no-verify" | "-n" | "--no-edit" | "-s" | "--signoff" | "--no-gpg-sign" => {}

                _ => return Err(unknown_option("commit", &a)),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    if all {
        stage_tracked(inv, &repo, &mut index)?;
    }
    let head = repo.refs.resolve("HEAD")?;
    let head_commit = head
        .map(|h| crate::commit::read(&repo.odb, &h))
        .transpose()?;
    let mut message = if let Some(f) = file {
        let path = inv.engine_path(f.as_bytes()).unwrap_or_default();
        let bytes = repo.files.read(&path)?.ok_or_else(|| {
            Error::fatal(format!(
                "could not read log file '{f}': No such file or directory"
            ))
        })?;
        bytes.to_str_lossy().into_owned()
    } else {
        messages.join("\n\n")
    };
    if messages.is_empty()
        && amend
        && let Some(c) = &head_commit
    {
        message = c.message.to_str_lossy().into_owned();
    }
    let message = clean_message(&message);
    if message.is_empty() && (messages.is_empty() && !amend) && !allow_empty_message {
        return Err(Error::Failed {
            code: 1,
            message: "error: Terminal is dumb, but EDITOR unset\nPlease supply the message using either -m or -F option.".into(),
        });
    }
    if message.is_empty() && !allow_empty_message {
        return Err(Error::Failed {
            code: 1,
            message: "Aborting commit due to empty commit message.".into(),
        });
    }
    let tree = crate::tree::write_from_index(&repo.odb, &index)?;
    let parent_tree = match (&head_commit, amend) {
        (Some(c), false) => Some(c.tree),
        (Some(c), true) => match c.parents.first() {
            Some(p) => Some(crate::commit::read(&repo.odb, p)?.tree),
            None => None,
        },
        (None, _) => None,
    };
    // Not written: a dangling empty tree would show in `git fsck`.
    let empty_tree = gix_object::compute_hash(crate::odb::HASH, Kind::Tree, b"")
        .map_err(|e| Error::fatal(e.to_string()))?;
    if !allow_empty && !amend && parent_tree.unwrap_or(empty_tree) == tree && !merging(&repo)? {
        if all {
            index.save(&repo.files, &repo.git_dir)?;
        }
        let st = crate::changes::status(inv, &repo)?;
        status::long_format(inv, &repo, &st, out, true)?;
        return Ok(1);
    }
    if head.is_none() && amend {
        return Err(Error::fatal("You have nothing to amend."));
    }
    let mut author_id = repo.identity(inv, "AUTHOR")?;
    if let Some(a) = author {
        let (name, email) = parse_author(&a)?;
        author_id.name = name;
        author_id.email = email;
    } else if amend && let Some(c) = &head_commit {
        author_id = Identity {
            name: c.author.name.to_str_lossy().into_owned(),
            email: c.author.email.to_str_lossy().into_owned(),
            seconds: c.author.time.seconds,
            offset: c.author.time.offset,
        };
    }
    let committer = repo.identity(inv, "COMMITTER")?;
    let mut parents: Vec<gix_hash::ObjectId> = match (&head_commit, amend) {
        (Some(c), true) => c.parents.to_vec(),
        (Some(_), false) => head.into_iter().collect(),
        (None, _) => Vec::new(),
    };
    let merge_head = crate::files::join(&repo.git_dir, b"MERGE_HEAD");
    if let Some(bytes) = repo.files.read(&merge_head)? {
        for line in bytes.lines() {
            if let Ok(id) = gix_hash::ObjectId::from_hex(line.trim()) {
                parents.push(id);
            }
        }
    }
    let commit = gix_object::Commit {
        tree,
        parents: parents.into_iter().collect(),
        author: author_id.signature(),
        committer: committer.signature(),
        encoding: None,
        message: message.clone().into(),
        extra_headers: Vec::new(),
    };
    let id = repo.odb.write_object(&commit)?;
    index.save(&repo.files, &repo.git_dir)?;
    repo.refs.set_head_target(id)?;
    for f in [&b"MERGE_HEAD"[..], b"MERGE_MSG", b"MERGE_MODE"] {
        repo.files
            .remove_file(&crate::files::join(&repo.git_dir, f))?;
    }
    if !quiet {
        let branch = repo
            .current_branch()?
            .unwrap_or_else(|| "detached HEAD".into());
        let root = if commit.parents.is_empty() {
            " (root-commit)"
        } else {
            ""
        };
        let mut text = format!(
            "[{branch}{root} {}] {}\n",
            short(&id),
            crate::commit::subject(message.as_bytes())
        );
        let before = match parent_tree {
            Some(t) => crate::tree::flatten(&repo.odb, &t)?,
            None => Flat::new(),
        };
        let after = crate::tree::flatten(&repo.odb, &tree)?;
        text.push_str(&summary(&repo, &before, &after)?);
        out.stdout.extend_from_slice(text.as_bytes());
    }
    let _ = Kind::Commit;
    Ok(0)
}

/// Whether a merge is being concluded (`MERGE_HEAD` exists).
fn merging(repo: &Repo) -> Result<bool> {
    Ok(repo
        .files
        .lstat(&crate::files::join(&repo.git_dir, b"MERGE_HEAD"))?
        .is_some())
}

/// `-a`: stages every tracked file's change and deletion.
fn stage_tracked(inv: &Invocation, repo: &Repo, index: &mut Index) -> Result<()> {
    let paths: Vec<Vec<u8>> = index
        .entries
        .values()
        .filter(|e| e.stage == 0)
        .map(|e| e.path.clone())
        .collect();
    for path in paths {
        match repo
            .files
            .lstat(&repo.work_path(&path))?
            .filter(|a| crate::index::mode_of(a).is_some())
        {
            Some(a) => {
                super::add::stage(inv, repo, index, &path, &a, false)?;
            }
            None => {
                index.remove(&path);
            }
        }
    }
    Ok(())
}

/// `NAME <EMAIL>` from `--author`.
fn parse_author(text: &str) -> Result<(String, String)> {
    let (name, rest) = text.split_once('<').ok_or_else(|| {
        Error::fatal(format!(
            "--author '{text}' is not 'Name <email>' and matches no existing author"
        ))
    })?;
    let email = rest.trim_end().trim_end_matches('>');
    Ok((name.trim().to_string(), email.to_string()))
}

/// The lines after a commit: ` N files changed, I insertions(+), D
/// deletions(-)` and ` create mode …`/` delete mode …`.
pub(crate) fn summary(repo: &Repo, before: &Flat, after: &Flat) -> Result<String> {
    let changes = crate::changes::staged(after, &flat_index(before));
    let (mut files, mut ins, mut del) = (0, 0, 0);
    let mut modes = String::new();
    for (path, change) in changes.iter().map(|(p, c)| (p, invert(*c))) {
        files += 1;
        let old = before.get(path);
        let new = after.get(path);
        let read = |side: Option<&(u32, gix_hash::ObjectId)>| -> Result<Vec<u8>> {
            match side {
                Some((m, id)) if *m != crate::index::MODE_GITLINK => {
                    repo.odb.read_kind(id, Kind::Blob)
                }
                _ => Ok(Vec::new()),
            }
        };
        let (a, b) = (read(old)?, read(new)?);
        if !a.contains(&0) && !b.contains(&0) {
            let (i, d) = line_counts(&a, &b);
            ins += i;
            del += d;
        }
        let p = path.to_str_lossy();
        match change {
            Change::Added => modes.push_str(&format!(
                " create mode {:06o} {p}\n",
                new.map(|n| n.0).unwrap_or(0)
            )),
            Change::Deleted => modes.push_str(&format!(
                " delete mode {:06o} {p}\n",
                old.map(|o| o.0).unwrap_or(0)
            )),
            _ => {
                if let (Some(o), Some(n)) = (old, new)
                    && o.0 != n.0
                {
                    modes.push_str(&format!(" mode change {:06o} => {:06o} {p}\n", o.0, n.0));
                }
            }
        }
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_string()
        } else {
            many.to_string()
        }
    };
    let mut line = format!(" {files} {} changed", plural(files, "file", "files"));
    if ins > 0 || (ins == 0 && del == 0) {
        line.push_str(&format!(
            ", {ins} {}(+)",
            plural(ins, "insertion", "insertions")
        ));
    }
    if del > 0 {
        line.push_str(&format!(
            ", {del} {}(-)",
            plural(del, "deletion", "deletions")
        ));
    }
    Ok(format!("{line}\n{modes}"))
}

/// (inserted, deleted) lines from `a` to `b`.
pub(crate) fn line_counts(a: &[u8], b: &[u8]) -> (usize, usize) {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let diff = crate::diff_text::line_diff(a.as_ref(), b.as_ref());
    let mut ins = 0;
    let mut del = 0;
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => ins += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (ins, del)
}

fn flat_index(flat: &Flat) -> Index {
    let mut index = Index::default();
    for (path, (mode, id)) in flat {
        index.put(crate::index::Entry {
            path: path.clone(),
            id: *id,
            mode: *mode,
            stage: 0,
            stat: Default::default(),
        });
    }
    index
}

/// `staged(after, before)` reports from `after`'s side; turn it around.
fn invert(c: Change) -> Change {
    match c {
        Change::Added => Change::Deleted,
        Change::Deleted => Change::Added,
        other => other,
    }
}
