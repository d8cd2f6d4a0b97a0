//! [`Fs`]: construction, transactions, limits, statfs, fsync, subscriptions.

use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rusqlite::{Connection, params};

use crate::commit::{self, Writer};
use crate::db::{self, ReadConn, Readers};
use crate::inode::{self, NewInode};
use crate::lock::ProcessLock;
use crate::notify::{Change, Subscriber, Subscribers, SubscriptionId};
use crate::schema;
use crate::{Errno, Error, FileKind, Ino, Limits, NAME_MAX, ROOT_INO, Result, StatFs, Timespec};

/// Default size of one content chunk, in bytes; chosen by
/// `examples/chunk_size.rs` (numbers in docs/engine.md).
pub const DEFAULT_CHUNK_SIZE: u32 = 32 * 1024;
/// Default SQLite page size, in bytes; chosen with the chunk size.
pub const DEFAULT_PAGE_SIZE: u32 = 4096;
/// Largest file size, in bytes (2^43 = 8 TiB); writes or truncates past it
/// fail with `EFBIG`.
pub const MAX_FILE_SIZE: u64 = 1 << 43;
/// Block size reported by `statfs`, in bytes.
pub const STATFS_BLOCK_SIZE: u32 = 4096;

/// Storage layout chosen when a database is created; fixed afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Bytes per content chunk; a power of two from 4 KiB to 1 MiB.
    pub chunk_size: u32,
    /// SQLite page size: a power of two from 512 to 65536 bytes.
    pub page_size: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            chunk_size: DEFAULT_CHUNK_SIZE,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// A filesystem stored in one SQLite database.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`. Only one `Fs` per
/// database file may be open at a time (open-file tracking and orphan purge
/// assume it): another process gets `EBUSY` from [`Fs::open`]; within a
/// process the node agent's registry guarantees it.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<Inner>,
    /// How long a mutating call of this view may leave its transaction
    /// uncommitted; zero commits every call before it returns.
    pub(crate) window: Duration,
    /// The fence mutating calls of this view pass through, if any (see
    /// [`Fs::fenced`]).
    pub(crate) fence: Option<Arc<crate::fence::Fence>>,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs")
            .field("db_path", &self.inner.path)
            .field("chunk_size", &self.inner.chunk_size)
            .field("commit_window", &self.window)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) path: PathBuf,
    /// Declared before `writer` so readers close first: the last connection
    /// to close checkpoints the WAL and deletes it, leaving a closed
    /// (hibernated) computer as one file.
    pub(crate) readers: Readers,
    writer: Mutex<Writer>,
    /// True while a batch may be open: reads must then look at the writer.
    pub(crate) pending: AtomicBool,
    /// Why completed calls were lost (a batch failed to commit); reported
    /// once by the next `fsync`.
    lost: Mutex<Option<Error>>,
    /// This `Inner` itself, for the flusher thread.
    me: Weak<Inner>,
    limits: RwLock<Limits>,
    pub(crate) chunk_size: u64,
    /// Open handles per inode; see [`crate::Handle`].
    pub(crate) open: Mutex<HashMap<Ino, u32>>,
    /// Orphans found at an open with [`OpenOptions::keep_orphans`]: held
    /// by a client from before the open (the kernel of a FUSE connection
    /// taken over), so only [`Fs::release_orphan`] frees them, never the
    /// drop of an engine handle. Lock order: after `open`.
    pub(crate) kept: Mutex<HashSet<Ino>>,
    subs: Subscribers,
    /// Checkpoints are left to a backup shipper
    /// ([`Fs::leave_checkpoints_to_backup`]): no automatic checkpoint, and
    /// [`Fs::compact`] does not checkpoint.
    pub(crate) external_checkpoints: AtomicBool,
    /// A checkpoint ran on another connection since the writer last mapped
    /// the database file ([`crate::WriterHold::checkpointed`]).
    pub(crate) remap_due: AtomicBool,
    /// Last, so it is released after every connection closed.
    _lock: ProcessLock,
}

