//! Leaving WAL checkpoints to a continuous backup.
//!
//! A backup shipper (crate `agentcomputer-backup`) reads each commit's
//! frames from the WAL and must see them before a checkpoint copies them
//! into the database file and lets the WAL restart over them. So it runs
//! the checkpoints itself, after reading, and the engine stops running
//! its own.
//!
//! To bound the WAL of a writer that never pauses, the shipper now and
//! then holds the write lock for a few milliseconds (it reads the last
//! commits and checkpoints them, so the writer's next transaction starts
//! the WAL over). SQLite's own busy handler would have the writer sleep a
//! millisecond, then two, then five; [`wait_for_backup`] retries sooner.
//!
//! A writer committing back to back leaves SQLite's write lock free for
//! microseconds between two transactions, which the shipper seldom
//! catches: its WAL grew without bound. So the engine lends the shipper
//! its own writer ([`WriterHold`]): while the shipper holds it no call of
//! the engine can start a transaction, and the shipper takes SQLite's
//! lock at once; the engine's callers wait on a mutex meanwhile.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::commit::Writer;
use crate::db::{BUSY_TIMEOUT, MMAP_SIZE};
use crate::fs::Inner;
use crate::{Fs, Result};

/// Lends a filesystem's writer for a moment ([`WriterHold::run`]) without
/// keeping the filesystem open: it holds a weak reference.
#[derive(Clone)]
pub struct WriterHold(Weak<Inner>);

impl std::fmt::Debug for WriterHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterHold")
    }
}

impl WriterHold {
    /// Runs `f` while no call of the filesystem can write: the open
    /// group-commit batch, if any, is committed first, and the writer is
    /// held until `f` returns. Waits at most `wait` for the writer.
    ///
    /// Returns `None` (without running `f`) when the filesystem is closed
    /// or the writer was not had within `wait`. Errors: the batch's commit
    /// failing (`EIO`, `ENOSPC`), recorded for its calls as a failed
    /// commit is.
    pub fn run<R>(&self, wait: Duration, f: impl FnOnce() -> R) -> Result<Option<R>> {
        let Some(inner) = self.0.upgrade() else {
            return Ok(None);
        };
        let Some(mut w) = inner.try_writer(wait) else {
            return Ok(None);
        };
        inner.end_batch(&mut w)?;
        Ok(Some(f()))
    }
}

impl WriterHold {
    /// Tells the engine that a checkpoint ran on another connection, so
    /// the database file may have grown: the writer maps it again before
    /// its next transaction ([`remap_if_due`]).
    pub fn checkpointed(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.remap_due.store(true, Ordering::Release);
        }
    }
}

/// What [`WriterHold::truncate_wal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// Nothing: `check` refused, or the checkpoints are not left to a
    /// backup.
    Refused,
    /// Every frame went into the database file, but a reader in a
    /// transaction kept the file from being emptied: the next writer may
    /// restart the WAL once the reader is done.
    Copied,
    /// The WAL file is empty.
    Emptied,
}

impl WriterHold {
    /// Empties the WAL file with a TRUNCATE checkpoint run on the engine's
    /// own writer, once `check` (run with the writer held and no
    /// transaction open) agrees. On the writer, because the next cycle's
    /// salt-1 is then this one's plus one, as at every restart the writer
    /// makes; a connection that never restarted the WAL itself starts the
    /// next cycle with random salts (sqlite3.c, `sqlite3WalFrames`), which
    /// a shipper could not tell from a restart it did not allow. Readers
    /// in a transaction are waited for up to `readers_wait`; SQLite copies
    /// the frames before it waits for them, so a reader that stays
    /// leaves every frame copied and the file as it was
    /// ([`Truncation::Copied`]).
    ///
    /// Returns `None` when the writer is busy or the filesystem closed.
    /// Errors: the open batch's commit failing, or the checkpoint's
    /// (`EIO`).
    pub fn truncate_wal(
        &self,
        readers_wait: Duration,
        check: impl FnOnce() -> bool,
    ) -> Result<Option<Truncation>> {
        let Some(inner) = self.0.upgrade() else {
            return Ok(None);
        };
        if !inner.external_checkpoints.load(Ordering::Acquire) {
            return Ok(Some(Truncation::Refused));
        }
        let Some(mut w) = inner.try_writer(Duration::ZERO) else {
            return Ok(None);
        };
        inner.end_batch(&mut w)?;
        if !check() {
            return Ok(Some(Truncation::Refused));
        }
        w.conn.busy_timeout(readers_wait)?;
        let r = w
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            });
        w.conn.busy_handler(Some(wait_for_backup))?;
        Ok(Some(match r? {
            (0, _, _) => Truncation::Emptied,
            (_, log, done) if log == done => Truncation::Copied,
            _ => Truncation::Refused,
        }))
    }
}

