//! Group commit: several mutating calls share one SQLite transaction.
//!
//! A call made through a view with a commit window ([`crate::Fs::with_commit_window`])
//! runs inside a `SAVEPOINT` of a batch transaction and returns without
//! committing it; the batch commits when its window has passed (at the end
//! of the next call, or from the flusher thread), when a call without a
//! window runs, on [`crate::Fs::flush`] or [`crate::Fs::fsync`], and when the
//! filesystem is closed. Calls that share a batch share the pages they touch
//! (the usage counters, the parent directory, the inode table's last page),
//! so the WAL receives each page once per batch instead of once per call.
//!
//! While a batch is open its changes are visible only on the writer
//! connection, so reads run there too (see `Inner::reader`).

use parking_lot::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{OnceLock, Weak};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::db;
use crate::fs::Inner;

/// The writer connection and the state of its open batch.
pub(crate) struct Writer {
    pub(crate) conn: Connection,
    /// The uncommitted batch, if any.
    pub(crate) batch: Option<Batch>,
    /// Incremented for every batch, so a flush scheduled for an old batch
    /// leaves a newer one alone.
    generation: u64,
    /// Which of two equivalent map limits the connection has
    /// (`checkpoints::remap_if_due`).
    pub(crate) mmap_alternate: bool,
}

/// An open batch transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    pub(crate) since: Instant,
    pub(crate) generation: u64,
    /// Calls completed inside it (their results were already returned).
    pub(crate) calls: u32,
}

impl Writer {
    pub(crate) fn new(conn: Connection) -> Writer {
        Writer {
            conn,
            batch: None,
            generation: 0,
            mmap_alternate: false,
        }
    }

    /// Starts a batch transaction; returns its generation.
    pub(crate) fn open_batch(&mut self) -> crate::Result<u64> {
        db::exec_cached(&self.conn, "BEGIN IMMEDIATE")?;
        self.generation += 1;
        self.batch = Some(Batch {
            since: Instant::now(),
            generation: self.generation,
            calls: 0,
        });
        Ok(self.generation)
    }

    /// Commits the open batch, if any. On failure the batch is rolled back
    /// and the error says how many completed calls were lost.
    pub(crate) fn commit_batch(&mut self) -> crate::Result<()> {
        let Some(batch) = self.batch.take() else {
            return Ok(());
        };
        match db::commit(&self.conn) {
            Ok(()) => Ok(()),
            Err(e) => {
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                Err(lost(batch.calls, &e))
            }
        }
    }
}

/// The error recorded when completed calls of a batch could not be
/// committed: later `fsync` calls report it, like a page-cache filesystem
/// reports a failed writeback. `ENOSPC` when the host disk was full (the
/// caller can act on that), otherwise `EIO`; fsync(2), "ERRORS", lists both.
pub(crate) fn lost(calls: u32, cause: &crate::Error) -> crate::Error {
    let errno = if cause.errno() == crate::Errno::ENOSPC {
        crate::Errno::ENOSPC
    } else {
        crate::Errno::EIO
    };
    crate::Error::Errno {
        errno,
        context: Some(format!(
            "committing a batch of {calls} completed calls failed: {cause}"
        )),
    }
}

/// A batch due to be committed.
struct Due {
    at: Instant,
    generation: u64,
    inner: Weak<Inner>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

/// One thread for the whole process commits batches whose window passed
/// without a later call to commit them.
struct Flusher {
    queue: Mutex<BinaryHeap<Reverse<Due>>>,
    wake: Condvar,
}

fn flusher() -> &'static Flusher {
    static FLUSHER: OnceLock<&'static Flusher> = OnceLock::new();
    FLUSHER.get_or_init(|| {
        let f: &'static Flusher = Box::leak(Box::new(Flusher {
            queue: Mutex::new(BinaryHeap::new()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("fs-flusher".into())
            .spawn(move || f.run())
            .expect("spawning the batch flusher thread");
        f
    })
}

impl Flusher {
    fn run(&self) {
        loop {
            let due = {
                let mut q = self.queue.lock();
                loop {
                    let now = Instant::now();
                    match q.peek() {
                        None => self.wake.wait(&mut q),
                        Some(Reverse(d)) if d.at > now => {
                            let at = d.at;
                            self.wake.wait_until(&mut q, at);
                        }
                        Some(_) => break q.pop().map(|Reverse(d)| d),
                    }
                }
            };
            if let Some(d) = due
                && let Some(inner) = d.inner.upgrade()
            {
                inner.flush_generation(d.generation);
            }
        }
    }
}

/// Asks the flusher to commit batch `generation` of `inner` after `window`.
pub(crate) fn schedule(inner: Weak<Inner>, generation: u64, window: Duration) {
    let f = flusher();
    let mut q = f.queue.lock();
    q.push(Reverse(Due {
        at: Instant::now() + window,
        generation,
        inner,
    }));
    drop(q);
    f.wake.notify_one();
}
