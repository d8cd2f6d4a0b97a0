//! `git fetch [REMOTE [REFSPEC…]]` and `git pull [--ff-only | --no-rebase]
//! [REMOTE [BRANCH]]`, and the fetching `clone` shares: ask the remote
//! for the objects of the refs the refspecs map, store them (one pack),
//! then move the remote-tracking refs and write `FETCH_HEAD`, in that
//! order, so a stopped fetch moves no ref.

use super::{open, short, unknown_option};
use crate::error::{Error, Result};
use crate::files::{FILE_PERM, join};
use crate::remote::{Advert, Remote, Service};
use crate::repo::Repo;
use crate::{Invocation, Output};
use gix_hash::ObjectId;
use std::collections::{HashSet, VecDeque};

/// A refspec (`+refs/heads/*:refs/remotes/origin/*`), at most one `*`
/// per side.
#[derive(Debug, Clone)]
pub(crate) struct Refspec {
    pub force: bool,
    pub src: String,
    pub dst: String,
}

impl Refspec {
    pub(crate) fn parse(text: &str) -> Self {
        let (force, rest) = match text.strip_prefix('+') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (src, dst) = rest.split_once(':').unwrap_or((rest, ""));
        Self {
            force,
            src: src.to_string(),
            dst: dst.to_string(),
        }
    }

    /// Where remote ref `name` goes, if this refspec takes it.
    pub(crate) fn map(&self, name: &str) -> Option<String> {
        match self.src.split_once('*') {
            Some((pre, post)) => {
                let mid = name.strip_prefix(pre)?.strip_suffix(post)?;
                Some(self.dst.replacen('*', mid, 1))
            }
            None => (self.src == name || full_branch(&self.src) == name).then(|| {
                if self.dst.is_empty() {
                    String::new()
                } else {
                    self.dst.clone()
                }
            }),
        }
    }
}

fn full_branch(name: &str) -> String {
    if name.starts_with("refs/") || name == "HEAD" {
        name.to_string()
    } else {
        format!("refs/heads/{name}")
    }
}

/// `refs/heads/x` → `x`, as git shows ref names.
pub(crate) fn pretty(name: &str) -> &str {
    for p in ["refs/heads/", "refs/tags/", "refs/remotes/"] {
        if let Some(s) = name.strip_prefix(p) {
            return s;
        }
    }
    name
}

/// The URL as `From …` shows it: no trailing `/` or `.git`.
pub(crate) fn from_url(shown: &str) -> String {
    let s = shown.trim_end_matches('/');
    s.strip_suffix(".git").unwrap_or(s).to_string()
}

/// Commits to tell the remote we have: the tips of our refs and their
/// recent history (at most 256), newest first by walk order.
pub(crate) fn haves(repo: &Repo) -> Result<Vec<ObjectId>> {
    let mut queue: VecDeque<ObjectId> = repo.refs.list("refs/")?.into_values().collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while let Some(id) = queue.pop_front() {
        if out.len() >= 256 {
            break;
        }
        if !seen.insert(id) {
            continue;
        }
        let Some(o) = repo.odb.try_read(&id)? else {
            continue;
        };
        if o.kind == gix_object::Kind::Commit {
            out.push(id);
            if let Ok(c) = gix_object::CommitRef::from_bytes(&o.data, crate::odb::HASH) {
                queue.extend(c.parents());
            }
        }
    }
    Ok(out)
}

/// The remote refs a fetch took, with the object each named.
pub(crate) type Fetched = Vec<(String, ObjectId)>;

/// One ref a fetch moved (or made).
pub(crate) struct Moved {
    pub remote_name: String,
    pub local: Option<String>,
    pub old: Option<ObjectId>,
    pub new: ObjectId,
    pub forced: bool,
}

