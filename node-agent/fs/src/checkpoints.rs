//! Leaving WAL checkpoints to a continuous backup.
//!
//! A backup shipper (crate `agentcomputer-backup`) reads each commit's
//! frames from the WAL and must see them before a checkpoint copies them
//! into the database file and lets the WAL restart over them. So it runs
//! the checkpoints itself, after shipping, and the engine stops running
//! its own.

use std::sync::atomic::Ordering;

use crate::{Fs, Result};

impl Fs {
    /// Turns off this filesystem's own checkpoints for as long as it stays
    /// open: the automatic one (`PRAGMA wal_autocheckpoint = 0` on the
    /// writer; it was every [`crate::WAL_SIZE_LIMIT`] bytes of WAL) and the
    /// one [`Fs::compact`] ends with. The WAL then grows until the shipper
    /// checkpoints. Closing the database still checkpoints if this is the
    /// last connection, which a running shipper's own connection prevents.
    ///
    /// Errors: `EIO` if the pragma fails.
    pub fn leave_checkpoints_to_backup(&self) -> Result<()> {
        let mut w = self.inner.writer();
        self.inner.end_batch(&mut w)?;
        w.conn.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
        self.inner
            .external_checkpoints
            .store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`Fs::leave_checkpoints_to_backup`] was called.
    pub fn checkpoints_left_to_backup(&self) -> bool {
        self.inner.external_checkpoints.load(Ordering::Acquire)
    }
}
