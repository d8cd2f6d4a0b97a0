//! A SQLite VFS that writes the WAL frames of a commit in large pieces.
//!
//! SQLite appends each WAL frame with two `pwrite(2)` calls, the 24-byte
//! frame header and then the page (sqlite3.c, `walWriteOneFrame`), so a
//! commit of N pages costs 2N system calls of at most 4 KiB, each of which
//! walks the page cache and the filesystem's block reservation once. On this
//! project's ext4 disk 64 MiB written in 4 KiB `pwrite`s took 55 ms plus
//! 52 ms of `fsync`, against 14 + 28 ms in 1 MiB `pwrite`s
//! (docs/engine.md, "Coalesced WAL writes").
//!
//! This VFS wraps the default one (`unix`) and changes one thing: while the
//! engine runs a `COMMIT` ([`coalesce`]), appends to the WAL file are
//! gathered in a buffer of up to [`CAP`] bytes and written with one `pwrite`.
//! Everything else is passed through unchanged.
//!
//! Why this keeps SQLite's guarantees:
//! - **Visibility.** Other connections learn of new frames only when the
//!   committing connection rewrites the wal-index header, after it wrote
//!   the commit frame (sqlite3.c, `walFrames` then `walIndexWriteHdr`). The
//!   buffer is flushed inside the `xWrite` of the page that follows a
//!   commit frame's header (a frame header whose "database size after
//!   commit" field is non-zero, see the WAL file format, section 4.1 of
//!   sqlite.org/fileformat2.html), whether that header was gathered or
//!   written through, so every frame a reader can see is already in the OS.
//! - **Errors.** A failed flush is returned by that `xWrite`, so SQLite
//!   sees the commit fail exactly as if its own write had failed, and rolls
//!   back. The buffer only ever holds frames of the `COMMIT` in progress:
//!   outside [`coalesce`] nothing is buffered (a cache spill during a
//!   statement writes straight through), so dropping the buffer on failure
//!   drops nothing a committed transaction relies on.
//! - **Order.** Only appends at the file's high-water mark are buffered;
//!   any other write (SQLite rewriting frame checksums, the WAL header at a
//!   restart) first flushes the buffer, and every other method (`xRead`,
//!   `xSync`, `xTruncate`, `xFileSize`, locks, file controls, `xClose`)
//!   flushes before it runs. A sync therefore covers every byte written
//!   before it, and a process crash loses at most frames of a commit that
//!   had not returned.
//!
//! The main database file and every other file are passed through
//! untouched: checkpoint writes keep SQLite's own error handling.

use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::size_of;
use std::ptr;
use std::sync::{Arc, OnceLock, Weak};

use rusqlite::ffi;

/// The name connections open the VFS by.
pub(crate) const NAME: &CStr = c"agentcomputer";

/// Largest single write the buffer gathers, in bytes (256 pages of 4 KiB).
pub(crate) const CAP: usize = 1 << 20;

/// Largest write passed to the wrapped VFS, in bytes. The unix VFS keeps
/// only the low 17 bits of a write's length (sqlite3.c, `seekAndWrite`:
/// `nBuf &= 0x1ffff`), so a call must stay below 128 KiB; 64 KiB writes
/// already cost about what 1 MiB writes do here (docs/engine.md).
const MAX_WRITE: usize = 64 * 1024;

/// WAL frame header size (fileformat2, section 4.1).
const FRAME_HEADER: usize = 24;

