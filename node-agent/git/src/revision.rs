//! Revision expressions (gitrevisions(7)): ref names looked up in git's
//! order, abbreviated ids, `~N`, `^N`, `^{}`/`^{commit}`/`^{tree}`, and
//! `REV:PATH`.

use crate::error::{Error, Result};
use crate::odb::hex;
use crate::repo::Repo;
use gix_hash::ObjectId;
use gix_object::Kind;

/// The full ref name `name` stands for, in git's lookup order (gitrevisions(7),
/// "<refname>"), if any exists.
pub fn full_ref(repo: &Repo, name: &str) -> Result<Option<String>> {
    if name == "HEAD" || name == "@" {
        return Ok(Some("HEAD".into()));
    }
    for candidate in [
        name.to_string(),
        format!("refs/{name}"),
        format!("refs/tags/{name}"),
        format!("refs/heads/{name}"),
        format!("refs/remotes/{name}"),
        format!("refs/remotes/{name}/HEAD"),
    ] {
        if (candidate.starts_with("refs/") || candidate.ends_with("HEAD"))
            && repo.refs.read(&candidate)?.is_some()
        {
            return Ok(Some(candidate));
        }
    }
    Ok(None)
}

/// The object `spec` names. Errors as git's: "ambiguous argument" /
/// "bad revision" are [`Error::Fatal`].
pub fn resolve(repo: &Repo, spec: &str) -> Result<ObjectId> {
    try_resolve(repo, spec)?.ok_or_else(|| unknown(spec))
}

/// git's message for a revision that names nothing.
pub fn unknown(spec: &str) -> Error {
    Error::fatal(format!(
        "ambiguous argument '{spec}': unknown revision or path not in the working tree.\nUse '--' to separate paths from revisions, like this:\n'git <command> [<revision>...] -- [<file>...]'"
    ))
}

/// Like [`resolve`], `None` when `spec` names nothing.
pub fn try_resolve(repo: &Repo, spec: &str) -> Result<Option<ObjectId>> {
    if let Some((rev, path)) = spec.split_once(':') {
        let Some(id) = try_resolve(repo, if rev.is_empty() { "HEAD" } else { rev })? else {
            return Ok(None);
        };
        let tree = peel(repo, id, Kind::Tree)?;
        let flat = crate::tree::flatten(&repo.odb, &tree)?;
        let path = crate::paths::normalize(path.as_bytes()).unwrap_or_default();
        return Ok(flat.get(&path).map(|(_, id)| *id));
    }
    // Split the base from its suffixes (`~`, `^`).
    let cut = spec.find(['~', '^']).unwrap_or(spec.len());
    let (base, mut rest) = spec.split_at(cut);
    let Some(mut id) = base_id(repo, base)? else {
        return Ok(None);
    };
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("^{") {
            let Some(end) = r.find('}') else {
                return Ok(None);
            };
            let kind = match &r[..end] {
                "" => None,
                "commit" => Some(Kind::Commit),
                "tree" => Some(Kind::Tree),
                "blob" => Some(Kind::Blob),
                "tag" => Some(Kind::Tag),
                _ => return Ok(None),
            };
            id = match kind {
                Some(Kind::Tag) => id,
                Some(k) => peel(repo, id, k)?,
                None => peel_tags(repo, id)?,
            };
            rest = &r[end + 1..];
            continue;
        }
        let op = rest.as_bytes()[0];
        rest = &rest[1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: usize = if digits == 0 {
            1
        } else {
            rest[..digits].parse().map_err(|_| unknown(spec))?
        };
        rest = &rest[digits..];
        let commit = peel(repo, id, Kind::Commit)?;
        if op == b'~' {
            let mut c = commit;
            for _ in 0..n {
                match crate::commit::read(&repo.odb, &c)?.parents.first() {
                    Some(p) => c = *p,
                    None => return Ok(None),
                }
            }
            id = c;
        } else if n == 0 {
            id = commit;
        } else {
            match crate::commit::read(&repo.odb, &commit)?.parents.get(n - 1) {
                Some(p) => id = *p,
                None => return Ok(None),
            }
        }
    }
    Ok(Some(id))
}

fn base_id(repo: &Repo, base: &str) -> Result<Option<ObjectId>> {
    if let Some(name) = full_ref(repo, base)? {
        return repo.refs.resolve(&name);
    }
    if base.len() == 40
        && let Ok(id) = ObjectId::from_hex(base.as_bytes())
    {
        return Ok(repo.odb.contains(&id)?.then_some(id));
    }
    let found = repo.odb.ids_with_prefix(base)?;
    match found.len() {
        0 => Ok(None),
        1 => Ok(Some(found[0])),
        _ => Err(Error::fatal(format!("short object ID {base} is ambiguous"))),
    }
}

/// Follows annotated tags from `id` to the object they finally name.
pub fn peel_tags(repo: &Repo, mut id: ObjectId) -> Result<ObjectId> {
    for _ in 0..16 {
        let o = repo.odb.read(&id)?;
        if o.kind != Kind::Tag {
            return Ok(id);
        }
        let tag = gix_object::TagRef::from_bytes(&o.data, crate::odb::HASH)
            .map_err(|e| Error::Corrupt(format!("tag {}: {e}", hex(&id))))?;
        id = tag.target();
    }
    Err(Error::Corrupt("tag chain too long".into()))
}

/// Peels `id` to an object of `kind` (a tag to its target, a commit to
/// its tree). Errors: git's "… does not point to a …".
pub fn peel(repo: &Repo, id: ObjectId, kind: Kind) -> Result<ObjectId> {
    let id = peel_tags(repo, id)?;
    let o = repo.odb.read(&id)?;
    if o.kind == kind {
        return Ok(id);
    }
    if o.kind == Kind::Commit && kind == Kind::Tree {
        return crate::tree::of_commit(&repo.odb, &id);
    }
    Err(Error::fatal(format!(
        "{} is a {}, not a {}",
        hex(&id),
        o.kind,
        kind
    )))
}
