//! `git push [-u] [-f] [-d] [REMOTE [REFSPEC…]]`.
//!
//! As git's send-pack: each ref update is checked against what the
//! remote advertised (a non-fast-forward is refused here, before sending,
//! unless forced), one pack holds the objects the remote lacks, and the
//! remote's report decides each ref's line. Remote-tracking refs move
//! only for refs the remote accepted. `push.default` is git's `simple`.

use super::fetch::{Refspec, default_remote, pretty, remote_url};
use super::{open, short, unknown_option};
use crate::error::{Error, Result};
use crate::remote::{Remote, Service, Update};
use crate::{Invocation, Output};
use gix_hash::ObjectId;

const FETCH_FIRST: &str = "hint: Updates were rejected because the remote contains work that you do\nhint: not have locally. This is usually caused by another repository pushing\nhint: to the same ref. You may want to first integrate the remote changes\nhint: (e.g., 'git pull ...') before pushing again.\nhint: See the 'Note about fast-forwards' in 'git push --help' for details.\n";
const NON_FF: &str = "hint: Updates were rejected because the tip of your current branch is behind\nhint: its remote counterpart. Integrate the remote changes (e.g.\nhint: 'git pull ...') before pushing again.\nhint: See the 'Note about fast-forwards' in 'git push --help' for details.\n";