thread_local! {
    /// Whether this thread is inside [`coalesce`].
    static GATE: Cell<bool> = const { Cell::new(false) };
    /// Buffers that started gathering inside the current [`coalesce`].
    static TOUCHED: RefCell<Vec<Weak<Mutex<Buffer>>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (the engine's `COMMIT` statement) with WAL appends gathered.
/// The buffers are empty again when it returns: the commit frame flushed
/// them, or a failure dropped them. Anything left would break the module
/// doc's reasoning: debug builds panic; release builds write it, and abort
/// the process if that fails.
pub(crate) fn coalesce<T>(f: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    struct Gate;
    impl Drop for Gate {
        fn drop(&mut self) {
            GATE.set(false);
        }
    }
    let gate = Gate;
    GATE.set(true);
    let out = f();
    drop(gate);
    let touched = TOUCHED.take();
    for b in touched.iter().filter_map(Weak::upgrade) {
        let mut b = b.lock();
        if b.data.is_empty() {
            continue;
        }
        // Unreachable if the module doc's reasoning holds: tests fail here.
        debug_assert!(
            false,
            "{} WAL bytes left buffered after a commit",
            b.data.len()
        );
        tracing::error!(
            bytes = b.data.len(),
            "WAL bytes left buffered after a commit"
        );
        // SAFETY: the buffer's file is open while its state is alive.
        let rc = unsafe { b.flush() };
        if rc != ffi::SQLITE_OK {
            // A commit may be visible without these bytes. Going on would
            // leave a hole in the WAL that a checkpoint could copy into the
            // database; stopping leaves a WAL whose last commit fails its
            // checksum, which recovery drops (that call never returned).
            tracing::error!(rc, "writing WAL bytes left after a commit failed; aborting");
            std::process::abort();
        }
    }
    out
}

/// Registers the VFS (once per process) and returns its name.
///
/// Errors: the SQLite code if there is no default VFS or registering fails.
pub(crate) fn name() -> crate::Result<&'static CStr> {
    static REGISTERED: OnceLock<c_int> = OnceLock::new();
    let rc = *REGISTERED.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find and sqlite3_vfs_register are thread-safe
        // (they take SQLite's master mutex); the copied struct is leaked,
        // as SQLite keeps a pointer to it for the life of the process.
        unsafe {
            let base = ffi::sqlite3_vfs_find(ptr::null());
            if base.is_null() {
                return ffi::SQLITE_ERROR;
            }
            let _ = BASE.set(Base(base));
            let mut vfs: ffi::sqlite3_vfs = ptr::read(base);
            vfs.zName = NAME.as_ptr();
            vfs.pNext = ptr::null_mut();
            vfs.szOsFile = (HEADER + (*base).szOsFile as usize) as c_int;
            vfs.xOpen = Some(x_open);
            ffi::sqlite3_vfs_register(Box::into_raw(Box::new(vfs)), 0)
        }
    });
    if rc != ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None).into());
    }
    Ok(NAME)
}

/// The default VFS this one wraps.
struct Base(*mut ffi::sqlite3_vfs);
// SAFETY: a registered VFS is immutable and used from any thread by SQLite.
unsafe impl Send for Base {}
unsafe impl Sync for Base {}
static BASE: OnceLock<Base> = OnceLock::new();

/// Our file object: SQLite allocates `szOsFile` bytes, which hold this
/// header followed by the wrapped VFS's own file object.
#[repr(C)]
struct ShimFile {
    base: ffi::sqlite3_file,
    /// `Box<Arc<Mutex<Buffer>>>` for a WAL file (SQLite opens the WAL
    /// read-write even for read-only connections, which never write it),
    /// else null.
    state: *mut Arc<Mutex<Buffer>>,
}

/// Offset of the wrapped file object, rounded up for its alignment.
const HEADER: usize = size_of::<ShimFile>().next_multiple_of(16);

fn inner(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY (for callers): SQLite allocated szOsFile bytes at `f`.
    f.cast::<u8>().wrapping_add(HEADER).cast()
}

/// Pending appends to one WAL file.
struct Buffer {
    /// The wrapped file object (valid until `xClose`).
    real: *mut ffi::sqlite3_file,
    data: Vec<u8>,
    /// File offset of `data[0]`.
    start: i64,
    /// End of the furthest byte written (or buffered) so far.
    hwm: i64,
    /// A commit frame's header was buffered; flush after its page.
    commit_pending: bool,
}