/// Fetches the refs `specs` map from `remote` into `repo`; returns the
/// refs moved, with what was fetched for `FETCH_HEAD` (remote name, id).
pub(crate) fn fetch_refs(
    inv: &Invocation,
    repo: &Repo,
    remote: &Remote,
    advert: &Advert,
    specs: &[Refspec],
    follow_tags: bool,
) -> Result<(Vec<Moved>, Fetched)> {
    let mut fetched = Vec::new();
    let mut plan = Vec::new();
    for (name, id) in &advert.refs {
        for spec in specs {
            if let Some(local) = spec.map(name) {
                fetched.push((name.clone(), *id));
                plan.push((
                    name.clone(),
                    (!local.is_empty()).then_some(local),
                    *id,
                    spec.force,
                ));
                break;
            }
        }
    }
    let mut wants = Vec::new();
    for (_, id) in &fetched {
        if !repo.odb.contains(id)? && !wants.contains(id) {
            wants.push(*id);
        }
    }
    if follow_tags {
        for (name, id) in &advert.refs {
            if name.starts_with("refs/tags/") && repo.refs.read(name)?.is_none() {
                plan.push((name.clone(), Some(name.clone()), *id, false));
            }
        }
    }
    if !wants.is_empty() {
        let haves = haves(repo)?;
        remote.fetch(advert, &join(&repo.git_dir, b"objects"), &wants, &haves)?;
        repo.odb.refresh();
    }
    // Objects are in; now the refs.
    let mut moved = Vec::new();
    for (remote_name, local, id, force) in plan {
        inv.check_stop()?;
        let Some(local) = local else {
            continue;
        };
        let old = repo.refs.resolve(&local)?;
        if old == Some(id) || !repo.odb.contains(&id)? {
            continue;
        }
        let forced = match old {
            Some(o) if !local.starts_with("refs/tags/") => {
                !super::merge::is_ancestor(repo, &o, &id).unwrap_or(false)
            }
            _ => false,
        };
        if forced && !force {
            continue;
        }
        repo.refs.set(&local, id)?;
        moved.push(Moved {
            remote_name,
            local: Some(local),
            old,
            new: id,
            forced,
        });
    }
    Ok((moved, fetched))
}

/// git's report of a fetch: `From URL` and one line per ref moved.
pub(crate) fn report(shown: &str, moved: &[Moved]) -> String {
    if moved.is_empty() {
        return String::new();
    }
    let width = moved
        .iter()
        .map(|m| pretty(&m.remote_name).len())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut text = format!("From {}\n", from_url(shown));
    for m in moved {
        let local = m.local.as_deref().map(pretty).unwrap_or("FETCH_HEAD");
        let remote = pretty(&m.remote_name);
        let (flag, summary, suffix) = match m.old {
            None if m.remote_name.starts_with("refs/tags/") => ('*', "[new tag]".to_string(), ""),
            None => ('*', "[new branch]".to_string(), ""),
            Some(old) if m.forced => (
                '+',
                format!("{}...{}", short(&old), short(&m.new)),
                "  (forced update)",
            ),
            Some(old) => (' ', format!("{}..{}", short(&old), short(&m.new)), ""),
        };
        text.push_str(&format!(
            " {flag} {summary:<17} {remote:<width$} -> {local}{suffix}\n"
        ));
    }
    text
}

/// Writes `.git/FETCH_HEAD`: the first fetched ref (or `merge`) for
/// merging, the others `not-for-merge`.
fn write_fetch_head(
    repo: &Repo,
    shown: &str,
    fetched: &[(String, ObjectId)],
    merge: Option<&str>,
) -> Result<()> {
    let mut text = String::new();
    let url = from_url(shown);
    for (i, (name, id)) in fetched.iter().enumerate() {
        let for_merge = match merge {
            Some(m) => m == name,
            None => i == 0,
        };
        let what = match name.strip_prefix("refs/heads/") {
            Some(b) => format!("branch '{b}' of {url}"),
            None => match name.strip_prefix("refs/tags/") {
                Some(t) => format!("tag '{t}' of {url}"),
                None => format!("'{name}' of {url}"),
            },
        };
        let flag = if for_merge { "" } else { "not-for-merge" };
        text.push_str(&format!("{}\t{flag}\t{what}\n", id.to_hex()));
    }
    repo.files.write(
        &join(&repo.git_dir, b"FETCH_HEAD"),
        text.as_bytes(),
        FILE_PERM,
    )
}

