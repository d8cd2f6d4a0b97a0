//! A remote that is another repository of the same computer
//! (`git clone /workspace/a b`, `git push ../a`): its refs are read and
//! written through the engine with the same `.lock` protocol as ours, and
//! objects go over as one pack, built from what the receiving side lacks
//! and stored before any ref moves (see [`super::pack`]).

use super::{Advert, Update};
use crate::Invocation;
use crate::error::Result;
use crate::files::join;
use crate::refs::Target;
use gix_hash::ObjectId;

/// The refs of the repository at `git_dir`, as its upload-pack would
/// advertise them: `HEAD` first, then `refs/…` by name.
pub fn advertise(inv: &Invocation, git_dir: &[u8]) -> Result<Advert> {
    let refs = super::refs_at(inv, git_dir);
    let mut advert = Advert::default();
    if let Some(Target::Symbolic(name)) = refs.read("HEAD")? {
        advert.head = Some(name);
    }
    if let Some(id) = refs.resolve("HEAD")? {
        advert.refs.push(("HEAD".into(), id));
    }
    for (name, id) in refs.list("refs/")? {
        advert.refs.push((name, id));
    }
    advert.caps = vec!["delete-refs".into(), "ofs-delta".into()];
    Ok(advert)
}

/// What receive-pack does: stores `pack`, then applies `updates` whose
/// old value still holds; a non-bare repository refuses to move the
/// branch its work tree has checked out (`receive.denyCurrentBranch`).
pub fn receive(
    inv: &Invocation,
    git_dir: &[u8],
    bare: bool,
    updates: &[Update],
    pack: Option<Vec<u8>>,
) -> Result<Vec<(String, Option<String>)>> {
    if let Some(pack) = pack {
        super::pack::store(inv, &inv.files, &join(git_dir, b"objects"), pack)?;
    }
    let refs = super::refs_at(inv, git_dir);
    let current = match refs.read("HEAD")? {
        Some(Target::Symbolic(name)) => Some(name),
        _ => None,
    };
    let zero = ObjectId::null(crate::odb::HASH);
    let mut out = Vec::new();
    for u in updates {
        inv.check_stop()?;
        let now = refs.resolve(&u.name)?.unwrap_or(zero);
        let outcome = if now != u.old {
            Some("failed to lock".to_string())
        } else if !bare && current.as_deref() == Some(u.name.as_str()) {
            Some("branch is currently checked out".to_string())
        } else if u.new == zero {
            refs.delete(&u.name)?;
            None
        } else {
            refs.set(&u.name, u.new)?;
            None
        };
        out.push((u.name.clone(), outcome));
    }
    Ok(out)
}