// SAFETY: the raw file pointer is only used under the mutex, and SQLite
// file objects may be used from any thread (one at a time).
unsafe impl Send for Buffer {}

impl Buffer {
    fn end(&self) -> i64 {
        self.start + self.data.len() as i64
    }

    /// Writes the gathered bytes. They are dropped whether or not the
    /// write succeeds (see the module doc for why that is safe).
    unsafe fn flush(&mut self) -> c_int {
        if self.data.is_empty() {
            return ffi::SQLITE_OK;
        }
        let mut rc = ffi::SQLITE_OK;
        let mut off = self.start;
        for piece in self.data.chunks(MAX_WRITE) {
            // SAFETY: `real` is open; `piece` is a valid buffer of that length.
            rc = unsafe { real_write(self.real, piece.as_ptr().cast(), piece.len() as c_int, off) };
            if rc != ffi::SQLITE_OK {
                break;
            }
            off += piece.len() as i64;
        }
        self.data.clear();
        rc
    }

    /// `xWrite` of the WAL file. A commit frame is a 24-byte header whose
    /// "database size after commit" field (bytes 4..8) is non-zero,
    /// followed by its page (fileformat2, section 4.1; sqlite3.c
    /// `walWriteOneFrame`). Once that page is placed, everything gathered
    /// is written before this call returns, whether the header itself was
    /// gathered or written through (a handle that opened a WAL holding
    /// frames writes its first header below its high-water mark).
    unsafe fn write(&mut self, buf: &[u8], off: i64) -> c_int {
        let gate = GATE.get();
        let commit_header = gate && buf.len() == FRAME_HEADER && buf[4..8] != [0; 4];
        let completes_commit = self.commit_pending && !commit_header;
        // SAFETY: `real` is open while this buffer lives.
        let rc = unsafe { self.place(buf, off, gate) };
        if rc != ffi::SQLITE_OK {
            self.commit_pending = false;
            return rc;
        }
        if commit_header {
            self.commit_pending = true;
        } else if completes_commit {
            self.commit_pending = false;
            return unsafe { self.flush() };
        }
        ffi::SQLITE_OK
    }

