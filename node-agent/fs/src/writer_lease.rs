//! Commits only while this process may write the database: the node agent
//! holds a Kubernetes Lease per computer it serves, and another node may
//! take the computer over once that Lease expires, so every commit after
//! the agent's renew deadline must fail rather than fork the computer's
//! history.
//!
//! The check sits in SQLite's commit hook (`sqlite3_commit_hook`: a hook
//! that returns nonzero turns the COMMIT into a ROLLBACK), on the engine's
//! one writing connection, so it covers every path that writes: API calls,
//! the runtimes, FUSE connections, compaction. A refused commit fails the
//! call with `EIO` and keeps nothing of it, as any failed commit does.

use crate::{Fs, Result};

impl Fs {
    /// From now on every commit asks `allowed` first (on the committing
    /// thread, with the writer lock held: keep it to an atomic load) and
    /// is rolled back when it answers `false`. The call that tried fails
    /// with `EIO`; a batch of calls under a commit window is lost whole
    /// and reported as such. Ends any open batch first, under the rule of
    /// the moment. Replaces an earlier rule.
    ///
    /// Errors: `EIO` if the open batch cannot be committed.
    pub fn commit_only_while(&self, allowed: impl Fn() -> bool + Send + 'static) -> Result<()> {
        let mut w = self.inner.writer();
        self.inner.end_batch(&mut w)?;
        w.conn
            .commit_hook(Some(move || !allowed()))
            .map_err(crate::Error::from)?;
        Ok(())
    }
}
