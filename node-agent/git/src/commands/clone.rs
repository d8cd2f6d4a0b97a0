//! `git clone [-q] [-b BRANCH] [-n] [-o NAME] URL|PATH [DIRECTORY]`.
//!
//! The order real git follows, which also keeps a stopped clone clean:
//! the remote is asked for its refs first, then the repository is made,
//! the objects stored (one pack), and only then the refs, the
//! configuration's branch section and the work tree written. A clone
//! that fails or is stopped after the directory was made removes it, as
//! real git does.

use super::fetch::{Refspec, fetch_refs};
use super::unknown_option;
use crate::checkout::Overwrite;
use crate::config::ConfigFile;
use crate::error::{Error, Result};
use crate::files::{Files, join};
use crate::index::Index;
use crate::remote::{Location, Remote, Service};
use crate::repo::Repo;
use crate::tree::Flat;
use crate::{Invocation, Output};
use agentcomputer_fs::FileKind;

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut quiet, mut no_checkout) = (false, false);
    let mut branch: Option<String> = None;
    let mut origin = "origin".to_string();
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some(b) = super::option_value(args, &mut i, Some("-b"), Some("--branch"))? {
            branch = Some(b);
        } else if let Some(o) = super::option_value(args, &mut i, Some("-o"), Some("--origin"))? {
            origin = o;
        } else {
            match a.as_str() {
                "-q" | "--quiet" => quiet = true,
                "-n" | "--no-checkout" => no_checkout = true,
                "-v" | "--verbose" | "--progress" | "--no-progress" | "--single-branch"
                | "--no-single-branch" | "--tags" => {}
                _ if a.starts_with("--depth") || a.starts_with("--shallow") => {
                    return Err(Error::fatal("shallow clones are not supported here"));
                }
                _ if a == "--bare" || a == "--mirror" => {
                    return Err(Error::fatal(format!("clone {a} is not supported here")));
                }
                _ if a.starts_with('-') => return Err(unknown_option("clone", a)),
                _ => positional.push(a.clone()),
            }
        }
        i += 1;
    }
    let (source, dir) = match positional.as_slice() {
        [s] => (s.clone(), default_dir(s)),
        [s, d] => (s.clone(), d.clone()),
        _ => {
            return Err(Error::Usage(
                "usage: git clone [<options>] [--] <repo> [<dir>]".into(),
            ));
        }
    };
    let top = inv.engine_path(dir.as_bytes()).ok_or_else(|| {
        Error::fatal(format!(
            "could not create work tree dir '{dir}': repositories are kept under {}",
            inv.shown(b"/")
        ))
    })?;
    let files = &inv.files;
    let existed = match files.stat(&top)? {
        Some(a) if a.kind == FileKind::Directory && files.list(&top)?.is_empty() => true,
        Some(_) => {
            return Err(Error::fatal(format!(
                "destination path '{dir}' already exists and is not an empty directory."
            )));
        }
        None => false,
    };
    let remote = Remote::open(inv, &source).map_err(|e| match e {
        Error::Fatal(m) if m.contains("does not appear") => {
            Error::fatal(format!("repository '{source}' does not exist"))
        }
        e => e,
    })?;
    if !quiet {
        out.stderr
            .extend_from_slice(format!("Cloning into '{dir}'...\n").as_bytes());
    }
    let result = clone_into(
        inv,
        &remote,
        &top,
        &origin,
        branch.as_deref(),
        no_checkout,
        out,
    );
    if result.is_err() {
        // Nothing of a failed clone stays behind.
        let _ = remove_tree(files, &top);
        if existed {
            let _ = files.mkdir_p(&top);
        }
    } else if !quiet && matches!(remote.location, Location::Local { .. }) {
        out.stderr.extend_from_slice(b"done.\n");
    }
    result
}

/// `git clone URL` with no directory: the last path component without
/// `.git` (and `/.git`).
fn default_dir(source: &str) -> String {
    let s = source.trim_end_matches('/');
    let s = s.strip_suffix("/.git").unwrap_or(s);
    let s = s.trim_end_matches('/');
    let last = s.rsplit(['/', ':']).next().unwrap_or(s);
    let last = last.strip_suffix(".git").unwrap_or(last);
    if last.is_empty() {
        "repo".into()
    } else {
        last.to_string()
    }
}

