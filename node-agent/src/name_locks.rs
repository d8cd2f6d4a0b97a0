//! One async lock per name, made on first use and dropped with its last
//! holder or waiter.
//!
//! The registry opens, closes, creates and deletes each computer under its
//! own lock, so that work on one computer (opening its database, writing
//! its settings with `fsync`, checkpointing it at close) never makes
//! another computer's first request wait: with one lock for the whole
//! agent, a computer opened while 200 others opened or closed waited for
//! all of them (4.4 s measured in bench/noisy, docs/benchmarks.md).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

/// Async locks keyed by name.
#[derive(Default)]
pub(crate) struct NameLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds the lock of one name; releases it when dropped.
pub(crate) struct NameGuard<'a> {
    locks: &'a NameLocks,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl NameLocks {
    /// Waits for the lock of `name` (first come, first served: tokio's
    /// mutex is fair) and holds it until the guard is dropped.
    pub(crate) async fn lock(&self, name: &str) -> NameGuard<'_> {
        let mutex = {
            let mut locks = self.locks.lock();
            Arc::clone(locks.entry(name.to_string()).or_default())
        };
        // A waiter owns a reference to the mutex, so the entry stays in the
        // map until it is served.
        let guard = mutex.lock_owned().await;
        NameGuard {
            locks: self,
            name: name.to_string(),
            guard: Some(guard),
        }
    }

    /// Names with a lock held or waited for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().len()
    }
}

impl Drop for NameGuard<'_> {
    fn drop(&mut self) {
        let mut locks = self.locks.locks.lock();
        drop(self.guard.take());
        // Only the map holds it now: nobody holds or waits for this name.
        if locks
            .get(&self.name)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_name_waits_other_names_do_not() {
        let locks = Arc::new(NameLocks::default());
        let held = locks.lock("a").await;
        // Another name is not held up.
        tokio::time::timeout(Duration::from_millis(100), locks.lock("b"))
            .await
            .expect("a lock on another name waited");
        // The same name waits until the holder lets go.
        let waiter = {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move {
                let _g = locks.lock("a").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a second holder of the same name");
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("the waiter was never served")
            .unwrap();
        // Nothing is left behind.
        assert_eq!(locks.len(), 0);
    }
}
