//! [`DirCache`]: the directories one exec has looked up, by parent inode and
//! name, so a path walk costs no engine transaction per directory it has
//! already seen.
//!
//! bashkit resolves paths component by component (its symlink layer
//! `lstat`s every prefix, `grep -r` and `find` canonicalize every directory
//! they enter), so without a cache a file at depth `d` costs on the order of
//! `d²` engine lookups, each a read transaction.
//!
//! The cache stays exact through the engine's change notifications
//! ([`Fs::subscribe`]): every committed change to an entry or a directory's
//! attributes, by this exec or by any other user of the same engine handle
//! (FUSE, the API, other execs), drops the matching entry before the
//! committing call returns. A lookup that overlapped a change is not stored
//! (generation check), so a stale answer read before the change cannot be
//! put back after it. Only directories are kept: their inode and attributes
//! are what walks need, and they change rarely.

use agentcomputer_fs::{Attr, Change, FileKind, Fs, Ino, SubscriptionId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Entries kept at most; the cache starts over when full (a walk of a
/// bigger tree then just costs lookups again).
const MAX_ENTRIES: usize = 65_536;

/// Directory entries seen by one exec, kept exact by change notifications.
pub(crate) struct DirCache {
    state: Arc<Mutex<State>>,
    fs: Fs,
    subscription: SubscriptionId,
}

#[derive(Default)]
struct State {
    /// Bumped by every change notification.
    generation: u64,
    by_entry: HashMap<(Ino, Vec<u8>), Attr>,
    /// The entry naming each cached directory (directories have one).
    by_ino: HashMap<Ino, (Ino, Vec<u8>)>,
}

impl State {
    fn invalidate(&mut self, change: &Change) {
        self.generation = self.generation.wrapping_add(1);
        match change {
            Change::Entry { parent, name } => {
                let key = (*parent, name.clone());
                if let Some(attr) = self.by_entry.remove(&key) {
                    self.by_ino.remove(&attr.ino);
                }
            }
            Change::Inode(ino) => {
                if let Some(key) = self.by_ino.remove(ino) {
                    self.by_entry.remove(&key);
                }
            }
        }
    }
}

/// A point in the cache's history, taken before an engine lookup.
#[derive(Clone, Copy)]
pub(crate) struct Generation(u64);

impl DirCache {
    /// An empty cache listening to `fs`'s changes until dropped.
    pub(crate) fn new(fs: &Fs) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let listener = Arc::clone(&state);
        let subscription = fs.subscribe(Box::new(move |change| {
            listener.lock().invalidate(change);
        }));
        Self {
            state,
            fs: fs.clone(),
            subscription,
        }
    }

    /// The cached directory `name` in `parent`.
    pub(crate) fn get(&self, parent: Ino, name: &[u8]) -> Option<Attr> {
        let state = self.state.lock();
        // The key type owns its name; build it only on a non-empty cache.
        if state.by_entry.is_empty() {
            return None;
        }
        state.by_entry.get(&(parent, name.to_vec())).cloned()
    }

    /// Call before the engine lookup whose answer goes to [`Self::insert`].
    pub(crate) fn generation(&self) -> Generation {
        Generation(self.state.lock().generation)
    }

    /// Keeps `attr` as entry `name` of `parent` if it is a directory and no
    /// change was announced since `seen`.
    pub(crate) fn insert(&self, seen: Generation, parent: Ino, name: &[u8], attr: &Attr) {
        if attr.kind != FileKind::Directory {
            return;
        }
        let mut state = self.state.lock();
        if state.generation != seen.0 {
            return;
        }
        if state.by_entry.len() >= MAX_ENTRIES {
            state.by_entry.clear();
            state.by_ino.clear();
        }
        state.by_entry.insert((parent, name.to_vec()), attr.clone());
        state.by_ino.insert(attr.ino, (parent, name.to_vec()));
    }
}

impl Drop for DirCache {
    fn drop(&mut self) {
        self.fs.unsubscribe(self.subscription);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{Limits, Owner, ROOT_INO, RenameFlags};

    const OWNER: Owner = Owner { uid: 1, gid: 1 };

    fn engine() -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("c.db"), Limits::default()).unwrap();
        (dir, fs)
    }

    fn cached_lookup(cache: &DirCache, fs: &Fs, parent: Ino, name: &[u8]) -> Attr {
        let seen = cache.generation();
        let attr = fs.lookup(parent, name).unwrap();
        cache.insert(seen, parent, name, &attr);
        attr
    }

    #[test]
    fn keeps_directories_only() {
        let (_d, fs) = engine();
        fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        fs.write_all(
            ROOT_INO,
            b"f",
            b"x",
            agentcomputer_fs::WriteMode::Truncate,
            0o644,
            OWNER,
        )
        .unwrap();
        let cache = DirCache::new(&fs);
        let d = cached_lookup(&cache, &fs, ROOT_INO, b"d");
        cached_lookup(&cache, &fs, ROOT_INO, b"f");
        assert_eq!(cache.get(ROOT_INO, b"d"), Some(d));
        assert_eq!(cache.get(ROOT_INO, b"f"), None);
    }

    #[test]
    fn changes_through_another_handle_drop_entries() {
        let (_d, fs) = engine();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        let cache = DirCache::new(&fs);
        cached_lookup(&cache, &fs, ROOT_INO, b"d");
        // A rename by another user of the engine (a clone, as FUSE holds).
        let other = fs.clone();
        other
            .rename(ROOT_INO, b"d", ROOT_INO, b"e", RenameFlags::default())
            .unwrap();
        assert_eq!(cache.get(ROOT_INO, b"d"), None);
        // A change to the directory's own attributes drops it as well.
        cached_lookup(&cache, &fs, ROOT_INO, b"e");
        assert!(cache.get(ROOT_INO, b"e").is_some());
        other.mkdir(d.ino, b"child", 0o755, OWNER).unwrap();
        assert_eq!(cache.get(ROOT_INO, b"e"), None);
    }

    #[test]
    fn a_lookup_overlapping_a_change_is_not_stored() {
        let (_d, fs) = engine();
        fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        let cache = DirCache::new(&fs);
        let seen = cache.generation();
        let before = fs.lookup(ROOT_INO, b"d").unwrap();
        fs.rmdir(ROOT_INO, b"d").unwrap();
        cache.insert(seen, ROOT_INO, b"d", &before);
        assert_eq!(cache.get(ROOT_INO, b"d"), None);
    }

    #[test]
    fn dropping_the_cache_unsubscribes() {
        let (_d, fs) = engine();
        let cache = DirCache::new(&fs);
        let state = Arc::downgrade(&cache.state);
        drop(cache);
        // The engine no longer holds the listener, so the state is freed.
        assert!(state.upgrade().is_none());
    }
}
