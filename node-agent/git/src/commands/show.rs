//! `git show [-s | --no-patch] [--oneline] [--format=F] [--name-only |
//! --name-status | --stat] [OBJECT…]`: a commit with its patch against its
//! first parent, an annotated tag, a tree's listing or a blob's content.

use super::log::{Format, print_commit};
use super::{open, option_value, unknown_option};
use crate::commit::{Commit, format_date};
use crate::error::{Error, Result};
use crate::odb::hex;
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use bstr::ByteSlice;
use gix_object::Kind;

/// Which form of changes follows a commit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Changes {
    Patch,
    None,
    NameOnly,
    NameStatus,
    Stat,
}

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut format = Format::Medium;
    let mut changes = Changes::Patch;
    let mut objects = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if let Some(f) = option_value(args, &mut i, None, Some("--format"))? {
            format = if f == "oneline" {
                Format::Oneline
            } else {
                Format::Template(
                    f.trim_start_matches("format:")
                        .trim_start_matches("tformat:")
                        .to_string(),
                )
            };
        } else if let Some(f) = option_value(args, &mut i, None, Some("--pretty"))? {
            format = if f == "oneline" {
                Format::Oneline
            } else {
                Format::Template(
                    f.trim_start_matches("format:")
                        .trim_start_matches("tformat:")
                        .to_string(),
                )
            };
        } else {
            match a.as_str() {
                "-s" | "--no-patch" => changes = Changes::None,
                "--oneline" => format = Format::Oneline,
                "--name-only" => changes = Changes::NameOnly,
                "--name-status" => changes = Changes::NameStatus,
                "--stat" => changes = Changes::Stat,
                "-p" | "--patch" | "--no-color" => {}
                "--" => {}
                _ if a.starts_with('-') => return Err(unknown_option("show", &a)),
                _ => objects.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    if objects.is_empty() {
        objects.push("HEAD".into());
    }
    let mut text = String::new();
    for (n, spec) in objects.iter().enumerate() {
        let id = crate::revision::try_resolve(&repo, spec)?.ok_or_else(|| {
            if spec == "HEAD" {
                Error::fatal("your current branch does not have any commits yet")
            } else {
                crate::revision::unknown(spec)
            }
        })?;
        let o = repo.odb.read(&id)?;
        match o.kind {
            Kind::Blob => {
                out.stdout.extend_from_slice(text.as_bytes());
                text.clear();
                out.stdout.extend_from_slice(&o.data);
            }
            Kind::Tree => {
                text.push_str(&format!("tree {spec}\n\n"));
                let t = gix_object::TreeRef::from_bytes(&o.data, crate::odb::HASH)
                    .map_err(|e| Error::Corrupt(e.to_string()))?;
                for e in t.entries {
                    text.push_str(&format!(
                        "{}{}\n",
                        e.filename,
                        if e.mode.is_tree() { "/" } else { "" }
                    ));
                }
            }
            Kind::Tag => {
                let tag = gix_object::TagRef::from_bytes(&o.data, crate::odb::HASH)
                    .map_err(|e| Error::Corrupt(e.to_string()))?;
                text.push_str(&format!("tag {}\n", tag.name));
                if let Some(t) = tag.tagger().ok().flatten() {
                    text.push_str(&format!("Tagger: {} <{}>\n", t.name, t.email));
                    if let Ok(time) = t.time() {
                        text.push_str(&format!("Date:   {}\n", format_date(&time)));
                    }
                }
                text.push_str(&format!("\n{}\n", tag.message.to_str_lossy().trim_end()));
                let target = crate::revision::peel_tags(&repo, tag.target())?;
                if repo.odb.read(&target)?.kind == Kind::Commit {
                    text.push('\n');
                    let c = crate::commit::read(&repo.odb, &target)?;
                    show_commit(&repo, &target, &c, &format, changes, &mut text)?;
                }
            }
            Kind::Commit => {
                if n > 0 && matches!(format, Format::Medium) {
                    text.push('\n');
                }
                let c = crate::commit::read(&repo.odb, &id)?;
                show_commit(&repo, &id, &c, &format, changes, &mut text)?;
            }
        }
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}

fn show_commit(
    repo: &Repo,
    id: &gix_hash::ObjectId,
    c: &Commit,
    format: &Format,
    changes: Changes,
    text: &mut String,
) -> Result<()> {
    print_commit(text, id, c, format);
    if changes == Changes::None {
        return Ok(());
    }
    let (before, after) = sides(repo, c)?;
    if before == after {
        return Ok(());
    }
    if matches!(format, Format::Medium) {
        text.push('\n');
    }
    super::diff::print_changes(repo, &before, &after, changes, text, &|_| None)
}

/// The flat trees of `c`'s first parent (empty for a root commit) and of `c`.
fn sides(repo: &Repo, c: &Commit) -> Result<(Flat, Flat)> {
    let after = crate::tree::flatten(&repo.odb, &c.tree)?;
    let before = match c.parents.first() {
        Some(p) => crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, p)?)?,
        None => Flat::new(),
    };
    Ok((before, after))
}

/// Appends `c`'s patch against its first parent (for `log -p`).
pub(crate) fn commit_patch(repo: &Repo, c: &Commit, text: &mut String) -> Result<()> {
    let (before, after) = sides(repo, c)?;
    super::diff::print_changes(repo, &before, &after, Changes::Patch, text, &|_| None)
}

#[allow(dead_code)]
fn unused(id: &gix_hash::ObjectId) -> String {
    hex(id)
}