    /// Gathers `buf` (which starts at `off`) when it extends the buffer or
    /// starts at the high-water mark inside [`coalesce`]; otherwise flushes
    /// and writes it through.
    unsafe fn place(&mut self, buf: &[u8], off: i64, gate: bool) -> c_int {
        let len = buf.len() as i64;
        if gate {
            let extends = !self.data.is_empty() && off == self.end();
            if extends && self.data.len() + buf.len() <= CAP {
                self.gather(buf, off);
                return ffi::SQLITE_OK;
            }
            // SAFETY: as for every call below, `real` is open.
            let rc = unsafe { self.flush() };
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            if off == self.hwm && buf.len() < CAP {
                self.gather(buf, off);
                return ffi::SQLITE_OK;
            }
        } else {
            let rc = unsafe { self.flush() };
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let rc = unsafe { real_write(self.real, buf.as_ptr().cast(), buf.len() as c_int, off) };
        if rc == ffi::SQLITE_OK {
            // A write at offset 0 is the WAL header of a restarted log: the
            // frames after it are appended from there again.
            self.hwm = if off == 0 {
                len
            } else {
                self.hwm.max(off + len)
            };
        }
        rc
    }

    /// Appends `buf`, which starts at `off`, to the buffer.
    fn gather(&mut self, buf: &[u8], off: i64) {
        if self.data.is_empty() {
            self.start = off;
            if self.data.capacity() == 0 {
                self.data.reserve_exact(CAP);
            }
        }
        self.data.extend_from_slice(buf);
        self.hwm = self.hwm.max(off + buf.len() as i64);
    }
}

/// The buffer of file `f`, if it has one.
unsafe fn buffer<'a>(f: *mut ffi::sqlite3_file) -> Option<&'a Arc<Mutex<Buffer>>> {
    // SAFETY: `f` is one of our file objects (SQLite calls our methods
    // only on files our xOpen filled in).
    let state = unsafe { (*f.cast::<ShimFile>()).state };
    // SAFETY: a non-null state is a live Box until xClose.
    unsafe { state.as_ref() }
}

/// Flushes the buffer of `f`, if any.
unsafe fn flush(f: *mut ffi::sqlite3_file) -> c_int {
    match unsafe { buffer(f) } {
        Some(b) => unsafe { b.lock().flush() },
        None => ffi::SQLITE_OK,
    }
}

fn methods(real: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an open file of the wrapped VFS has a static methods table.
    unsafe { &*(*real).pMethods }
}

unsafe fn real_write(real: *mut ffi::sqlite3_file, p: *const c_void, n: c_int, off: i64) -> c_int {
    match methods(real).xWrite {
        Some(w) => unsafe { w(real, p, n, off) },
        None => ffi::SQLITE_IOERR_WRITE,
    }
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    f: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Base(base)) = BASE.get() else {
        return ffi::SQLITE_ERROR;
    };
    let shim = f.cast::<ShimFile>();
    let real = inner(f);
    // SAFETY: SQLite gives us szOsFile writable bytes at `f`; the wrapped
    // xOpen gets the wrapped VFS pointer and the part of them it sized.
    unsafe {
        (*shim).base.pMethods = ptr::null();
        (*shim).state = ptr::null_mut();
        (*real).pMethods = ptr::null();
        let Some(open) = (**base).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        let rc = open(*base, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            if !(*real).pMethods.is_null()
                && let Some(close) = methods(real).xClose
            {
                close(real);
            }
            return rc;
        }
        if flags & ffi::SQLITE_OPEN_WAL != 0 {
            let b = Buffer {
                real,
                data: Vec::new(),
                start: 0,
                hwm: 0,
                commit_pending: false,
            };
            (*shim).state = Box::into_raw(Box::new(Arc::new(Mutex::new(b))));
        }
        (*shim).base.pMethods = &METHODS;
    }
    ffi::SQLITE_OK
}

/// Remembers that `f`'s buffer started gathering in this [`coalesce`].
fn touched(b: &Arc<Mutex<Buffer>>) {
    TOUCHED.with_borrow_mut(|t| {
        if !t.iter().any(|w| w.as_ptr() == Arc::as_ptr(b)) {
            t.push(Arc::downgrade(b));
        }
    });
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `f` is ours; after this SQLite never uses it again.
    unsafe {
        let flushed = flush(f);
        let real = inner(f);
        let rc = match methods(real).xClose {
            Some(close) => close(real),
            None => ffi::SQLITE_OK,
        };
        let shim = f.cast::<ShimFile>();
        if !(*shim).state.is_null() {
            drop(Box::from_raw((*shim).state));
            (*shim).state = ptr::null_mut();
        }
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            rc
        }
    }
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    p: *const c_void,
    n: c_int,
    off: i64,
) -> c_int {
    // SAFETY: SQLite passes a buffer of `n` bytes; `f` is ours.
    unsafe {
        match buffer(f) {
            Some(b) => {
                let buf = std::slice::from_raw_parts(p.cast::<u8>(), n.max(0) as usize);
                let mut g = b.lock();
                let was_empty = g.data.is_empty();
                let rc = g.write(buf, off);
                if was_empty && !g.data.is_empty() {
                    drop(g);
                    touched(b);
                }
                rc
            }
            None => real_write(inner(f), p, n, off),
        }
    }
}

/// Defines a method that flushes the buffer, then calls the wrapped one.
macro_rules! flushing {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(f: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: `f` is ours and the wrapped file is open.
            unsafe {
                let rc = flush(f);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                let real = inner(f);
                match methods(real).$field {
                    Some(m) => m(real $(, $arg)*),
                    None => ffi::SQLITE_IOERR,
                }
            }
        }
    };
}

