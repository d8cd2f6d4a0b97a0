//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that pushes the WAL
//! past 1000 pages and syncs twice there, which doubled the cost of small
//! metadata calls. The writer connection instead runs with
//! `wal_autocheckpoint = 0` and a WAL hook that records the WAL's length
//! (SQLite docs, `sqlite3_wal_hook`); a thread per [`crate::Fs`] with its own
//! connection runs `PASSIVE` checkpoints once the WAL passes
//! [`SOFT_LIMIT_BYTES`], woken by commits. `PASSIVE` never waits for the
//! writer or for readers, so commits go on meanwhile.
//!
//! The WAL stays bounded: a commit that finds it past [`HARD_LIMIT_BYTES`]
//! (a writer outrunning the thread) runs a `RESTART` checkpoint itself
//! before returning, still holding the writer, so the next transaction
//! starts the WAL from its beginning. A long WAL slows every page lookup
//! (64 MiB overwrites took 2.5x as long with an unbounded one).
//!
//! Checkpoints do not change durability: SQLite syncs the WAL before copying
//! it and the database after (docs/durability.md).

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

use crate::Result;
use crate::db;

/// WAL length, in bytes, past which the thread checkpoints. With 1 MiB
/// and 4 MiB the WAL is never longer than under SQLite's default (1000
/// pages), so reads find as many pages in the mapped database as before;
/// 4 / 16 MiB made overwrites cost up to 3x the CPU (docs/engine.md).
pub(crate) const SOFT_LIMIT_BYTES: u64 = 1 << 20;
/// WAL length, in bytes, past which a committing writer checkpoints itself.
pub(crate) const HARD_LIMIT_BYTES: u64 = 4 * SOFT_LIMIT_BYTES;

/// State shared by the writer, its WAL hook and the checkpoint thread.
struct Shared {
    /// Frames in the WAL after the last commit, as the WAL hook saw them.
    wal_frames: AtomicU32,
    /// Set by a commit past the soft limit, or to stop the thread.
    wake: Mutex<Wake>,
    cv: Condvar,
    /// Held around every checkpoint: SQLite lets only one run at a time and
    /// fails the second with `SQLITE_BUSY` instead of waiting.
    running: Mutex<()>,
}

#[derive(Default)]
struct Wake {
    pending: bool,
    stop: bool,
}

/// The checkpoint policy of one database: owns the thread; dropping it
/// stops and joins the thread (and closes its connection).
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    soft_frames: u32,
    hard_frames: u32,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Turns off automatic checkpoints on `writer`, installs the WAL hook
    /// and starts the thread with its own connection to `path`.
    pub(crate) fn start(path: &Path, writer: &mut Connection, page_size: u32) -> Result<Self> {
        let shared = Arc::new(Shared {
            wal_frames: AtomicU32::new(0),
            wake: Mutex::new(Wake::default()),
            cv: Condvar::new(),
            running: Mutex::new(()),
        });
        // Setting the pragma installs SQLite's own hook; ours replaces it.
        writer.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
        let hook_shared = Arc::clone(&shared);
        writer.wal_hook(Some(
            move |_: &mut rusqlite::hooks::Wal, frames: std::ffi::c_int| {
                hook_shared
                    .wal_frames
                    .store(frames.max(0) as u32, Ordering::Relaxed);
                Ok(())
            },
        ))?;
        let conn = open_checkpointer(path)?;
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fs-checkpoint".into())
            .spawn(move || run(conn, &thread_shared))
            .map_err(crate::fs::io_error)?;
        let page = u64::from(page_size.max(512));
        Ok(Checkpointer {
            shared,
            soft_frames: (SOFT_LIMIT_BYTES / page) as u32,
            hard_frames: (HARD_LIMIT_BYTES / page) as u32,
            thread: Some(thread),
        })
    }

    /// Called by the writer after each commit, still holding the writer
    /// connection: wakes the thread past the soft limit, checkpoints on
    /// `writer` past the hard limit. Errors are logged, not returned: the
    /// commit already happened and the WAL keeps the data.
    pub(crate) fn after_commit(&self, writer: &Connection) {
        let frames = self.shared.wal_frames.load(Ordering::Relaxed);
        if frames >= self.hard_frames {
            let _one = self
                .shared
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // The thread may have just reset the count; only the hook's
            // latest value matters, and a RESTART on a short WAL is cheap.
            match checkpoint(writer, "RESTART") {
                Ok(()) => self.shared.wal_frames.store(0, Ordering::Relaxed),
                Err(e) => tracing::warn!(error = %e, frames, "WAL checkpoint by the writer failed"),
            }
        } else if frames >= self.soft_frames {
            let mut w = self.shared.wake.lock().unwrap_or_else(|e| e.into_inner());
            if !w.pending {
                w.pending = true;
                self.shared.cv.notify_one();
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared
            .wake
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop = true;
        self.shared.cv.notify_one();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("WAL checkpoint thread panicked");
        }
    }
}

/// A read-write connection used only for checkpoints. It never writes, so
/// it never takes the write lock; `synchronous` is left at its default
/// (FULL), under which a checkpoint syncs as under NORMAL.
fn open_checkpointer(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(db::BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
    Ok(conn)
}

/// Runs `PRAGMA wal_checkpoint(mode)`; its row is (busy, WAL frames,
/// frames copied), and busy = 1 only means part of the WAL was still in use.
fn checkpoint(conn: &Connection, mode: &str) -> Result<()> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()))?;
    Ok(())
}

fn run(conn: Connection, shared: &Shared) {
    loop {
        {
            let mut w = shared.wake.lock().unwrap_or_else(|e| e.into_inner());
            while !w.pending && !w.stop {
                w = shared.cv.wait(w).unwrap_or_else(|e| e.into_inner());
            }
            if w.stop {
                return;
            }
            w.pending = false;
        }
        let _one = shared.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = checkpoint(&conn, "PASSIVE") {
            tracing::warn!(error = %e, "background WAL checkpoint failed");
        }
    }
}
