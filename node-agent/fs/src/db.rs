//! SQLite connections: one writer behind a mutex, a pool of readers.
//!
//! WAL mode lets the readers see the last committed state while the writer
//! works, so reads never wait for writes (SQLite docs, "Write-Ahead Logging").

use parking_lot::{Mutex, MutexGuard};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::Result;
use crate::commit::Writer;

/// How long a connection waits for a lock held by another connection.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of the database file the writer and readers map (`PRAGMA
/// mmap_size`): reads of pages in the database file (not in the WAL) then
/// cost no system call.
pub(crate) const MMAP_SIZE: i64 = 256 << 20;

/// Readers kept open between calls; more are opened under load and closed after.
const MAX_IDLE_READERS: usize = 4;
/// Cached prepared statements per connection.
const STATEMENT_CACHE: usize = 64;
/// WAL pages after which a commit checkpoints (SQLite's default is 1000).
/// Every checkpoint syncs the WAL and the database file, so a bulk write
/// pays two fsyncs per this many pages: at 8192 (32 MiB on 4 KiB pages) a
/// 64 MiB write through FUSE took 351-388 ms instead of 458-790 ms in the
/// same period, for 15% fewer path stats per second in `engine_bench`
/// (lookups in a longer WAL); see docs/engine.md.
pub(crate) const WAL_AUTOCHECKPOINT_PAGES: u32 = 8192;
/// Size, in bytes, the WAL file is cut back to whenever a checkpoint lets
/// SQLite start it over (`PRAGMA journal_size_limit`): a transaction may
/// grow the WAL past it, but the file does not keep that high-water size
/// (without a limit a 4 GiB copy left a 4.4 GB WAL for as long as the
/// computer stayed open). Equal to the auto-checkpoint size, so steady
/// writes never pay for re-growing the file.
pub const WAL_SIZE_LIMIT: u64 = WAL_AUTOCHECKPOINT_PAGES as u64 * 4096;

/// Opens the writer connection and sets its pragmas. `page_size` only takes
/// effect on a new, empty database (SQLite cannot change it in WAL mode).
pub(crate) fn open_writer(path: &Path, create: bool, page_size: Option<u32>) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags_and_vfs(path, flags, crate::vfs::name()?)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if let Some(ps) = page_size {
        // A new database: incremental auto-vacuum (schema version 5) must
        // be chosen before the first page is written, which switching to
        // WAL below does.
        conn.execute_batch(&format!(
            "PRAGMA page_size = {ps}; PRAGMA auto_vacuum = {};",
            crate::schema::AUTO_VACUUM_INCREMENTAL
        ))?;
    }
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(
            rusqlite::Error::InvalidParameterName(format!("journal_mode stayed {mode}")).into(),
        );
    }
    // NORMAL in WAL mode: a commit survives a process crash; fsync() upgrades
    // one commit to FULL for power-loss durability (see docs/durability.md).
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = OFF;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -8192;",
    )?;
    conn.execute_batch(&format!("PRAGMA mmap_size = {MMAP_SIZE}"))?;
    conn.execute_batch(&format!(
        "PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES};
         PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};"
    ))?;
    tune_planner(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Query-planner stability (SQLITE_DBCONFIG_ENABLE_QPSG): without it the
/// bundled SQLite (built with STAT4) re-prepares statements whose plan might
/// depend on a bound value — our joins and range scans — on every run, which
/// showed as SQL parsing in the hot path of `resolve` and `read`.
fn tune_planner(conn: &Connection) -> Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        crate::vfs::name()?,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(&format!(
        "PRAGMA cache_size = -4096; PRAGMA temp_store = MEMORY; PRAGMA mmap_size = {MMAP_SIZE};"
    ))?;
    tune_planner(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// A reader for a snapshot held across calls ([`crate::ReadSnapshot`]):
/// its own connection with a small page cache (256 KiB) and no memory map,
/// so that many snapshots held at once (one per API Read stream) stay
/// small; closed when the snapshot ends, never pooled.
pub(crate) fn open_snapshot_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        crate::vfs::name()?,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(
        "PRAGMA cache_size = -256; PRAGMA temp_store = MEMORY; PRAGMA mmap_size = 0;",
    )?;
    tune_planner(&conn)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Runs a statement without parameters through the statement cache, so
/// hot statements such as `BEGIN` and `COMMIT` are parsed once per connection.
pub(crate) fn exec_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Commits the writer's open transaction, writing its WAL frames in large
/// pieces (see [`crate::vfs`]).
pub(crate) fn commit(conn: &Connection) -> Result<()> {
    crate::vfs::coalesce(|| exec_cached(conn, "COMMIT"))
}

/// The errno of the last failed SQLite call on `conn`: `ENOSPC` for a full
/// disk (`SQLITE_FULL`), otherwise `EIO`. Used where the failing call's own
/// error is no longer at hand (SQLite rolled a transaction back by itself).
pub(crate) fn last_error_errno(conn: &Connection) -> crate::Errno {
    // SAFETY: the handle stays valid while `conn` is borrowed, and
    // sqlite3_errcode only reads the connection's last result code.
    let code = unsafe { rusqlite::ffi::sqlite3_errcode(conn.handle()) };
    if code == rusqlite::ffi::SQLITE_FULL {
        crate::Errno::ENOSPC
    } else {
        crate::Errno::EIO
    }
}

/// A pool of read-only connections.
pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub(crate) fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A reader, taken from the pool or newly opened.
    pub(crate) fn get(&self) -> Result<ReadConn<'_>> {
        let pooled = self.idle.lock().pop();
        let conn = match pooled {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        Ok(ReadConn {
            pool: Some(self),
            conn: Some(conn),
            writer: None,
        })
    }
}

/// A connection lent for reading: a pooled reader (back to the pool when
/// dropped), or the writer while a batch is open.
pub(crate) struct ReadConn<'a> {
    pool: Option<&'a Readers>,
    conn: Option<Connection>,
    writer: Option<MutexGuard<'a, Writer>>,
}

impl<'a> ReadConn<'a> {
    /// Reads on the writer connection, inside its open batch.
    pub(crate) fn writer(w: MutexGuard<'a, Writer>) -> ReadConn<'a> {
        ReadConn {
            pool: None,
            conn: None,
            writer: Some(w),
        }
    }

    /// Runs `f` inside one read transaction, so all its queries see one
    /// snapshot of the database. On the writer, the open batch is that
    /// transaction (nothing else writes while the lock is held).
    pub(crate) fn snapshot<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn: &Connection = self;
        if self.writer.is_some() {
            return f(conn);
        }
        exec_cached(conn, "BEGIN DEFERRED")?;
        let r = f(conn);
        // A read transaction has nothing to keep: ending it can't lose data.
        let end = exec_cached(conn, "COMMIT");
        let value = r?;
        end?;
        Ok(value)
    }
}

impl std::ops::Deref for ReadConn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match &self.writer {
            Some(w) => &w.conn,
            None => self.conn.as_ref().expect("reader present until drop"),
        }
    }
}

impl Drop for ReadConn<'_> {
    fn drop(&mut self) {
        if let (Some(conn), Some(pool)) = (self.conn.take(), self.pool) {
            if !conn.is_autocommit() {
                // A failed snapshot left a transaction open: don't pool it.
                return;
            }
            let mut idle = pool.idle.lock();
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
        }
    }
}