enum Line {
    Ok,
    UpToDate,
    FetchFirst,
    NonFf,
    Remote(String),
}

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut set_upstream, mut force, mut delete) = (false, false, false);
    let mut positional = Vec::new();
    for a in args {
        match a.as_str() {
            "-u" | "--set-upstream" => set_upstream = true,
            "-f" | "--force" => force = true,
            "-d" | "--delete" => delete = true,
            "-q" | "--quiet" | "-v" | "--verbose" | "--progress" | "--no-progress" => {}
            _ if a.starts_with('-') => return Err(unknown_option("push", a)),
            _ => positional.push(a.clone()),
        }
    }
    let repo = open(inv)?;
    let branch = repo.current_branch()?;
    let name = match positional.first() {
        Some(r) => r.clone(),
        None => default_remote(&repo)?,
    };
    let (remote_name, url) = remote_url(&repo, &name);
    // (local source, remote ref, force) per refspec.
    let mut specs: Vec<(Option<String>, String, bool)> = Vec::new();
    if positional.len() <= 1 {
        let Some(b) = branch.clone() else {
            return Err(Error::fatal(
                "You are not currently on a branch.\nTo push the history leading to the current (detached HEAD)\nstate now, use\n\n    git push origin HEAD:<name-of-remote-branch>\n",
            ));
        };
        let upstream_remote = repo.config.get(&format!("branch.{b}.remote"));
        let merge = repo.config.get(&format!("branch.{b}.merge"));
        let dst = match (upstream_remote.as_deref(), merge) {
            (Some(r), Some(m)) if r == name => m,
            _ if set_upstream || positional.len() == 1 => format!("refs/heads/{b}"),
            _ => {
                return Err(Error::fatal(format!(
                    "The current branch {b} has no upstream branch.\nTo push the current branch and set the remote as upstream, use\n\n    git push --set-upstream {name} {b}\n\nTo have this happen automatically for branches without a tracking\nupstream, see 'push.autoSetupRemote' in 'git help config'.\n"
                )));
            }
        };
        specs.push((Some(format!("refs/heads/{b}")), dst, force));
    } else {
        for text in &positional[1..] {
            let spec = Refspec::parse(text);
            if delete || (spec.src.is_empty() && text.contains(':')) {
                let target = if delete { &spec.src } else { &spec.dst };
                specs.push((None, full_name(target, "refs/heads/"), true));
                continue;
            }
            let src = if spec.src == "HEAD" {
                match &branch {
                    Some(b) => format!("refs/heads/{b}"),
                    None => "HEAD".into(),
                }
            } else {
                crate::revision::full_ref(&repo, &spec.src)?
                    .filter(|r| r.starts_with("refs/"))
                    .ok_or_else(|| {
                        Error::Failed {
                            code: 1,
                            message: format!(
                                "error: src refspec {} does not match any\nerror: failed to push some refs to '{url}'",
                                spec.src
                            ),
                        }
                    })?
            };
            let dst = if spec.dst.is_empty() {
                if src == "HEAD" {
                    return Err(Error::fatal(
                        "HEAD:<name> is needed to push a detached HEAD",
                    ));
                }
                src.clone()
            } else if spec.dst.starts_with("refs/") {
                spec.dst.clone()
            } else if src.starts_with("refs/tags/") {
                format!("refs/tags/{}", spec.dst)
            } else {
                format!("refs/heads/{}", spec.dst)
            };
            specs.push((Some(src), dst, spec.force || force));
        }
    }
    let remote = Remote::open(inv, &url)?;
    let advert = remote.advertise(Service::ReceivePack)?;
    let zero = ObjectId::null(crate::odb::HASH);
    let mut lines = Vec::new();
    let mut updates = Vec::new();
    for (src, dst, forced) in &specs {
        let new = match src {
            Some(s) => repo
                .refs
                .resolve(s)?
                .ok_or_else(|| Error::fatal(format!("src refspec {s} does not match any")))?,
            None => zero,
        };
        let old = advert.get(dst).unwrap_or(zero);
        if src.is_none() && old == zero {
            return Err(Error::Failed {
                code: 1,
                message: format!(
                    "error: unable to delete '{}': remote ref does not exist\nerror: failed to push some refs to '{}'",
                    pretty(dst),
                    remote.shown
                ),
            });
        }
        let kind = if old == new {
            Line::UpToDate
        } else if old == zero || new == zero || *forced {
            Line::Ok
        } else if !repo.odb.contains(&old)? {
            Line::FetchFirst
        } else if !super::merge::is_ancestor(&repo, &old, &new)? {
            Line::NonFf
        } else {
            Line::Ok
        };
        if matches!(kind, Line::Ok) {
            updates.push(Update {
                old,
                new,
                name: dst.clone(),
            });
        }
        lines.push((src.clone(), dst.clone(), old, new, *forced, kind));
    }
    if lines.iter().all(|l| matches!(l.5, Line::UpToDate)) {
        out.stderr.extend_from_slice(b"Everything up-to-date\n");
        return Ok(0);
    }
    let results = if updates.is_empty() {
        Vec::new()
    } else {
        remote.push(&advert, &repo.odb, &updates)?
    };
    for line in &mut lines {
        if matches!(line.5, Line::Ok)
            && let Some((_, Some(reason))) = results.iter().find(|(n, _)| *n == line.1)
        {
            line.5 = Line::Remote(reason.clone());
        }
    }
    let mut text = format!("To {}\n", remote.shown);
    let mut failed = false;
    let (mut fetch_first, mut non_ff) = (false, false);
    for (src, dst, old, new, forced, kind) in &lines {
        let from = src.as_deref().map(pretty).unwrap_or("");
        let to = pretty(dst);
        let (flag, summary, suffix) = match kind {
            Line::UpToDate => continue,
            Line::Ok if *new == zero => ('-', "[deleted]".to_string(), String::new()),
            Line::Ok if *old == zero => (
                '*',
                if dst.starts_with("refs/tags/") {
                    "[new tag]".to_string()
                } else {
                    "[new branch]".to_string()
                },
                String::new(),
            ),
            Line::Ok if *forced && !super::merge::is_ancestor(&repo, old, new).unwrap_or(false) => {
                (
                    '+',
                    format!("{}...{}", short(old), short(new)),
                    " (forced update)".to_string(),
                )
            }
            Line::Ok => (
                ' ',
                format!("{}..{}", short(old), short(new)),
                String::new(),
            ),
            Line::FetchFirst => {
                fetch_first = true;
                ('!', "[rejected]".into(), " (fetch first)".into())
            }
            Line::NonFf => {
                non_ff = true;
                ('!', "[rejected]".into(), " (non-fast-forward)".into())
            }
            Line::Remote(reason) => ('!', "[remote rejected]".into(), format!(" ({reason})")),
        };
        if flag == '!' {
            failed = true;
        }
        if *new == zero {
            text.push_str(&format!(" {flag} {summary:<17} {to}{suffix}\n"));
        } else {
            text.push_str(&format!(" {flag} {summary:<17} {from} -> {to}{suffix}\n"));
        }
    }
    // Accepted refs: move the remote-tracking refs, set upstreams.
    if let Some(rname) = &remote_name {
        let fetch_specs: Vec<Refspec> = repo
            .config
            .local
            .get_all(&format!("remote.{rname}.fetch"))
            .iter()
            .map(|s| Refspec::parse(s))
            .collect();
        let mut config = None;
        for (src, dst, _, new, _, kind) in &lines {
            if !matches!(kind, Line::Ok | Line::UpToDate) {
                continue;
            }
            if let Some(tracking) = fetch_specs.iter().find_map(|s| s.map(dst))
                && !tracking.is_empty()
            {
                if *new == zero {
                    repo.refs.delete(&tracking)?;
                } else {
                    repo.refs.set(&tracking, *new)?;
                }
            }
            if set_upstream
                && let Some(b) = src.as_deref().and_then(|s| s.strip_prefix("refs/heads/"))
            {
                let c = config.get_or_insert_with(|| {
                    crate::config::ConfigFile::load(
                        &repo.files,
                        &crate::files::join(&repo.git_dir, b"config"),
                    )
                });
                let c = c.as_mut().map_err(|e| Error::fatal(e.to_string()))?;
                c.set(&format!("branch.{b}.remote"), rname)?;
                c.set(&format!("branch.{b}.merge"), dst)?;
                out.stdout.extend_from_slice(
                    format!("branch '{b}' set up to track '{rname}/{}'.\n", pretty(dst)).as_bytes(),
                );
            }
        }
        if let Some(Ok(c)) = config {
            c.save(&repo.files)?;
        }
    }
    out.stderr.extend_from_slice(text.as_bytes());
    if failed {
        out.stderr.extend_from_slice(
            format!("error: failed to push some refs to '{}'\n", remote.shown).as_bytes(),
        );
        if fetch_first {
            out.stderr.extend_from_slice(FETCH_FIRST.as_bytes());
        } else if non_ff {
            out.stderr.extend_from_slice(NON_FF.as_bytes());
        }
        return Ok(1);
    }
    Ok(0)
}

fn full_name(name: &str, default_prefix: &str) -> String {
    if name.starts_with("refs/") {
        name.to_string()
    } else {
        format!("{default_prefix}{name}")
    }
}