/// The remote `name_or_url` means in `repo`: (name if configured, URL).
pub(crate) fn remote_url(repo: &Repo, name_or_url: &str) -> (Option<String>, String) {
    match repo.config.get(&format!("remote.{name_or_url}.url")) {
        Some(url) => (Some(name_or_url.to_string()), url),
        None => (None, name_or_url.to_string()),
    }
}

/// The remote of the current branch, else `origin`.
pub(crate) fn default_remote(repo: &Repo) -> Result<String> {
    Ok(repo
        .current_branch()?
        .and_then(|b| repo.config.get(&format!("branch.{b}.remote")))
        .unwrap_or_else(|| "origin".to_string()))
}

fn no_such_remote(name: &str) -> Error {
    Error::fatal(format!(
        "'{name}' does not appear to be a git repository\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists."
    ))
}

struct FetchDone {
    shown: String,
    fetched: Vec<(String, ObjectId)>,
    remote_name: Option<String>,
}

fn do_fetch(
    inv: &Invocation,
    repo: &Repo,
    remote_arg: Option<&str>,
    refspecs: &[String],
    out: &mut Output,
) -> Result<FetchDone> {
    let name = match remote_arg {
        Some(r) => r.to_string(),
        None => default_remote(repo)?,
    };
    let (remote_name, url) = remote_url(repo, &name);
    if remote_name.is_none() && remote_arg.is_none() {
        return Err(Error::fatal(
            "No remote repository specified.  Please, specify either a URL or a\nremote name from which new revisions should be fetched.",
        ));
    }
    let remote = Remote::open(inv, &url).map_err(|e| match (&remote_name, e) {
        (None, Error::Fatal(m)) if m.contains("does not appear") => no_such_remote(&name),
        (_, e) => e,
    })?;
    let advert = remote.advertise(Service::UploadPack)?;
    let specs: Vec<Refspec> = if refspecs.is_empty() {
        match &remote_name {
            Some(n) => repo
                .config
                .local
                .get_all(&format!("remote.{n}.fetch"))
                .iter()
                .map(|s| Refspec::parse(s))
                .collect(),
            None => vec![Refspec::parse("HEAD")],
        }
    } else {
        refspecs
            .iter()
            .map(|s| {
                let mut spec = Refspec::parse(s);
                if spec.dst.is_empty()
                    && let Some(n) = &remote_name
                {
                    // `git fetch origin main` also updates origin/main
                    // (git's "opportunistic" remote-tracking update).
                    for conf in repo.config.local.get_all(&format!("remote.{n}.fetch")) {
                        let c = Refspec::parse(&conf);
                        if let Some(local) = c.map(&full_branch(&spec.src)) {
                            spec.dst = local;
                            spec.force = c.force;
                        }
                    }
                }
                spec
            })
            .collect()
    };
    for spec in &specs {
        if !spec.src.contains('*') && !advert.refs.iter().any(|(n, _)| spec.map(n).is_some()) {
            return Err(Error::fatal(format!(
                "couldn't find remote ref {}",
                spec.src
            )));
        }
    }
    let (moved, fetched) = fetch_refs(inv, repo, &remote, &advert, &specs, remote_name.is_some())?;
    write_fetch_head(repo, &remote.shown, &fetched, None)?;
    out.stderr
        .extend_from_slice(report(&remote.shown, &moved).as_bytes());
    Ok(FetchDone {
        shown: remote.shown.clone(),
        fetched,
        remote_name,
    })
}

pub(super) fn fetch(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut positional = Vec::new();
    for a in args {
        match a.as_str() {
            "-q" | "--quiet" | "-v" | "--verbose" | "--no-tags" | "--tags" | "--progress"
            | "--no-progress" => {}
            _ if a.starts_with('-') => return Err(unknown_option("fetch", a)),
            _ => positional.push(a.clone()),
        }
    }
    let repo = open(inv)?;
    do_fetch(
        inv,
        &repo,
        positional.first().map(String::as_str),
        positional.get(1..).unwrap_or_default(),
        out,
    )?;
    Ok(0)
}