/// The writer's transaction for one call: `BEGIN IMMEDIATE` on creation,
/// rolled back on drop unless [`WriteTxn::commit`] ran. Inside a batch (see
/// the `commit` module) it is a `SAVEPOINT` of the batch instead, so a
/// failing call undoes only its own changes. Changes are announced when
/// the call completes.
pub(crate) struct WriteTxn<'a> {
    pub(crate) inner: &'a Inner,
    w: MutexGuard<'a, Writer>,
    /// The commit window of the view that made the call.
    window: Duration,
    /// The call runs in a savepoint of a batch.
    savepoint: bool,
    pub(crate) changes: Vec<Change>,
    /// The time of this transaction, in ns since the epoch.
    pub(crate) now: i64,
    done: bool,
    /// The open-handle counts, locked from the first look until after commit
    /// so `open_inode` can't slip in between a decision and its commit.
    open_guard: Option<MutexGuard<'a, HashMap<Ino, u32>>>,
    /// Holds the view's fence open until the transaction ends (declared
    /// last: released after the commit or rollback in `drop`).
    fence: Option<crate::fence::FenceGuard<'a>>,
}

impl WriteTxn<'_> {
    pub(crate) fn conn(&self) -> &Connection {
        &self.w.conn
    }

    /// Open handles on `ino`, holding the counts locked until the end of
    /// the transaction (lock order: writer, then counts).
    pub(crate) fn open_count(&mut self, ino: Ino) -> u32 {
        let inner = self.inner;
        let g = self.open_guard.get_or_insert_with(|| inner.open.lock());
        g.get(&ino).copied().unwrap_or(0)
    }

    pub(crate) fn changed_inode(&mut self, ino: Ino) {
        self.changes.push(Change::Inode(ino));
    }

    pub(crate) fn changed_entry(&mut self, parent: Ino, name: &[u8]) {
        self.changes.push(Change::Entry {
            parent,
            name: name.to_vec(),
        });
    }

    /// Completes the call: commits its transaction, or, inside a batch,
    /// releases its savepoint and commits the batch once the window has
    /// passed (at once for a call without a window). Then tells
    /// subscribers what changed.
    pub(crate) fn commit(mut self) -> Result<()> {
        if self.savepoint {
            db::exec_cached(self.conn(), "RELEASE call")?;
            self.done = true;
            let batch = self.w.batch.as_mut().expect("a savepoint lives in a batch");
            batch.calls += 1;
            if self.window.is_zero() || batch.since.elapsed() >= self.window {
                self.inner.end_batch(&mut self.w)?;
            }
        } else {
            db::commit(self.conn())?;
            self.done = true;
        }
        let changes = std::mem::take(&mut self.changes);
        let inner = self.inner;
        drop(self);
        inner.subs.emit(&changes);
        Ok(())
    }
}

impl Drop for WriteTxn<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if !self.savepoint {
            if !self.w.conn.is_autocommit()
                && let Err(e) = self.w.conn.execute_batch("ROLLBACK")
            {
                tracing::error!(error = %e, "rollback failed");
            }
            return;
        }
        if self.w.conn.is_autocommit() {
            // SQLite rolled the whole batch back itself (an I/O error or a
            // full disk): the calls completed in it are lost.
            if let Some(batch) = self.w.batch.take() {
                self.inner.pending.store(false, Ordering::SeqCst);
                if batch.calls > 0 {
                    let cause = Error::from(db::last_error_errno(&self.w.conn));
                    self.inner.record_lost(commit::lost(batch.calls, &cause));
                }
            }
            return;
        }
        if let Err(e) = self.w.conn.execute_batch("ROLLBACK TO call; RELEASE call") {
            tracing::error!(error = %e, "rollback to savepoint failed");
        }
    }
}

