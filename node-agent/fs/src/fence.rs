//! Write fences: a way to guarantee that nothing a caller started through a
//! view of the engine changes the filesystem after the caller was told it
//! ended.
//!
//! A runtime (the shell, JavaScript) hands its exec a view made with
//! [`Fs::fenced`]. Every mutating call through that view holds the fence
//! open (shared) from the start of its transaction to its commit or
//! rollback. [`Fence::close`] waits for the calls in flight to finish and
//! then refuses every later one with `ECANCELED`, so once `close` has
//! returned, the view's owner has made its last change: an exec thread
//! still running past its timeout can no longer commit anything.

use parking_lot::{RwLock, RwLockReadGuard};
use std::sync::Arc;

use crate::{Errno, Fs, Result};

/// A gate shared by the views made with [`Fs::fenced`]. Open until
/// [`Fence::close`]. Cheap: one uncontended read lock per mutating call.
#[derive(Debug, Default)]
pub struct Fence {
    closed: RwLock<bool>,
}

/// Held by a mutating call of a fenced view from `BEGIN` to its end.
pub(crate) type FenceGuard<'a> = RwLockReadGuard<'a, bool>;

impl Fence {
    /// A new, open fence.
    pub fn new() -> Arc<Fence> {
        Arc::new(Fence::default())
    }

    /// Enters the fence for one call; `ECANCELED` once it is closed.
    pub(crate) fn enter(&self) -> Result<FenceGuard<'_>> {
        let open = self.closed.read();
        if *open {
            return Err(Errno::ECANCELED.into());
        }
        Ok(open)
    }

    /// Closes the fence: blocks until every mutating call in flight through
    /// a view of it has committed or rolled back (each is one transaction,
    /// so the wait is bounded by the largest single call), then makes every
    /// later one fail with `ECANCELED`. Idempotent. Blocking: call it from a
    /// thread that may block (not an async worker).
    pub fn close(&self) {
        *self.closed.write() = true;
    }

    /// Whether [`Fence::close`] has completed.
    pub fn is_closed(&self) -> bool {
        *self.closed.read()
    }
}

impl Fs {
    /// A view of this filesystem whose mutating calls pass through `fence`
    /// (see the module docs); reads are not affected. Everything else is
    /// shared with `self`, including the commit window. A view already
    /// fenced is re-fenced by `fence` alone.
    pub fn fenced(&self, fence: Arc<Fence>) -> Fs {
        Fs {
            inner: Arc::clone(&self.inner),
            window: self.window,
            fence: Some(fence),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Owner, ROOT_INO, WriteMode};

    #[test]
    fn a_closed_fence_refuses_writes_of_its_views_only() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
        let fence = Fence::new();
        let view = fs.fenced(Arc::clone(&fence));
        let owner = Owner { uid: 0, gid: 0 };
        view.write_all(ROOT_INO, b"a", b"1", WriteMode::Truncate, 0o644, owner)
            .unwrap();
        fence.close();
        assert!(fence.is_closed());
        let err = view
            .write_all(ROOT_INO, b"b", b"2", WriteMode::Truncate, 0o644, owner)
            .unwrap_err();
        assert_eq!(err.errno(), Errno::ECANCELED);
        // Reads through the view and writes through the plain handle go on.
        assert_eq!(
            view.read_all(view.lookup(ROOT_INO, b"a").unwrap().ino)
                .unwrap(),
            b"1"
        );
        fs.write_all(ROOT_INO, b"c", b"3", WriteMode::Truncate, 0o644, owner)
            .unwrap();
        assert!(fs.lookup(ROOT_INO, b"b").is_err());
    }
}
