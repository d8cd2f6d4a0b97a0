//! `git log [--oneline] [-n N | -N | --max-count=N] [--format=F |
//! --pretty=F] [--reverse] [-p] [REV…] [[--] PATH…]`.
//!
//! Commits are listed newest first by committer date, as git does without
//! `--topo-order`; with paths, only commits that change them against
//! their first parent (a root commit that adds them) are listed.

use super::{open, option_value, short, split_dashdash, unknown_option};
use crate::commit::{Commit, format_date, subject};
use crate::error::{Error, Result};
use crate::odb::hex;
use crate::repo::Repo;
use crate::{Invocation, Output};
use bstr::ByteSlice;
use gix_hash::ObjectId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

/// How each commit is printed.
#[derive(Clone)]
pub(crate) enum Format {
    /// git's default (`medium`).
    Medium,
    /// `--oneline`.
    Oneline,
    /// A `--format` template.
    Template(String),
}

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (opts, mut paths, dashdash) = split_dashdash(args);
    let mut format = Format::Medium;
    let mut limit: Option<usize> = None;
    let mut reverse = false;
    let mut patch = false;
    let mut all = false;
    let mut revs = Vec::new();
    let mut i = 0;
    while i < opts.len() {
        let a = opts[i].clone();
        if let Some(n) = option_value(&opts, &mut i, Some("-n"), Some("--max-count"))? {
            limit = Some(
                n.parse()
                    .map_err(|_| Error::fatal(format!("'{n}': not an integer")))?,
            );
        } else if let Some(f) = option_value(&opts, &mut i, None, Some("--format"))? {
            format = parse_format(&f)?;
        } else if let Some(f) = option_value(&opts, &mut i, None, Some("--pretty"))? {
            format = parse_format(&f)?;
        } else if a.len() > 1 && a.starts_with('-') && a[1..].bytes().all(|b| b.is_ascii_digit()) {
            limit = Some(a[1..].parse().unwrap_or(usize::MAX));
        } else {
            match a.as_str() {
                "--oneline" => format = Format::Oneline,
                "--reverse" => reverse = true,
                "--all" => all = true,
                "-p" | "-u" | "--patch" => patch = true,
                "--no-decorate" | "--decorate" | "--no-color" | "--first-parent"
                | "--date-order" | "--no-merges" => {}
                _ if a.starts_with('-') => return Err(unknown_option("log", &a)),
                _ => revs.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    let mut starts = Vec::new();
    // `A..B` and `^A`: commits reachable from A are left out
    // (gitrevisions(7), "Dotted Range Notations").
    let mut hidden_tips = Vec::new();
    let commit_of = |spec: &str| -> Result<ObjectId> {
        let id = crate::revision::try_resolve(&repo, spec)?
            .ok_or_else(|| crate::revision::unknown(spec))?;
        crate::revision::peel(&repo, id, gix_object::Kind::Commit)
    };
    let mut plain = Vec::new();
    for r in &revs {
        if let Some((a, b)) = r.split_once("..").filter(|(_, b)| !b.starts_with('.')) {
            hidden_tips.push(commit_of(if a.is_empty() { "HEAD" } else { a })?);
            starts.push(commit_of(if b.is_empty() { "HEAD" } else { b })?);
        } else if let Some(a) = r.strip_prefix('^') {
            hidden_tips.push(commit_of(a)?);
        } else {
            plain.push(r.clone());
        }
    }
    if all {
        for id in repo
            .refs
            .list("refs/")?
            .into_values()
            .chain(repo.refs.resolve("HEAD")?)
        {
            if let Ok(c) = crate::revision::peel(&repo, id, gix_object::Kind::Commit) {
                starts.push(c);
            }
        }
    } else if plain.is_empty() && starts.is_empty() {
        plain.push("HEAD".into());
    }
    let revs = plain;
    for r in &revs {
        match crate::revision::try_resolve(&repo, r)? {
            Some(id) => starts.push(crate::revision::peel(&repo, id, gix_object::Kind::Commit)?),
            None if r == "HEAD" => {
                let branch = repo.current_branch()?.unwrap_or_else(|| "HEAD".into());
                return Err(Error::fatal(format!(
                    "your current branch '{branch}' does not have any commits yet"
                )));
            }
            None if !dashdash => {
                // Not a revision: a path, if it exists (git's DWIM).
                match crate::paths::repo_path(&repo.top, &inv.cwd, r.as_bytes()) {
                    Some(p) if repo.files.lstat(&repo.work_path(&p))?.is_some() => {
                        paths.push(r.clone());
                        if starts.is_empty()
                            && revs.len() == 1
                            && let Some(h) = repo.refs.resolve("HEAD")?
                        {
                            starts.push(h);
                        }
                    }
                    _ => return Err(crate::revision::unknown(r)),
                }
            }
            None => return Err(crate::revision::unknown(r)),
        }
    }
    let specs = super::pathspecs(inv, &repo, &paths)?;
    let hidden = ancestors(inv, &repo, &hidden_tips)?;
    let commits = walk(inv, &repo, &starts, &hidden, &specs, limit, reverse)?;
    let mut text = String::new();
    for (n, (id, c)) in commits.iter().enumerate() {
        if n > 0 && matches!(format, Format::Medium) {
            text.push('\n');
        }
        print_commit(&mut text, id, c, &format);
        if patch {
            if !matches!(format, Format::Oneline) {
                text.push('\n');
            }
            super::show::commit_patch(&repo, c, &mut text)?;
        }
    }
    out.stdout.extend_from_slice(text.as_bytes());
    Ok(0)
}

fn parse_format(f: &str) -> Result<Format> {
    Ok(match f {
        "oneline" => Format::Oneline,
        "medium" => Format::Medium,
        _ => match f
            .strip_prefix("format:")
            .or_else(|| f.strip_prefix("tformat:"))
        {
            Some(t) => Format::Template(t.to_string()),
            None if f.contains('%') => Format::Template(f.to_string()),
            None => return Err(Error::fatal(format!("invalid --pretty format: {f}"))),
        },
    })
}

/// Every commit reachable from `tips`, themselves included.
fn ancestors(inv: &Invocation, repo: &Repo, tips: &[ObjectId]) -> Result<HashSet<ObjectId>> {
    let mut seen = HashSet::new();
    let mut queue: Vec<ObjectId> = tips.to_vec();
    while let Some(id) = queue.pop() {
        if seen.insert(id) {
            inv.check_stop()?;
            queue.extend(crate::commit::read(&repo.odb, &id)?.parents);
        }
    }
    Ok(seen)
}

/// Up to `limit` commits reachable from `starts` but not in `hidden`,
/// newest first (or oldest first with `reverse`), keeping those that
/// touch `paths` if any.
pub(crate) fn walk(
    inv: &Invocation,
    repo: &Repo,
    starts: &[ObjectId],
    hidden: &HashSet<ObjectId>,
    paths: &[Vec<u8>],
    limit: Option<usize>,
    reverse: bool,
) -> Result<Vec<(ObjectId, Commit)>> {
    // Newest first; commits of equal date in the order they were met, as
    // git's date-ordered list keeps them.
    let mut heap = BinaryHeap::new();
    let mut seen = HashSet::new();
    let mut order = 0u64;
    for s in starts {
        if !hidden.contains(s) && seen.insert(*s) {
            let c = crate::commit::read(&repo.odb, s)?;
            order += 1;
            heap.push((c.committer.time.seconds, Reverse(order), *s));
        }
    }
    let mut out = Vec::new();
    while let Some((_, _, id)) = heap.pop() {
        inv.check_stop()?;
        let c = crate::commit::read(&repo.odb, &id)?;
        for p in &c.parents {
            if !hidden.contains(p) && seen.insert(*p) {
                let pc = crate::commit::read(&repo.odb, p)?;
                order += 1;
                heap.push((pc.committer.time.seconds, Reverse(order), *p));
            }
        }
        if !paths.is_empty() && !touches(repo, &c, paths)? {
            continue;
        }
        out.push((id, c));
        if !reverse && limit.is_some_and(|l| out.len() >= l) {
            break;
        }
    }
    if reverse {
        if let Some(l) = limit {
            out.truncate(l);
        }
        out.reverse();
    }
    Ok(out)
}

/// Whether commit `c` changes anything under `paths` against its first
/// parent.
fn touches(repo: &Repo, c: &Commit, paths: &[Vec<u8>]) -> Result<bool> {
    let after = crate::tree::flatten(&repo.odb, &c.tree)?;
    let before = match c.parents.first() {
        Some(p) => crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, p)?)?,
        None => Default::default(),
    };
    let under = |p: &Vec<u8>| paths.iter().any(|s| crate::paths::is_under(p, s));
    Ok(after
        .iter()
        .filter(|(p, _)| under(p))
        .any(|(p, v)| before.get(p) != Some(v))
        || before
            .keys()
            .filter(|p| under(p))
            .any(|p| !after.contains_key(p)))
}

