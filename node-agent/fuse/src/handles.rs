//! Open files: FUSE file handles mapped to engine [`Handle`]s.
//!
//! An engine handle keeps an unlinked inode's data until it is dropped, so
//! `unlink` of an open file behaves as on a local filesystem: the data goes
//! at the last `release`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use agentcomputer_fs::Handle;

/// The table of open files of one mount. The lock is held only to insert
/// or remove an entry; reads and writes never take it.
#[derive(Default)]
pub(crate) struct OpenFiles {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Handle>>,
}

impl OpenFiles {
    /// Stores `h` and returns its new file handle number (never 0).
    pub(crate) fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, h);
        fh
    }

    /// Removes file handle `fh`; the caller drops the engine handle outside
    /// the lock (dropping the last one of an unlinked inode writes to the
    /// database).
    pub(crate) fn remove(&self, fh: u64) -> Option<Handle> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh)
    }

    /// Drops every handle (the mount is gone).
    pub(crate) fn clear(&self) {
        let all: Vec<Handle> = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, h)| h)
            .collect();
        drop(all);
    }
}
