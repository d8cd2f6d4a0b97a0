//! `git tag [-l [PATTERN]]`, `git tag [-f] [-a] [-m MSG] NAME [REV]`,
//! `git tag -d NAME…`.

use super::{open, option_value, short, unknown_option};
use crate::error::{Error, Result};
use crate::{Invocation, Output};

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let (mut delete, mut list, mut annotate, mut force) = (false, false, false, false);
    let mut message: Option<String> = None;
    let mut names = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if let Some(m) = option_value(args, &mut i, Some("-m"), Some("--message"))? {
            message = Some(message.map(|old| format!("{old}\n\n{m}")).unwrap_or(m));
            annotate = true;
        } else {
            match a.as_str() {
                "-d" | "--delete" => delete = true,
                "-l" | "--list" => list = true,
                "-a" | "--annotate" => annotate = true,
                "-f" | "--force" => force = true,
                _ if a.starts_with('-') => return Err(unknown_option("tag", &a)),
                _ => names.push(a),
            }
        }
        i += 1;
    }
    let repo = open(inv)?;
    if delete {
        let mut code = 0;
        for name in &names {
            let full = format!("refs/tags/{name}");
            match repo.refs.resolve(&full)? {
                Some(id) => {
                    repo.refs.delete(&full)?;
                    out.stdout.extend_from_slice(
                        format!("Deleted tag '{name}' (was {})\n", short(&id)).as_bytes(),
                    );
                }
                None => {
                    out.stderr
                        .extend_from_slice(format!("error: tag '{name}' not found.\n").as_bytes());
                    code = 1;
                }
            }
        }
        return Ok(code);
    }
    if list || names.is_empty() {
        let pattern = names
            .first()
            .map(|p| gix_glob::Pattern::from_bytes(p.as_bytes()));
        let mut text = String::new();
        for name in repo.refs.list("refs/tags/")?.keys() {
            let short_name = name.trim_start_matches("refs/tags/");
            let keep = match &pattern {
                Some(Some(p)) => p.matches(
                    short_name.as_bytes().into(),
                    gix_glob::wildmatch::Mode::empty(),
                ),
                _ => true,
            };
            if keep {
                text.push_str(short_name);
                text.push('\n');
            }
        }
        out.stdout.extend_from_slice(text.as_bytes());
        return Ok(0);
    }
    let name = &names[0];
    if !crate::refs::valid_name(name) {
        return Err(Error::fatal(format!("'{name}' is not a valid tag name.")));
    }
    let full = format!("refs/tags/{name}");
    if repo.refs.read(&full)?.is_some() && !force {
        return Err(Error::fatal(format!("tag '{name}' already exists")));
    }
    let rev = names.get(1).map(String::as_str).unwrap_or("HEAD");
    let target = crate::revision::try_resolve(&repo, rev)?
        .ok_or_else(|| Error::fatal(format!("Failed to resolve '{rev}' as a valid ref.")))?;
    let id = if annotate {
        let Some(message) = message else {
            return Err(Error::fatal("no tag message given: use -m"));
        };
        let tagger = repo.identity(inv, "COMMITTER")?;
        let tag = gix_object::Tag {
            target,
            target_kind: repo.odb.read(&target)?.kind,
            name: name.as_str().into(),
            tagger: Some(tagger.signature()),
            message: crate::commit::clean_message(&message).into(),
            signature: None,
        };
        repo.odb.write_object(&tag)?
    } else {
        target
    };
    repo.refs.set(&full, id)?;
    Ok(0)
}