const DIVERGENT: &str = "hint: You have divergent branches and need to specify how to reconcile them.\nhint: You can do so by running one of the following commands sometime before\nhint: your next pull:\nhint: \nhint:   git config pull.rebase false  # merge\nhint:   git config pull.rebase true   # rebase\nhint:   git config pull.ff only       # fast-forward only\nhint: \nhint: You can replace \"git config\" with \"git config --global\" to set a default\nhint: preference for all repositories. You can also pass --rebase, --no-rebase,\nhint: or --ff-only on the command line to override the configured default per\nhint: invocation.\nfatal: Need to specify how to reconcile divergent branches.";

pub(super) fn pull(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut positional = Vec::new();
    let (mut ff_only, mut merge_ok, mut no_ff) = (false, false, false);
    for a in args {
        match a.as_str() {
            "--ff-only" => ff_only = true,
            "--no-rebase" | "--ff" => merge_ok = true,
            "--no-ff" => {
                merge_ok = true;
                no_ff = true;
            }
            "-q" | "--quiet" | "-v" | "--verbose" | "--no-edit" | "--progress"
            | "--no-progress" => {}
            "-r" | "--rebase" => {
                return Err(Error::fatal(
                    "pull --rebase is not supported here; use --no-rebase (merge) or --ff-only",
                ));
            }
            _ if a.starts_with('-') => return Err(unknown_option("pull", a)),
            _ => positional.push(a.clone()),
        }
    }
    let repo = open(inv)?;
    let branch = repo.current_branch()?;
    let remote_arg = positional.first().map(String::as_str);
    let merge_ref = match positional.get(1) {
        Some(b) => Some(full_branch(b)),
        None => branch
            .as_ref()
            .and_then(|b| repo.config.get(&format!("branch.{b}.merge"))),
    };
    if remote_arg.is_none() && merge_ref.is_none() {
        let b = branch.as_deref().unwrap_or("<branch>");
        return Err(Error::Failed {
            code: 1,
            message: format!(
                "There is no tracking information for the current branch.\nPlease specify which branch you want to merge with.\nSee git-pull(1) for details.\n\n    git pull <remote> <branch>\n\nIf you wish to set tracking information for this branch you can do so with:\n\n    git branch --set-upstream-to=origin/<branch> {b}\n"
            ),
        });
    }
    let done = do_fetch(
        inv,
        &repo,
        remote_arg,
        positional.get(1..).unwrap_or_default(),
        out,
    )?;
    let Some(merge_ref) = merge_ref else {
        return Err(Error::fatal("no branch to merge was given"));
    };
    let Some((_, theirs)) = done.fetched.iter().find(|(n, _)| *n == merge_ref).cloned() else {
        return Err(Error::fatal(format!(
            "couldn't find remote ref {merge_ref}"
        )));
    };
    write_fetch_head(&repo, &done.shown, &done.fetched, Some(&merge_ref))?;
    let _ = done.remote_name;
    let pull_ff = repo.config.get("pull.ff");
    if pull_ff.as_deref() == Some("only") {
        ff_only = true;
    }
    if repo.config.get("pull.rebase").as_deref() == Some("false") || pull_ff.is_some() {
        merge_ok = true;
    }
    let hex = theirs.to_hex().to_string();
    if let Some(ours) = repo.refs.resolve("HEAD")?
        && !super::merge::is_ancestor(&repo, &theirs, &ours)?
        && !super::merge::is_ancestor(&repo, &ours, &theirs)?
    {
        if ff_only {
            return Err(Error::fatal("Not possible to fast-forward, aborting."));
        }
        if !merge_ok {
            return Err(Error::Failed {
                code: 128,
                message: DIVERGENT.to_string(),
            });
        }
    }
    let what = match merge_ref.strip_prefix("refs/heads/") {
        Some(b) => format!("branch '{b}'"),
        None => format!("'{merge_ref}'"),
    };
    let message = format!("Merge {what} of {}", from_url(&done.shown));
    let mut margs = vec!["-m".to_string(), message];
    if no_ff {
        margs.push("--no-ff".into());
    }
    if ff_only {
        margs.push("--ff-only".into());
    }
    margs.push(hex);
    drop(repo);
    super::merge::run(inv, &margs, out)
}
