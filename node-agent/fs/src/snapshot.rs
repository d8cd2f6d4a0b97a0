//! Read snapshots held across calls: one SQLite read transaction that a
//! reader keeps while it reads a file in several pieces.

use std::sync::Arc;

use rusqlite::Connection;

use crate::data::{read_in, regular};
use crate::db::{exec_cached, open_snapshot_reader};
use crate::fs::Inner;
use crate::{DataVersion, Fs, Ino, Result, inode};

/// One read transaction on a reader connection of its own: every
/// [`ReadSnapshot::read`] sees the database as it was when the snapshot was
/// taken, whatever commits meanwhile. While it lives, SQLite cannot
/// checkpoint past it, so the WAL grows with every commit: hold one briefly
/// (the API holds one for a bounded time, see `docs/durability.md`). It has
/// a connection of its own (opening one costs a fraction of a millisecond;
/// it caches at most 256 KiB), closed on drop.
pub struct ReadSnapshot {
    inner: Arc<Inner>,
    conn: Option<Connection>,
}

impl std::fmt::Debug for ReadSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSnapshot").finish_non_exhaustive()
    }
}

impl Fs {
    /// Takes a [`ReadSnapshot`] of everything committed now, committing
    /// first what calls through a commit window returned (so the snapshot
    /// holds every call that returned before this one).
    ///
    /// Errors: storage errors (`EIO`), the failure of that commit.
    pub fn read_snapshot(&self) -> Result<ReadSnapshot> {
        if self.inner.pending.load(std::sync::atomic::Ordering::SeqCst) {
            self.flush()?;
        }
        let conn = open_snapshot_reader(&self.inner.path)?;
        let mut snap = ReadSnapshot {
            inner: self.inner.clone(),
            conn: None,
        };
        exec_cached(&conn, "BEGIN DEFERRED")?;
        snap.conn = Some(conn);
        // A deferred transaction takes its snapshot at its first read.
        snap.conn()
            .prepare_cached("SELECT 1 FROM inodes WHERE ino = 1")?
            .exists([])?;
        Ok(snap)
    }
}

impl ReadSnapshot {
    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("present until drop")
    }

    /// Reads up to `len` bytes at `offset` of file `ino` as of the
    /// snapshot (as [`Fs::read`]), with the file's [`DataVersion`] then.
    ///
    /// Errors: as [`Fs::read`].
    pub fn read(&self, ino: Ino, offset: u64, len: usize) -> Result<(Vec<u8>, DataVersion)> {
        let c = self.conn();
        let f = regular(inode::get(c, ino)?)?;
        let data = read_in(c, self.inner.chunk_size, ino, offset, len)?;
        Ok((data, DataVersion::of(&f.attr)))
    }
}

impl Drop for ReadSnapshot {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // A read transaction has nothing to keep: ending it loses nothing.
            let _ = exec_cached(&conn, "COMMIT");
            drop(conn);
        }
    }
}
