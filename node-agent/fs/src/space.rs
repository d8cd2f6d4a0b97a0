//! The host disk a filesystem takes: measuring it, and giving free pages
//! back ([`Fs::compact`]).
//!
//! Deleting data frees SQLite pages inside the database file; the file
//! itself does not shrink. Databases use incremental auto-vacuum (schema
//! version 5), so free pages at the end of the file can be cut off with
//! `PRAGMA incremental_vacuum(N)` without rewriting the file (SQLite docs,
//! "PRAGMA auto_vacuum", "PRAGMA incremental_vacuum"). The WAL is then
//! checkpointed and truncated to zero bytes (`wal_checkpoint(TRUNCATE)`),
//! unless checkpoints are left to a backup shipper
//! ([`Fs::leave_checkpoints_to_backup`]).

use std::path::Path;

use crate::{Fs, Result};

/// Free pages released per transaction by [`Fs::compact`]: 4096 pages are
/// 16 MiB on the default 4 KiB page, so each step's WAL stays under the
/// WAL size limit and the writer is held only briefly between steps.
const VACUUM_STEP_PAGES: i64 = 4096;

/// Bytes a filesystem's database takes on the host right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskUsage {
    /// Size of the database file, in bytes.
    pub db_bytes: u64,
    /// Size of its write-ahead log (`<db>-wal`), in bytes; 0 if absent.
    pub wal_bytes: u64,
    /// Pages of the database file that hold nothing (SQLite's freelist),
    /// in bytes: what [`Fs::compact`] can give back.
    pub free_bytes: u64,
}

impl DiskUsage {
    /// Database file plus WAL, in bytes.
    pub fn total(&self) -> u64 {
        self.db_bytes + self.wal_bytes
    }
}

/// What one [`Fs::compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compacted {
    /// Host bytes (database file plus WAL) before.
    pub before: u64,
    /// Host bytes after.
    pub after: u64,
}

fn file_len(p: &Path) -> Result<u64> {
    match std::fs::metadata(p) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(crate::fs::io_error(e)),
    }
}

fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    p.into()
}

impl Fs {
    /// The host bytes this filesystem takes: database file and WAL sizes
    /// (from `stat`), and the free pages inside the file.
    ///
    /// Errors: `EIO` (or the host's errno) if a file cannot be examined.
    pub fn disk_usage(&self) -> Result<DiskUsage> {
        let path = &self.inner.path;
        let (free_pages, page_size): (i64, i64) = {
            let r = self.inner.reader()?;
            (
                r.query_row("PRAGMA freelist_count", [], |row| row.get(0))?,
                r.query_row("PRAGMA page_size", [], |row| row.get(0))?,
            )
        };
        Ok(DiskUsage {
            db_bytes: file_len(path)?,
            wal_bytes: file_len(&wal_path(path))?,
            free_bytes: (free_pages.max(0) * page_size.max(0)) as u64,
        })
    }

    /// Gives free space back to the host: commits the open batch, releases
    /// the database's free pages in steps of [`VACUUM_STEP_PAGES`] (each
    /// its own transaction, so other calls run between steps), then
    /// checkpoints the WAL into the file and truncates it to zero bytes.
    /// Cheap when nothing is free; meant for a computer going idle and
    /// after large deletes.
    ///
    /// Errors: `EIO`, `ENOSPC` from SQLite. A checkpoint that cannot finish
    /// because a reader holds an old snapshot is not an error: it leaves the
    /// WAL as it is, to be cut at the next checkpoint.
    pub fn compact(&self) -> Result<Compacted> {
        let before = self.disk_usage()?.total();
        let mut last_free = i64::MAX;
        loop {
            let mut w = self.inner.writer();
            self.inner.end_batch(&mut w)?;
            let free: i64 = w
                .conn
                .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            // Stop when nothing is free, or nothing more could be freed.
            if free == 0 || free >= last_free {
                break;
            }
            last_free = free;
            // The pragma frees one page per step of the statement.
            let mut st = w
                .conn
                .prepare(&format!("PRAGMA incremental_vacuum({VACUUM_STEP_PAGES})"))?;
            let mut rows = st.query([])?;
            while rows.next()?.is_some() {}
        }
        if !self
            .inner
            .external_checkpoints
            .load(std::sync::atomic::Ordering::Acquire)
        {
            let mut w = self.inner.writer();
            self.inner.end_batch(&mut w)?;
            let busy: i64 = w
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy != 0 {
                tracing::debug!(db = %self.inner.path.display(), "checkpoint blocked by a reader");
            }
        }
        let after = self.disk_usage()?.total();
        Ok(Compacted { before, after })
    }
}