/// Maps the database file again at its current size, on the writer
/// between two transactions, if a checkpoint ran on another connection
/// since it last did.
///
/// SQLite maps a connection's database file once and grows the map only
/// through that connection's own writes, or when another connection's
/// commit makes it drop its cache; the writer sees no such commit. With
/// checkpoints left to a shipper the file grows behind the writer's map,
/// and the writer read every page past it with `pread(2)`: 16,376 calls
/// for a rewrite of a 64 MiB file. SQLite maps again only when the limit
/// changes (os_unix.c, `SQLITE_FCNTL_MMAP_SIZE`), so the limit alternates
/// between two values a page apart.
///
/// Errors: `EIO` if the pragma fails.
pub(crate) fn remap_if_due(inner: &Inner, w: &mut Writer) -> Result<()> {
    if !inner.remap_due.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    w.mmap_alternate = !w.mmap_alternate;
    let limit = if w.mmap_alternate {
        MMAP_SIZE - 4096
    } else {
        MMAP_SIZE
    };
    w.conn
        .execute_batch(&format!("PRAGMA mmap_size = {limit}"))?;
    Ok(())
}

/// The writer's wait between two tries for a lock the shipper holds, for
/// the first [`SHORT_TRIES`] tries (2 ms, what a short hold takes).
const SHORT_WAIT: Duration = Duration::from_micros(50);
const SHORT_TRIES: u32 = 40;
/// Longest wait between two later tries, which double from twice
/// [`SHORT_WAIT`] (about what SQLite's own handler reaches).
const LONGEST_WAIT: Duration = Duration::from_micros(50 << 8);

/// The wait after try `n` (from 0) of the writer.
fn wait_after(n: u32) -> Duration {
    match n.checked_sub(SHORT_TRIES) {
        None => SHORT_WAIT,
        Some(k) => (SHORT_WAIT * 2u32.pow(k.min(7) + 1)).min(LONGEST_WAIT),
    }
}

/// The time waited before try `n`.
fn waited_before(n: u32) -> Duration {
    // After the short tries and eight doublings every wait is the longest.
    let varying = n.min(SHORT_TRIES + 8);
    (0..varying).map(wait_after).sum::<Duration>() + LONGEST_WAIT * (n - varying)
}

/// The writer's busy handler while a backup runs the checkpoints: tries
/// every 50 µs for 2 ms, then waits twice as long each time up to
/// [`LONGEST_WAIT`], and gives up after [`BUSY_TIMEOUT`] in all, as
/// `busy_timeout` did.
fn wait_for_backup(tries: i32) -> bool {
    let n = tries.max(0) as u32;
    if waited_before(n) >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(wait_after(n));
    true
}

impl Fs {
    /// Turns off this filesystem's own checkpoints for as long as it stays
    /// open: the automatic one (`PRAGMA wal_autocheckpoint = 0` on the
    /// writer; it was every [`crate::WAL_SIZE_LIMIT`] bytes of WAL) and the
    /// one [`Fs::compact`] ends with. The WAL then grows until the shipper
    /// checkpoints, and its file is not truncated at a WAL restart
    /// (`journal_size_limit = -1`): the shipper truncates it when idle. Closing the database still checkpoints if this is the
    /// last connection, which a running shipper's own connection prevents.
    /// The writer then waits for a lock in short steps ([`wait_for_backup`]):
    /// the shipper holds the write lock briefly to end a WAL cycle.
    ///
    /// Errors: `EIO` if the pragma fails.
    pub fn leave_checkpoints_to_backup(&self) -> Result<()> {
        let mut w = self.inner.writer();
        self.inner.end_batch(&mut w)?;
        // Nor is the WAL file truncated at a restart, which the writer
        // would wait for: the shipper truncates it once the database is
        // idle.
        w.conn
            .execute_batch("PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = -1")?;
        w.conn.busy_handler(Some(wait_for_backup))?;
        self.inner
            .external_checkpoints
            .store(true, Ordering::Release);
        Ok(())
    }

    /// A handle that lends this filesystem's writer to a backup shipper
    /// ([`WriterHold`]); it does not keep the filesystem open.
    pub fn writer_hold(&self) -> WriterHold {
        WriterHold(Arc::downgrade(&self.inner))
    }

    /// Whether [`Fs::leave_checkpoints_to_backup`] was called.
    pub fn checkpoints_left_to_backup(&self) -> bool {
        self.inner.external_checkpoints.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_retries_often_at_first_and_gives_up_after_the_busy_timeout() {
        assert_eq!(waited_before(SHORT_TRIES), Duration::from_millis(2));
        assert_eq!(wait_after(SHORT_TRIES), Duration::from_micros(100));
        assert_eq!(wait_after(SHORT_TRIES + 100), LONGEST_WAIT);
        let last = (0..2000)
            .find(|&n| waited_before(n) >= BUSY_TIMEOUT)
            .unwrap();
        assert!(waited_before(last) - BUSY_TIMEOUT < LONGEST_WAIT);
        assert!(wait_for_backup(0));
        assert!(!wait_for_backup(last as i32));
    }
}
