//! Trees: written from the index, and read back as a flat map from
//! repository path to (mode, id), the form comparisons and checkouts use.

use crate::error::{Error, Result};
use crate::index::{Index, MODE_TREE};
use crate::odb::{Odb, hex};
use bstr::BString;
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::BTreeMap;

/// Repository path → (mode, id) of every blob, symlink and gitlink.
pub type Flat = BTreeMap<Vec<u8>, (u32, ObjectId)>;

/// Writes the trees for the stage-0 entries of `index`; returns the top
/// tree's id. Errors: a conflicted path (git: "you need to resolve your
/// current index first").
pub fn write_from_index(odb: &Odb, index: &Index) -> Result<ObjectId> {
    if !index.conflicts().is_empty() {
        return Err(Error::Failed {
            code: 128,
            message: "error: Committing is not possible because you have unmerged files.\nhint: Fix them up in the work tree, and then use 'git add/rm <file>'\nhint: as appropriate to mark resolution and make a commit.\nfatal: Exiting because of an unresolved conflict.".into(),
        });
    }
    let flat: Flat = index
        .entries
        .values()
        .map(|e| (e.path.clone(), (e.mode, e.id)))
        .collect();
    write_flat(odb, &flat)
}

/// Writes the trees for `flat`; returns the top tree's id.
pub fn write_flat(odb: &Odb, flat: &Flat) -> Result<ObjectId> {
    let items: Vec<(&[u8], u32, ObjectId)> = flat
        .iter()
        .map(|(p, (m, id))| (p.as_slice(), *m, *id))
        .collect();
    write_level(odb, &items)
}

/// Writes one tree from `items`, whose paths are relative to it.
fn write_level(odb: &Odb, items: &[(&[u8], u32, ObjectId)]) -> Result<ObjectId> {
    let mut entries = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (path, mode, id) = items[i];
        match path.iter().position(|b| *b == b'/') {
            None => {
                entries.push(entry(path, mode, id)?);
                i += 1;
            }
            Some(slash) => {
                let dir = &path[..slash];
                let mut j = i;
                let mut sub = Vec::new();
                while j < items.len()
                    && items[j].0.len() > slash
                    && items[j].0.starts_with(dir)
                    && items[j].0[slash] == b'/'
                {
                    sub.push((&items[j].0[slash + 1..], items[j].1, items[j].2));
                    j += 1;
                }
                let id = write_level(odb, &sub)?;
                entries.push(entry(dir, MODE_TREE, id)?);
                i = j;
            }
        }
    }
    entries.sort();
    odb.write_object(&gix_object::Tree { entries })
}

fn entry(name: &[u8], mode: u32, oid: ObjectId) -> Result<gix_object::tree::Entry> {
    let mode = gix_object::tree::EntryMode::try_from(mode)
        .map_err(|m| Error::Corrupt(format!("bad mode {m:o}")))?;
    Ok(gix_object::tree::Entry {
        mode,
        filename: BString::from(name),
        oid,
    })
}

/// Every blob, symlink and gitlink under tree `id`, by repository path.
pub fn flatten(odb: &Odb, id: &ObjectId) -> Result<Flat> {
    let mut out = Flat::new();
    let mut stack = vec![(Vec::new(), *id)];
    while let Some((prefix, tree)) = stack.pop() {
        let data = odb.read_kind(&tree, Kind::Tree)?;
        let parsed = gix_object::TreeRef::from_bytes(&data, crate::odb::HASH)
            .map_err(|e| Error::Corrupt(format!("tree {}: {e}", hex(&tree))))?;
        for e in parsed.entries {
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(e.filename);
            if e.mode.is_tree() {
                stack.push((path, e.oid.to_owned()));
            } else {
                out.insert(path, (u32::from(e.mode.value()), e.oid.to_owned()));
            }
        }
    }
    Ok(out)
}

/// The tree of commit `id`.
pub fn of_commit(odb: &Odb, id: &ObjectId) -> Result<ObjectId> {
    Ok(crate::commit::read(odb, id)?.tree)
}