impl Inner {
    pub(crate) fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock()
    }

    /// The writer, if had within `wait`.
    pub(crate) fn try_writer(&self, wait: Duration) -> Option<MutexGuard<'_, Writer>> {
        self.writer.try_lock_for(wait)
    }

    /// Starts the transaction of one call made through a view with commit
    /// window `window` (zero: commit when the call completes).
    pub(crate) fn begin(&self, window: Duration) -> Result<WriteTxn<'_>> {
        let mut w = self.writer();
        let savepoint = w.batch.is_some() || !window.is_zero();
        if w.batch.is_none() {
            crate::checkpoints::remap_if_due(self, &mut w)?;
            if window.is_zero() {
                db::exec_cached(&w.conn, "BEGIN IMMEDIATE")?;
            } else {
                let generation = w.open_batch()?;
                self.pending.store(true, Ordering::SeqCst);
                commit::schedule(self.me.clone(), generation, window);
            }
        }
        if savepoint {
            db::exec_cached(&w.conn, "SAVEPOINT call")?;
        }
        Ok(WriteTxn {
            inner: self,
            w,
            window,
            savepoint,
            changes: Vec::new(),
            now: Timespec::now().as_nanos(),
            done: false,
            open_guard: None,
            fence: None,
        })
    }

    /// Commits the open batch of `w`, if any; a failure is recorded for
    /// `fsync` and returned.
    pub(crate) fn end_batch(&self, w: &mut Writer) -> Result<()> {
        let r = w.commit_batch();
        self.pending.store(false, Ordering::SeqCst);
        if let Err(e) = &r {
            self.record_lost(Error::Errno {
                errno: e.errno(),
                context: Some(e.to_string()),
            });
        }
        r
    }

    fn record_lost(&self, e: Error) {
        tracing::error!(error = %e, "completed filesystem calls were lost");
        let mut lost = self.lost.lock();
        lost.get_or_insert(e);
    }

    /// Commits batch `generation` if it is still open (the flusher's call).
    pub(crate) fn flush_generation(&self, generation: u64) {
        let mut w = self.writer();
        if w.batch.is_some_and(|b| b.generation == generation) {
            let _ = self.end_batch(&mut w);
        }
    }

    /// A connection for a read: a pooled reader, or the writer itself while
    /// a batch is open (only the writer sees the batch's changes).
    pub(crate) fn reader(&self) -> Result<ReadConn<'_>> {
        if self.pending.load(Ordering::SeqCst) {
            let w = self.writer();
            if w.batch.is_some() {
                return Ok(ReadConn::writer(w));
            }
        }
        self.readers.get()
    }

    pub(crate) fn limits(&self) -> Limits {
        *self.limits.read()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the filesystem commits what its calls returned.
        let w = self.writer.get_mut();
        if let Err(e) = w.commit_batch() {
            tracing::error!(error = %e, "committing the last batch at close failed");
        }
    }
}

fn einval(context: String) -> Error {
    Error::Errno {
        errno: Errno::EINVAL,
        context: Some(context),
    }
}

/// Writes the meta rows and the root directory into a freshly migrated database.
pub(crate) fn initialize(conn: &Connection, limits: Limits, tuning: Tuning) -> Result<()> {
    let tx = conn.unchecked_transaction()?;
    inode::meta_set(&tx, "chunk_size", i64::from(tuning.chunk_size))?;
    inode::meta_set(&tx, "max_bytes", limits.max_bytes as i64)?;
    inode::meta_set(&tx, "max_inodes", limits.max_inodes as i64)?;
    inode::meta_set(&tx, "used_bytes", 0)?;
    inode::meta_set(&tx, "used_inodes", 1)?;
    inode::meta_set(&tx, "fsync_seq", 0)?;
    let now = Timespec::now().as_nanos();
    let root = inode::insert(
        &tx,
        &NewInode {
            kind: FileKind::Directory,
            perm: 0o755,
            uid: 0,
            gid: 0,
            rdev: 0,
            nlink: 2,
            size: 0,
            parent: ROOT_INO,
        },
        now,
    )?;
    debug_assert_eq!(root, ROOT_INO);
    tx.commit()?;
    Ok(())
}

/// Mode of a database file made by [`Fs::create_with`]: its owner's only.
pub const DB_FILE_MODE: u32 = 0o600;

/// How [`Fs::open_with`] opens a database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Keep the orphans (inodes with no links left, table `orphans`)
    /// instead of freeing them at open. For an open that serves a live
    /// FUSE connection taken over from an earlier process: the kernel may
    /// still hold those files open for processes in the mount, and it
    /// reads and writes them through the new server. Each kept orphan is
    /// freed by [`Fs::release_orphan`] (the server's FORGET for it), or at
    /// the next open without this option.
    pub keep_orphans: bool,
}

impl Fs {
    /// Creates a new database at `db_path` with the default [`Tuning`].
    ///
    /// Errors: `EEXIST` if the file exists; `EIO` for storage failures.
    pub fn create(db_path: &Path, limits: Limits) -> Result<Fs> {
        Fs::create_with(db_path, limits, Tuning::default())
    }

