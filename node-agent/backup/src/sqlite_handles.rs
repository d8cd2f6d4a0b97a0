//! Reading a database's WAL index and file through the handles SQLite
//! already holds, never through a descriptor of our own.
//!
//! Closing any descriptor of a file drops every POSIX advisory lock the
//! process holds on that file (fcntl(2), "Advisory record locking";
//! SQLite's "How To Corrupt An SQLite Database File", section 2.2), the
//! locks SQLite's connections took included. SQLite keeps its own count
//! of the locks between the connections of one process, so the engine
//! goes on, but another process opening the database (a node agent taking
//! a computer over, `sqlite3`) finds no lock held: it may take the
//! WAL index for abandoned and rebuild it under a live writer. So the
//! shipper reads the `-shm` file through SQLite's own mapping of it and
//! the database file through SQLite's own descriptor. (SQLite places no
//! lock on the `-wal` file, which is read directly.)

use std::ffi::c_void;
use std::sync::atomic::{Ordering, fence};

use rusqlite::{Connection, ffi};

/// Bytes of one WAL-index region (SQLite's `WALINDEX_PGSZ`), the size
/// every connection maps it in.
const REGION_BYTES: i32 = 32768;

/// Bytes of the two copies of the WAL-index header.
pub(crate) const INDEX_HEADERS_BYTES: usize = 96;

/// Bytes read from the database file per call.
const READ_STEP: usize = 1 << 20;

/// The `sqlite3_file` of `conn`'s main database, or `None`.
fn main_file(conn: &Connection) -> Option<*mut ffi::sqlite3_file> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `handle` is the open connection's; FILE_POINTER writes one
    // pointer into `file`.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&mut file as *mut *mut ffi::sqlite3_file).cast::<c_void>(),
        )
    };
    (rc == ffi::SQLITE_OK && !file.is_null()).then_some(file)
}

/// The first 96 bytes of `conn`'s WAL index (the header's two copies),
/// read from SQLite's shared mapping of the `-shm` file in the order
/// SQLite's readers read them: the first copy, a barrier, the second.
/// `None` when the index has no region yet or the VFS has no shared
/// memory. `conn`'s database must be in WAL mode (a call on another would
/// create its `-shm` file).
pub(crate) fn wal_index_headers(conn: &Connection) -> Option<[u8; INDEX_HEADERS_BYTES]> {
    let file = main_file(conn)?;
    // SAFETY: `file` is the connection's open main file; version 2 of the
    // methods has xShmMap, which (with bExtend 0) maps nothing new and
    // returns the region SQLite keeps mapped until the connection closes.
    // The bytes are read volatile: other connections write them.
    unsafe {
        let methods = (*file).pMethods;
        if methods.is_null() || (*methods).iVersion < 2 {
            return None;
        }
        let map = (*methods).xShmMap?;
        let mut region: *mut c_void = std::ptr::null_mut();
        let rc = map(file, 0, REGION_BYTES, 0, &mut region);
        if rc != ffi::SQLITE_OK || region.is_null() {
            return None;
        }
        let p = region as *const u8;
        let mut out = [0u8; INDEX_HEADERS_BYTES];
        let half = INDEX_HEADERS_BYTES / 2;
        for (i, b) in out[..half].iter_mut().enumerate() {
            *b = std::ptr::read_volatile(p.add(i));
        }
        fence(Ordering::SeqCst);
        for (i, b) in out[half..].iter_mut().enumerate() {
            *b = std::ptr::read_volatile(p.add(half + i));
        }
        Some(out)
    }
}

/// The whole database file of `conn`, read through SQLite's own
/// descriptor (or its map). A checkpoint may write pages of the file
/// meanwhile (up to what a read transaction of `conn` sees): the caller
/// overlays every frame of the WAL it pinned, as a snapshot does, and a
/// short read is zero-filled.
///
/// Errors: the VFS's read or size call failing (`SQLITE_IOERR_*`).
pub(crate) fn read_database_file(conn: &Connection) -> rusqlite::Result<Vec<u8>> {
    let io_error = |rc: i32| rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None);
    let file = main_file(conn).ok_or_else(|| io_error(ffi::SQLITE_MISUSE))?;
    // SAFETY: `file` is the connection's open main file; xRead writes at
    // most `n` bytes into the buffer it is given, which is that long.
    unsafe {
        let methods = (*file).pMethods;
        if methods.is_null() {
            return Err(io_error(ffi::SQLITE_MISUSE));
        }
        let size_of = (*methods)
            .xFileSize
            .ok_or_else(|| io_error(ffi::SQLITE_MISUSE))?;
        let read = (*methods)
            .xRead
            .ok_or_else(|| io_error(ffi::SQLITE_MISUSE))?;
        let mut size: ffi::sqlite3_int64 = 0;
        let rc = size_of(file, &mut size);
        if rc != ffi::SQLITE_OK {
            return Err(io_error(rc));
        }
        let mut out = vec![0u8; size.max(0) as usize];
        for (i, chunk) in out.chunks_mut(READ_STEP).enumerate() {
            let offset = (i * READ_STEP) as ffi::sqlite3_int64;
            let rc = read(
                file,
                chunk.as_mut_ptr().cast::<c_void>(),
                chunk.len() as i32,
                offset,
            );
            // A short read zero-fills the rest, as for a file that shrank.
            if rc != ffi::SQLITE_OK && rc != ffi::SQLITE_IOERR_SHORT_READ {
                return Err(io_error(rc));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// This process's POSIX locks on the file with inode `ino`, from
    /// /proc/locks.
    fn my_locks(ino: u64) -> usize {
        let pid = std::process::id().to_string();
        let suffix = format!(":{ino}");
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 5 && f[1] == "POSIX" && f[4] == pid && f[5].ends_with(&suffix)
            })
            .count()
    }

    #[test]
    fn reading_keeps_the_locks_sqlite_holds() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let w = Connection::open(&db).unwrap();
        w.execute_batch(
            "PRAGMA journal_mode = WAL; CREATE TABLE t(x BLOB);
             INSERT INTO t VALUES (randomblob(50000));",
        )
        .unwrap();
        // A reader in a transaction holds a read lock on the -shm file.
        let r = Connection::open(&db).unwrap();
        r.execute_batch("BEGIN; SELECT count(*) FROM t;").unwrap();
        let shm_ino = std::fs::metadata(dir.path().join("t.db-shm"))
            .unwrap()
            .ino();
        let db_ino = std::fs::metadata(&db).unwrap().ino();
        let (shm_before, db_before) = (my_locks(shm_ino), my_locks(db_ino));
        assert!(shm_before > 0 && db_before > 0);

        let headers = wal_index_headers(&r).unwrap();
        assert_eq!(headers[..48], headers[48..]);
        let bytes = read_database_file(&r).unwrap();
        assert_eq!(bytes.len() as u64, std::fs::metadata(&db).unwrap().len());
        assert_eq!(&bytes[..16], b"SQLite format 3\0");
        assert_eq!(my_locks(shm_ino), shm_before);
        assert_eq!(my_locks(db_ino), db_before);

        // What an own descriptor does: closing it drops them all.
        drop(std::fs::File::open(dir.path().join("t.db-shm")).unwrap());
        assert_eq!(my_locks(shm_ino), 0);
        r.execute_batch("COMMIT").unwrap();
    }
}
