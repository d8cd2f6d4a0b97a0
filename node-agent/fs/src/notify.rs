//! Change notifications, emitted after a transaction commits.
//!
//! Later layers (the FUSE server) use them to invalidate kernel caches for
//! changes that did not come through the kernel.

use parking_lot::Mutex;
use std::sync::Arc;

use crate::Ino;

/// One change made by a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// The attributes or the content of this inode changed.
    Inode(Ino),
    /// The entry `name` in directory `parent` was added, removed or now
    /// points to another inode.
    Entry {
        /// The directory.
        parent: Ino,
        /// The entry's name in it, raw bytes.
        name: Vec<u8>,
    },
}

/// A callback registered with [`crate::Fs::subscribe`].
pub type Subscriber = Box<dyn Fn(&Change) + Send + Sync>;

/// Identifies one subscription, for [`crate::Fs::unsubscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

/// The last id handed out, and the callbacks by id.
type Registry = (u64, Vec<(u64, Arc<Subscriber>)>);

#[derive(Default)]
pub(crate) struct Subscribers {
    list: Mutex<Registry>,
}

impl Subscribers {
    pub(crate) fn add(&self, f: Subscriber) -> SubscriptionId {
        let mut g = self.list.lock();
        g.0 += 1;
        let id = g.0;
        g.1.push((id, Arc::new(f)));
        SubscriptionId(id)
    }

    pub(crate) fn remove(&self, id: SubscriptionId) {
        let mut g = self.list.lock();
        g.1.retain(|(i, _)| *i != id.0);
    }

    /// Calls every subscriber for every change; the lock is not held while
    /// calling, so a callback may itself use the engine.
    pub(crate) fn emit(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let subs: Vec<Arc<Subscriber>> = {
            let g = self.list.lock();
            if g.1.is_empty() {
                return;
            }
            g.1.iter().map(|(_, f)| f.clone()).collect()
        };
        for change in changes {
            for f in &subs {
                f(change);
            }
        }
    }
}
