//! Packs moved between repositories (Documentation/gitformat-pack.txt).
//!
//! Received packs are kept as they came, one `objects/pack/pack-<hash>.pack`
//! with the `.idx` gitoxide's `gix-pack` computes for it (index version 2,
//! the one real git writes), so a clone is a few files instead of one
//! engine file per object. The `.pack` is written before its `.idx` and
//! both before any ref: git only sees a pack once its index exists, and a
//! ref only once it names objects that are all there.
//!
//! Packs sent (push, and fetches between two repositories of the
//! computer) hold every object the other side lacks, whole (no deltas):
//! `rev-list --objects WANTS --not HAVES` as git-rev-list(1) defines it,
//! where the trees of the boundary commits are what the other side is
//! known to have.

use crate::Invocation;
use crate::error::{Error, Result};
use crate::files::{Files, OBJECT_PERM, join};
use crate::odb::{HASH, Odb};
use flate2::Compression;
use flate2::write::ZlibEncoder;
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the exec's stop flag is looked at while a pack is indexed.
const STOP_POLL: Duration = Duration::from_millis(5);

/// Indexes the pack `bytes` and stores it with its index in the object
/// directory `objects_dir`; returns the number of objects. An empty pack
/// stores nothing.
///
/// Errors: a corrupt or truncated pack, or one with deltas against
/// objects it does not hold (a thin pack: never asked for).
pub fn store(inv: &Invocation, files: &Files, objects_dir: &[u8], bytes: Vec<u8>) -> Result<u32> {
    inv.check_stop()?;
    if bytes.len() < 32 {
        return Err(Error::fatal("early EOF\nfatal: index-pack failed"));
    }
    let bytes = Arc::new(bytes);
    let bad = |e: &dyn std::fmt::Display| Error::fatal(format!("index-pack failed: {e}"));
    let mut entries = gix_pack::data::input::BytesToEntriesIter::new_from_header(
        std::io::Cursor::new(&bytes[..]),
        gix_pack::data::input::Mode::Verify,
        gix_pack::data::input::EntryDataMode::Crc32,
        HASH,
    )
    .map_err(|e| bad(&e))?;
    let pack_version = entries.version();
    let mut idx = Vec::new();
    // gitoxide's indexer polls this flag; this thread raises it when the
    // exec stops, so a large or hostile pack does not outlive its exec.
    let interrupt = AtomicBool::new(false);
    let data = Arc::clone(&bytes);
    let alloc_limit = usize::try_from(files.max_whole()).ok();
    let result = std::thread::scope(|scope| {
        let indexing = scope.spawn(|| {
            gix_pack::index::write_data_iter_to_stream(
                gix_pack::index::Version::V2,
                move || Ok((entry_bytes, data)),
                &mut entries,
                Some(1),
                &mut gix_utils::progress::Discard,
                &mut idx,
                &interrupt,
                HASH,
                alloc_limit,
                pack_version,
            )
        });
        while !indexing.is_finished() {
            if (inv.stop)() {
                interrupt.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(STOP_POLL);
        }
        indexing.join()
    });
    if interrupt.load(Ordering::Relaxed) {
        return Err(Error::Stopped);
    }
    let outcome = result
        .map_err(|_| Error::fatal("index-pack failed: the indexer panicked"))?
        .map_err(|e| bad(&e))?;
    if outcome.num_objects == 0 {
        return Ok(0);
    }
    inv.check_stop()?;
    let name = format!("pack/pack-{}", outcome.data_hash.to_hex());
    let pack_path = join(objects_dir, format!("{name}.pack").as_bytes());
    let idx_path = join(objects_dir, format!("{name}.idx").as_bytes());
    files.mkdir_p(&join(objects_dir, b"pack"))?;
    files.write_new(&pack_path, &bytes, OBJECT_PERM)?;
    files.write_new(&idx_path, &idx, OBJECT_PERM)?;
    Ok(outcome.num_objects)
}

/// The bytes of one entry of the pack being indexed.
fn entry_bytes(range: gix_pack::data::EntryRange, data: &Arc<Vec<u8>>) -> Option<&[u8]> {
    data.get(range.start as usize..range.end as usize)
}

/// The objects reachable from `wants` but not from `haves` (the ids of
/// `haves` missing from `odb` are ignored), commits first.
pub fn objects_to_send(
    inv: &Invocation,
    odb: &Odb,
    wants: &[ObjectId],
    haves: &[ObjectId],
) -> Result<Vec<(ObjectId, Kind)>> {
    // Commits the other side has: everything reachable from `haves`.
    let mut theirs: HashSet<ObjectId> = HashSet::new();
    let mut queue: VecDeque<ObjectId> = VecDeque::new();
    for h in haves {
        if odb.contains(h)? {
            queue.push_back(*h);
        }
    }
    let mut their_roots = Vec::new();
    while let Some(id) = queue.pop_front() {
        if !theirs.insert(id) {
            continue;
        }
        inv.check_stop()?;
        let Some(o) = odb.try_read(&id)? else {
            continue;
        };
        match o.kind {
            Kind::Commit => {
                let c = gix_object::CommitRef::from_bytes(&o.data, HASH)
                    .map_err(|e| Error::Corrupt(format!("commit {id}: {e}")))?;
                their_roots.push(c.tree());
                queue.extend(c.parents());
            }
            Kind::Tag => {
                let t = gix_object::TagRef::from_bytes(&o.data, HASH)
                    .map_err(|e| Error::Corrupt(format!("tag {id}: {e}")))?;
                queue.push_back(t.target());
            }
            Kind::Tree => their_roots.push(id),
            Kind::Blob => {}
        }
    }
    // New commits (and tags), walking down from `wants`.
    let mut out = Vec::new();
    let mut roots = Vec::new();
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut queue: VecDeque<ObjectId> = wants.iter().copied().collect();
    let mut edges = Vec::new();
    while let Some(id) = queue.pop_front() {
        if theirs.contains(&id) {
            edges.push(id);
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        inv.check_stop()?;
        let o = odb.read(&id)?;
        match o.kind {
            Kind::Commit => {
                let c = gix_object::CommitRef::from_bytes(&o.data, HASH)
                    .map_err(|e| Error::Corrupt(format!("commit {id}: {e}")))?;
                roots.push(c.tree());
                queue.extend(c.parents());
            }
            Kind::Tag => {
                let t = gix_object::TagRef::from_bytes(&o.data, HASH)
                    .map_err(|e| Error::Corrupt(format!("tag {id}: {e}")))?;
                queue.push_back(t.target());
            }
            Kind::Tree => roots.push(id),
            Kind::Blob => {}
        }
        out.push((id, o.kind));
    }
    // What the trees of the boundary commits hold, the other side has.
    let mut known: HashSet<ObjectId> = HashSet::new();
    for edge in &edges {
        if let Some(o) = odb.try_read(edge)?
            && o.kind == Kind::Commit
            && let Ok(c) = gix_object::CommitRef::from_bytes(&o.data, HASH)
        {
            walk_tree(inv, odb, c.tree(), &mut known, &mut |_, _| {})?;
        }
    }
    for root in roots {
        walk_tree(inv, odb, root, &mut known, &mut |id, kind| {
            out.push((id, kind))
        })?;
    }
    Ok(out)
}

/// Visits tree `root` and everything under it not in `seen`, adding each
/// to `seen` and calling `visit` with it.
fn walk_tree(
    inv: &Invocation,
    odb: &Odb,
    root: ObjectId,
    seen: &mut HashSet<ObjectId>,
    visit: &mut dyn FnMut(ObjectId, Kind),
) -> Result<()> {
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        inv.check_stop()?;
        visit(id, Kind::Tree);
        let data = odb.read_kind(&id, Kind::Tree)?;
        for entry in gix_object::TreeRefIter::from_bytes(&data, HASH) {
            let entry = entry.map_err(|e| Error::Corrupt(format!("tree {id}: {e}")))?;
            let child = entry.oid.to_owned();
            if entry.mode.is_tree() {
                stack.push(child);
            } else if entry.mode.is_commit() {
                // A submodule's commit lives in another repository.
            } else if seen.insert(child) {
                visit(child, Kind::Blob);
            }
        }
    }
    Ok(())
}

/// A version 2 pack of `objects` read from `odb`, each stored whole.
pub fn build(inv: &Invocation, odb: &Odb, objects: &[(ObjectId, Kind)]) -> Result<Vec<u8>> {
    let count =
        u32::try_from(objects.len()).map_err(|_| Error::fatal("too many objects for one pack"))?;
    let mut out = gix_pack::data::header::encode(gix_pack::data::Version::V2, count).to_vec();
    let io = |e: std::io::Error| Error::fatal(format!("writing a pack: {e}"));
    for (id, _) in objects {
        inv.check_stop()?;
        let o = odb.read(id)?;
        let header = match o.kind {
            Kind::Blob => gix_pack::data::entry::Header::Blob,
            Kind::Tree => gix_pack::data::entry::Header::Tree,
            Kind::Commit => gix_pack::data::entry::Header::Commit,
            Kind::Tag => gix_pack::data::entry::Header::Tag,
        };
        header.write_to(o.data.len() as u64, &mut out).map_err(io)?;
        let mut z = ZlibEncoder::new(&mut out, Compression::fast());
        z.write_all(&o.data).map_err(io)?;
        z.finish().map_err(io)?;
    }
    let mut hasher = gix_hash::hasher(HASH);
    hasher.update(&out);
    let trailer = hasher
        .try_finalize()
        .map_err(|e| Error::fatal(format!("hashing a pack: {e}")))?;
    out.extend_from_slice(trailer.as_slice());
    Ok(out)
}