    /// Creates a new database with an explicit storage layout (benchmarks).
    /// The file is readable and writable by its owner only
    /// ([`DB_FILE_MODE`], whatever the umask).
    ///
    /// The database is built under a temporary name and linked into place
    /// without replacing anything, so `db_path` never names a half-made
    /// filesystem. Errors: `EEXIST` if the file exists, `EINVAL` for a bad
    /// [`Tuning`].
    pub fn create_with(db_path: &Path, limits: Limits, tuning: Tuning) -> Result<Fs> {
        let cs = tuning.chunk_size;
        if !cs.is_power_of_two() || !(4096..=1 << 20).contains(&cs) {
            return Err(einval(format!("chunk size {cs}")));
        }
        let ps = tuning.page_size;
        if !ps.is_power_of_two() || !(512..=65536).contains(&ps) {
            return Err(einval(format!("page size {ps}")));
        }
        if db_path.exists() {
            return Err(Errno::EEXIST.into());
        }
        let mut tmp = db_path.as_os_str().to_owned();
        tmp.push(format!(".creating-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let built = (|| -> Result<()> {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(DB_FILE_MODE)
                .open(&tmp)
                .map_err(io_error)?;
            // Sets incremental auto-vacuum before the first page is written.
            let conn = db::open_writer(&tmp, false, Some(ps))?;
            schema::migrate_to(&conn, schema::SCHEMA_VERSION)?;
            initialize(&conn, limits, tuning)?;
            // Closing checkpoints the WAL into the main file and removes it.
            conn.close().map_err(|(_, e)| e)?;
            // SQLite sets an empty database file it opens to its default
            // mode (0644, ignoring the umask); set ours again. The WAL and
            // shared-memory files, made later, copy the database's mode.
            std::fs::File::open(&tmp)
                .and_then(|f| {
                    f.set_permissions(std::fs::Permissions::from_mode(DB_FILE_MODE))?;
                    f.sync_all()
                })
                .map_err(io_error)?;
            std::fs::hard_link(&tmp, db_path).map_err(io_error)?;
            Ok(())
        })();
        let _ = std::fs::remove_file(&tmp);
        built?;
        if let Some(dir) = db_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(io_error)?;
        }
        Fs::open(db_path)
    }

    /// Opens an existing database: locks it for this process (see the
    /// `lock` module: a second process gets `EBUSY`), applies pending
    /// migrations and frees the inodes left unlinked-but-open by a crash.
    /// The same as [`Fs::open_with`] with the default [`OpenOptions`].
    ///
    /// Errors: `ENOENT` if the file is missing; `EBUSY` if another process
    /// has it open; `EINVAL` if it is not an engine database; `ENOTSUP` if
    /// its schema is newer than this build.
    pub fn open(db_path: &Path) -> Result<Fs> {
        Fs::open_with(db_path, OpenOptions::default())
    }

    /// Opens an existing database as [`Fs::open`] does; with
    /// [`OpenOptions::keep_orphans`] the orphans are kept for
    /// [`Fs::release_orphan`] instead of being freed.
    ///
    /// Errors: as [`Fs::open`].
    pub fn open_with(db_path: &Path, options: OpenOptions) -> Result<Fs> {
        if !db_path.exists() {
            return Err(Errno::ENOENT.into());
        }
        let lock = ProcessLock::acquire(db_path)?;
        let mut conn = db::open_writer(db_path, false, None)?;
        let version = schema::version(&conn)?;
        if version == 0 {
            return Err(einval("not a filesystem database".into()));
        }
        if version <= schema::SCHEMA_VERSION
            && schema::auto_vacuum(&conn)? != schema::AUTO_VACUUM_INCREMENTAL
        {
            conn = schema::rebuild_for_auto_vacuum(conn, db_path)?;
        }
        schema::migrate_to(&conn, schema::SCHEMA_VERSION)?;
        let chunk_size = inode::meta_get(&conn, "chunk_size")? as u64;
        let limits = Limits {
            max_bytes: inode::meta_get(&conn, "max_bytes")? as u64,
            max_inodes: inode::meta_get(&conn, "max_inodes")? as u64,
        };
        let kept = if options.keep_orphans {
            let kept = orphans(&conn)?;
            if !kept.is_empty() {
                tracing::info!(
                    count = kept.len(),
                    "kept orphan inodes for a live connection"
                );
            }
            kept.into_iter().collect()
        } else {
            purge_orphans(&conn)?;
            HashSet::new()
        };
        let inner = Arc::new_cyclic(|me| Inner {
            path: db_path.to_path_buf(),
            readers: Readers::new(db_path.to_path_buf()),
            writer: Mutex::new(Writer::new(conn)),
            pending: AtomicBool::new(false),
            lost: Mutex::new(None),
            me: me.clone(),
            limits: RwLock::new(limits),
            chunk_size,
            open: Mutex::new(HashMap::new()),
            kept: Mutex::new(kept),
            subs: Subscribers::default(),
            external_checkpoints: AtomicBool::new(false),
            remap_due: AtomicBool::new(false),
            _lock: lock,
        });
        Ok(Fs {
            inner,
            window: Duration::ZERO,
            fence: None,
        })
    }

    /// Opens the database at `db_path`, creating it if missing. An existing
    /// database gets `limits` too (the caller's configuration wins).
    pub fn open_or_create(db_path: &Path, limits: Limits) -> Result<Fs> {
        Fs::open_or_create_with(db_path, limits, OpenOptions::default())
    }

    /// As [`Fs::open_or_create`], opening an existing database with
    /// `options` (see [`Fs::open_with`]).
    pub fn open_or_create_with(db_path: &Path, limits: Limits, options: OpenOptions) -> Result<Fs> {
        match Fs::create(db_path, limits) {
            Err(e) if e.errno() == Errno::EEXIST => {
                let fs = Fs::open_with(db_path, options)?;
                if fs.limits() != limits {
                    fs.set_limits(limits)?;
                }
                Ok(fs)
            }
            other => other,
        }
    }

    /// The path of the database file.
    pub fn db_path(&self) -> &Path {
        &self.inner.path
    }

    /// Bytes per content chunk of this database.
    pub fn chunk_size(&self) -> u64 {
        self.inner.chunk_size
    }

    /// The quotas in force.
    pub fn limits(&self) -> Limits {
        self.inner.limits()
    }

    /// Changes the quotas. Lowering them below current usage is allowed:
    /// nothing is deleted, further growth fails with `ENOSPC`.
    pub fn set_limits(&self, limits: Limits) -> Result<()> {
        let t = self.begin()?;
        inode::meta_set(t.conn(), "max_bytes", limits.max_bytes as i64)?;
        inode::meta_set(t.conn(), "max_inodes", limits.max_inodes as i64)?;
        // Hold the writer while swapping so no write checks a stale quota.
        let mut l = self.inner.limits.write();
        t.commit()?;
        *l = limits;
        Ok(())
    }

    /// Usage and quota, from the O(1) counters in `meta` (never a scan).
    ///
    /// `used_bytes` counts bytes held in content chunks (holes are free);
    /// blocks are [`STATFS_BLOCK_SIZE`] bytes.
    pub fn statfs(&self) -> Result<StatFs> {
        let r = self.inner.reader()?;
        let (used_bytes, used_inodes) = r.snapshot(|c| {
            Ok((
                inode::meta_get(c, "used_bytes")?.max(0) as u64,
                inode::meta_get(c, "used_inodes")?.max(0) as u64,
            ))
        })?;
        let l = self.limits();
        let bs = u64::from(STATFS_BLOCK_SIZE);
        Ok(StatFs {
            block_size: STATFS_BLOCK_SIZE,
            blocks: l.max_bytes / bs,
            blocks_free: l.max_bytes.saturating_sub(used_bytes) / bs,
            files: l.inode_limit(),
            files_free: l.inode_limit().saturating_sub(used_inodes),
            used_bytes,
            used_inodes,
            name_max: NAME_MAX as u32,
        })
    }

    /// Makes every completed call survive power loss.
    ///
    /// Commits the open batch (see [`Fs::with_commit_window`]), then one
    /// more small transaction with `synchronous = FULL`, which syncs the WAL
    /// file, and with it every earlier frame (SQLite docs, "PRAGMA
    /// synchronous"). `ino` is accepted for symmetry with `fsync(2)`; the
    /// whole database is synced.
    ///
    /// Errors: once after completed calls were lost because their batch
    /// failed to commit, `ENOSPC` if the host disk was full and `EIO`
    /// otherwise (like fsync(2) after a failed writeback); `ENOSPC` or `EIO`
    /// if the sync itself fails.
    pub fn fsync(&self, ino: Option<Ino>) -> Result<()> {
        let _ = ino;
        let mut w = self.inner.writer();
        if let Err(e) = self.inner.end_batch(&mut w) {
            // Reported here: the next fsync must not report it again.
            self.inner.lost.lock().take();
            return Err(e);
        }
        let conn = &w.conn;
        conn.execute_batch("PRAGMA synchronous = FULL")?;
        let r = conn
            .execute_batch(
                "BEGIN IMMEDIATE;
                 UPDATE meta SET value = value + 1 WHERE key = 'fsync_seq';",
            )
            .map_err(Error::from)
            .and_then(|()| db::commit(conn));
        if r.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let restore = conn.execute_batch("PRAGMA synchronous = NORMAL");
        r?;
        restore?;
        drop(w);
        match self.inner.lost.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A view of this filesystem whose mutating calls may return before
    /// their transaction commits: calls within `window` of the first
    /// uncommitted one share one transaction (group commit). The view
    /// shares everything else with `self`; reads through any view see the
    /// changes at once.
    ///
    /// A call that returned through such a view survives a crash of the
    /// process only once its batch committed: after `window` (plus the
    /// length of a running call), at [`Fs::flush`] or [`Fs::fsync`], at any
    /// call through a view without a window, or when the last view is
    /// dropped. `Duration::ZERO` gives back the default: every call commits
    /// before it returns. Meant for the FUSE server, whose kernel client
    /// expects page-cache semantics (data is durable at `fsync`).
    pub fn with_commit_window(&self, window: Duration) -> Fs {
        Fs {
            inner: Arc::clone(&self.inner),
            window,
            fence: self.fence.clone(),
        }
    }

    /// Whether anything else keeps this database open: another clone or
    /// view of this `Fs`, or an open [`crate::Handle`]. An owner about to
    /// drop what it takes for the last clone learns that the engine (and its
    /// database) would stay open, for example behind a lazily detached FUSE
    /// mount still serving processes that hold files.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// The commit window of this view (zero: every call commits).
    pub fn commit_window(&self) -> Duration {
        self.window
    }

    /// Commits the open batch now, so every completed call survives a
    /// process crash. Errors: `ENOSPC` if the host disk is full, `EIO` if
    /// the batch failed to commit otherwise; its calls are lost.
    pub fn flush(&self) -> Result<()> {
        let mut w = self.inner.writer();
        self.inner.end_batch(&mut w)
    }

    /// The transaction of one mutating call through this view.
    pub(crate) fn begin(&self) -> Result<WriteTxn<'_>> {
        // Fence first, then the writer: `Fence::close` never waits while
        // holding the writer, so the order cannot deadlock.
        let guard = match &self.fence {
            Some(fence) => Some(fence.enter()?),
            None => None,
        };
        let mut t = self.inner.begin(self.window)?;
        t.fence = guard;
        Ok(t)
    }

    /// Registers `f`, called after each commit for every inode and entry
    /// the commit changed. Callbacks run on the committing thread: keep them
    /// short and hand off slow work (FUSE invalidation must not run on the
    /// FUSE session thread).
    pub fn subscribe(&self, f: Subscriber) -> SubscriptionId {
        self.inner.subs.add(f)
    }

    /// Removes a subscription made by [`Fs::subscribe`].
    pub fn unsubscribe(&self, id: SubscriptionId) {
        self.inner.subs.remove(id)
    }
}

/// The inodes in the `orphans` table.
fn orphans(conn: &Connection) -> Result<Vec<Ino>> {
    let mut st = conn.prepare("SELECT ino FROM orphans")?;
    let all = st
        .query_map(params![], |r| r.get::<_, i64>(0))?
        .map(|r| r.map(|ino| ino as Ino))
        .collect::<rusqlite::Result<_>>()?;
    Ok(all)
}

/// Frees every orphan: at an ordinary open no handle can exist and no
/// client from before holds one, so all are leftovers of a crash.
fn purge_orphans(conn: &Connection) -> Result<()> {
    let orphans = orphans(conn)?;
    if orphans.is_empty() {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    for ino in &orphans {
        inode::free(&tx, *ino)?;
    }
    tx.commit()?;
    tracing::info!(count = orphans.len(), "purged orphan inodes after a crash");
    Ok(())
}

/// Maps a host I/O error on the database file to an engine error.
pub(crate) fn io_error(e: std::io::Error) -> Error {
    let errno = e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO);
    Error::Errno {
        errno,
        context: Some(e.to_string()),
    }
}