flushing!(x_read, xRead, (p: *mut c_void, n: c_int, off: i64));
flushing!(x_sync, xSync, (flags: c_int));
flushing!(x_file_size, xFileSize, (out: *mut i64));
flushing!(x_lock, xLock, (level: c_int));
flushing!(x_unlock, xUnlock, (level: c_int));
flushing!(x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int));
flushing!(x_file_control, xFileControl, (op: c_int, arg: *mut c_void));
flushing!(x_fetch, xFetch, (off: i64, n: c_int, out: *mut *mut c_void));

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: `f` is ours and the wrapped file is open.
    unsafe {
        if let Some(b) = buffer(f) {
            let mut g = b.lock();
            let rc = g.flush();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            g.hwm = g.hwm.min(size);
        }
        let real = inner(f);
        match methods(real).xTruncate {
            Some(m) => m(real, size),
            None => ffi::SQLITE_IOERR_TRUNCATE,
        }
    }
}

/// Defines a method that only calls the wrapped one.
macro_rules! passing {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(f: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            let real = inner(f);
            match methods(real).$field {
                // SAFETY: the wrapped file is open.
                Some(m) => unsafe { m(real $(, $arg)*) },
                None => $missing,
            }
        }
    };
}

passing!(x_sector_size, xSectorSize, () -> c_int, 4096);
passing!(x_device_characteristics, xDeviceCharacteristics, () -> c_int, 0);
passing!(x_shm_map, xShmMap, (pg: c_int, sz: c_int, extend: c_int, out: *mut *mut c_void) -> c_int, ffi::SQLITE_IOERR);
passing!(x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int) -> c_int, ffi::SQLITE_IOERR);
passing!(x_shm_barrier, xShmBarrier, () -> (), ());
passing!(x_shm_unmap, xShmUnmap, (delete: c_int) -> c_int, ffi::SQLITE_OK);
passing!(x_unfetch, xUnfetch, (off: i64, p: *mut c_void) -> c_int, ffi::SQLITE_OK);

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicI64, Ordering};

    use rusqlite::{Connection, OpenFlags};

    use super::*;

    fn open(p: &Path, flags: OpenFlags) -> Connection {
        let c = Connection::open_with_flags_and_vfs(p, flags, name().unwrap()).unwrap();
        c.execute_batch("PRAGMA wal_autocheckpoint = 0; PRAGMA synchronous = NORMAL;")
            .unwrap();
        c
    }

    fn writer(p: &Path) -> Connection {
        let c = open(
            p,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        );
        c.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        c
    }

    fn commit(c: &Connection) {
        coalesce(|| {
            c.execute_batch("COMMIT")?;
            Ok(())
        })
        .unwrap();
    }

    /// Database of the commit under test; results seen from inside it.
    static DB: Mutex<Option<PathBuf>> = Mutex::new(None);
    static WAL_BYTES: AtomicI64 = AtomicI64::new(-1);
    static FRAMES: AtomicI64 = AtomicI64::new(-1);
    static READ_V: AtomicI64 = AtomicI64::new(-1);

    /// `sqlite3_wal_hook` runs inside COMMIT right after the commit was
    /// published to other connections (sqlite3.c, `sqlite3VdbeHalt` ->
    /// `doWalCallbacks`): what the WAL file and a reader hold at that moment.
    unsafe extern "C" fn at_publish(
        _: *mut c_void,
        _: *mut ffi::sqlite3,
        _: *const c_char,
        frames: c_int,
    ) -> c_int {
        let db = DB.lock().unwrap().clone().unwrap();
        let wal = db.with_file_name(format!("{}-wal", db.file_name().unwrap().to_str().unwrap()));
        WAL_BYTES.store(
            std::fs::metadata(wal).unwrap().len() as i64,
            Ordering::SeqCst,
        );
        FRAMES.store(i64::from(frames), Ordering::SeqCst);
        let r = open(&db, OpenFlags::SQLITE_OPEN_READ_ONLY);
        let v: i64 = r
            .query_row("SELECT v FROM t WHERE id = 1", [], |x| x.get(0))
            .unwrap_or(-2);
        READ_V.store(v, Ordering::SeqCst);
        ffi::SQLITE_OK
    }

    /// A connection whose WAL handle is new while the WAL already holds
    /// frames (as after reopening a database that was not closed cleanly)
    /// commits one page: its commit header is written through, below the
    /// handle's high-water mark, and the page after it must still reach the
    /// OS before the commit is published.
    #[test]
    fn a_commit_is_in_the_os_when_published_on_a_fresh_handle() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        *DB.lock().unwrap() = Some(db.clone());
        let first = writer(&db);
        first
            .execute_batch(
                "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER);
                 INSERT INTO t VALUES (1, 0);",
            )
            .unwrap();
        let second = writer(&db);
        // SAFETY: a valid connection handle and a callback of the right type.
        unsafe { ffi::sqlite3_wal_hook(second.handle(), Some(at_publish), ptr::null_mut()) };
        for v in 1..=3 {
            second
                .execute_batch(&format!(
                    "BEGIN IMMEDIATE; UPDATE t SET v = {v} WHERE id = 1;"
                ))
                .unwrap();
            commit(&second);
            let frames = FRAMES.load(Ordering::SeqCst);
            let needed = 32 + frames * (4096 + 24);
            let have = WAL_BYTES.load(Ordering::SeqCst);
            assert!(
                have >= needed,
                "published with {} bytes not written",
                needed - have
            );
            assert_eq!(
                READ_V.load(Ordering::SeqCst),
                v,
                "a reader saw the commit whole"
            );
        }
    }

    /// A transaction larger than the writer's page cache spills frames
    /// before COMMIT (written straight through), rewrites some of them
    /// (SQLite then recomputes the checksums of the whole transaction at
    /// commit, `walRewriteChecksums`), and commits through the gathered
    /// path. Readers see every round, and a copy of the files taken while
    /// the connections are open (a crash image) recovers every row.
    #[test]
    fn spilled_and_rewritten_frames_survive_a_crash_image() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let w = writer(&db);
        w.execute_batch(
            "PRAGMA cache_size = 8;
             CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB);",
        )
        .unwrap();
        let r = open(&db, OpenFlags::SQLITE_OPEN_READ_ONLY);
        for round in 0..3i64 {
            w.execute_batch("BEGIN IMMEDIATE").unwrap();
            for i in 0..400 {
                w.execute(
                    "INSERT OR REPLACE INTO t VALUES (?1, randomblob(600))",
                    [i + round * 1000],
                )
                .unwrap();
            }
            w.execute("UPDATE t SET v = zeroblob(600) WHERE id % 3 = 0", [])
                .unwrap();
            commit(&w);
            let n: i64 = r
                .query_row("SELECT count(*) FROM t", [], |x| x.get(0))
                .unwrap();
            assert_eq!(n, 400 * (round + 1));
            let qc: String = r.query_row("PRAGMA quick_check", [], |x| x.get(0)).unwrap();
            assert_eq!(qc, "ok");
        }
        let image = dir.path().join("image.db");
        std::fs::copy(&db, &image).unwrap();
        std::fs::copy(dir.path().join("s.db-wal"), dir.path().join("image.db-wal")).unwrap();
        let c = Connection::open(&image).unwrap();
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |x| x.get(0))
            .unwrap();
        assert_eq!(n, 1200, "recovery dropped frames");
        let ic: String = c
            .query_row("PRAGMA integrity_check", [], |x| x.get(0))
            .unwrap();
        assert_eq!(ic, "ok");
    }
}