fn clone_into(
    inv: &Invocation,
    remote: &Remote,
    top: &[u8],
    origin: &str,
    branch: Option<&str>,
    no_checkout: bool,
    out: &mut Output,
) -> Result<i32> {
    let advert = remote.advertise(Service::UploadPack)?;
    // The repository, as `git init` makes it.
    let mut scratch = Output::default();
    let typed_top = inv.shown(top);
    super::init::run(inv, &["-q".to_string(), typed_top], &mut scratch)?;
    let git_dir = join(top, b".git");
    let url = match &remote.location {
        Location::Http(u) => u.stored(),
        Location::Local { .. } => match inv.engine_path(remote.typed.as_bytes()) {
            Some(p) if !remote.typed.starts_with("file://") => inv.shown(&p),
            _ => remote.typed.clone(),
        },
    };
    let mut config = ConfigFile::load(&inv.files, &join(&git_dir, b"config"))?;
    config.set(&format!("remote.{origin}.url"), &url)?;
    let fetch_spec = format!("+refs/heads/*:refs/remotes/{origin}/*");
    config.set(&format!("remote.{origin}.fetch"), &fetch_spec)?;
    config.save(&inv.files)?;
    let repo = Repo::open(&inv.files, top.to_vec(), git_dir.clone(), top)?;
    let specs = [
        Refspec::parse(&fetch_spec),
        Refspec::parse("+refs/tags/*:refs/tags/*"),
    ];
    fetch_refs(inv, &repo, remote, &advert, &specs, false)?;
    // Which branch to check out: -b, else the remote's HEAD.
    let head_branch = match branch {
        Some(b) => {
            let full = format!("refs/heads/{b}");
            if advert.get(&full).is_none() {
                return Err(Error::fatal(format!(
                    "Remote branch {b} not found in upstream {origin}"
                )));
            }
            Some(full)
        }
        None => advert
            .head
            .clone()
            .filter(|h| advert.get(h).is_some())
            .or_else(|| {
                let head = advert.get("HEAD")?;
                ["refs/heads/main", "refs/heads/master"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(advert.refs.iter().map(|(n, _)| n.clone()))
                    .find(|n| n.starts_with("refs/heads/") && advert.get(n) == Some(head))
            }),
    };
    let Some(head_branch) = head_branch else {
        if advert.refs.is_empty() {
            out.stderr
                .extend_from_slice(b"warning: You appear to have cloned an empty repository.\n");
        }
        return Ok(0);
    };
    let short = head_branch.trim_start_matches("refs/heads/").to_string();
    let tip = advert.get(&head_branch).expect("checked above");
    repo.refs.set_symbolic(
        &format!("refs/remotes/{origin}/HEAD"),
        &format!("refs/remotes/{origin}/{short}"),
    )?;
    repo.refs.set(&head_branch, tip)?;
    repo.refs.set_symbolic("HEAD", &head_branch)?;
    let mut config = ConfigFile::load(&inv.files, &join(&git_dir, b"config"))?;
    config.set(&format!("branch.{short}.remote"), origin)?;
    config.set(&format!("branch.{short}.merge"), &head_branch)?;
    config.save(&inv.files)?;
    if !no_checkout {
        let to = crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &tip)?)?;
        let mut index = Index::load(&repo.files, &repo.git_dir)?;
        crate::checkout::switch(
            inv,
            &repo,
            &mut index,
            &Flat::new(),
            &to,
            Overwrite::Force,
            "checkout",
        )?;
        index.save(&repo.files, &repo.git_dir)?;
    }
    Ok(0)
}

/// Removes `path` and everything under it.
fn remove_tree(files: &Files, path: &[u8]) -> Result<()> {
    let mut dirs = vec![path.to_vec()];
    let mut order = Vec::new();
    while let Some(dir) = dirs.pop() {
        for (name, attr) in files.list(&dir)? {
            let p = join(&dir, &name);
            if attr.kind == FileKind::Directory {
                dirs.push(p);
            } else {
                files.remove_file(&p)?;
            }
        }
        order.push(dir);
    }
    for dir in order.iter().rev() {
        let parent_end = dir.iter().rposition(|b| *b == b'/').unwrap_or(0);
        files.remove_empty_dirs(dir, &dir[..parent_end])?;
    }
    Ok(())
}