/// Appends commit `c` in `format`.
pub(crate) fn print_commit(text: &mut String, id: &ObjectId, c: &Commit, format: &Format) {
    match format {
        Format::Oneline => {
            text.push_str(&format!("{} {}\n", short(id), subject(&c.message)));
        }
        Format::Medium => {
            text.push_str(&format!("commit {}\n", hex(id)));
            if c.parents.len() > 1 {
                let ps: Vec<String> = c.parents.iter().map(|p| short(p)).collect();
                text.push_str(&format!("Merge: {}\n", ps.join(" ")));
            }
            text.push_str(&format!("Author: {} <{}>\n", c.author.name, c.author.email));
            text.push_str(&format!("Date:   {}\n\n", format_date(&c.author.time)));
            for line in c.message.to_str_lossy().trim_end_matches('\n').lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
        Format::Template(t) => {
            text.push_str(&expand(t, id, c));
            text.push('\n');
        }
    }
}

/// The `--format` placeholders of git-log(1) "PRETTY FORMATS" that
/// scripts use most: `%H %h %T %t %P %p %an %ae %ad %at %cn %ce %cd %ct
/// %s %b %B %n %%` and `%xNN`.
fn expand(t: &str, id: &ObjectId, c: &Commit) -> String {
    let message = c.message.to_str_lossy();
    let body = message
        .split_once("\n\n")
        .map(|(_, b)| b.trim_end().to_string())
        .unwrap_or_default();
    let mut out = String::new();
    let mut chars = t.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        // `%xNN`: the byte with hex code NN (ASCII only here, the text
        // being a string), which scripts use as field separators (`%x00`).
        if chars.peek() == Some(&'x') {
            let mut ahead = chars.clone();
            ahead.next();
            let digits: String = ahead.by_ref().take(2).collect();
            if digits.len() == 2
                && digits.bytes().all(|d| d.is_ascii_hexdigit())
                && let Ok(b) = u8::from_str_radix(&digits, 16)
                && b.is_ascii()
            {
                out.push(char::from(b));
                chars = ahead;
                continue;
            }
        }
        let mut code = String::new();
        if let Some(&n) = chars.peek() {
            code.push(n);
            chars.next();
            if matches!(n, 'a' | 'c')
                && let Some(&m) = chars.peek()
            {
                code.push(m);
                chars.next();
            }
        }
        let v = match code.as_str() {
            "H" => hex(id),
            "h" => short(id),
            "T" => hex(&c.tree),
            "t" => short(&c.tree),
            "P" => c
                .parents
                .iter()
                .map(|p| hex(p))
                .collect::<Vec<_>>()
                .join(" "),
            "p" => c
                .parents
                .iter()
                .map(|p| short(p))
                .collect::<Vec<_>>()
                .join(" "),
            "an" => c.author.name.to_string(),
            "ae" => c.author.email.to_string(),
            "ad" => format_date(&c.author.time),
            "at" => c.author.time.seconds.to_string(),
            "cn" => c.committer.name.to_string(),
            "ce" => c.committer.email.to_string(),
            "cd" => format_date(&c.committer.time),
            "ct" => c.committer.time.seconds.to_string(),
            "s" => subject(&c.message),
            "b" => {
                if body.is_empty() {
                    String::new()
                } else {
                    format!("{body}\n")
                }
            }
            "B" => message.trim_end_matches('\n').to_string() + "\n",
            "n" => "\n".into(),
            "%" => "%".into(),
            other => format!("%{other}"),
        };
        out.push_str(&v);
    }
    out
}
