//! The shipper: ships every committed transaction of one database to the
//! object store, as it commits.
//!
//! It is a task on the caller's Tokio runtime, with two connections to the
//! database of its own (plain SQLite, no engine); each round runs on the
//! runtime's blocking pool, so a node's shippers share the few threads
//! their busy rounds need instead of owning one each (a thread costs its
//! stack and, under mimalloc, a heap of its own: 2.7 MiB resident per
//! shipper, measured in docs/benchmarks.md "Continuous backup"). Each round it pins a read transaction
//! (so no checkpoint can copy frames past what it is about to read into the
//! database file, and the WAL cannot restart under it) and reads the WAL
//! from where it stopped, each frame once, keeping the latest version of
//! each page the new commits wrote. Once the upload interval allows, the
//! transactions read go up as one object at the next position, created
//! with `If-None-Match: *`. A busy writer's WAL is also read between
//! uploads, and checkpointed (PASSIVE, still pinned, so only frames read
//! reach the database file) every quarter of `checkpoint_pages` frames.
//! A writer that never pauses always has a commit past the pin, so at
//! `checkpoint_pages` frames the shipper takes the write lock for a moment
//! (borrowing the engine's writer when it is lent, [`Options::writer_hold`]),
//! reads the last commits and checkpoints them: the writer's next
//! transaction restarts the WAL. Reads stop at the last committed frame
//! the WAL index names, so none chases a writer faster than itself. The engine must leave checkpoints to it
//! ([`agentcomputer_fs::Fs::leave_checkpoints_to_backup`]); a WAL restart
//! the shipper did not allow is still detected (its salts change) and
//! answered with a new snapshot, so nothing is lost, at the cost of one.
//! Commits read and not yet uploaded are only in memory; they are safe
//! there because a shipper that ends without a clean stop leaves no
//! [`Resume`], so the next one starts with a snapshot.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentcomputer_fs::{Truncation, WriterHold};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use rusqlite::{Connection, OpenFlags};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{Error, Result};
use crate::object::{self, Header, Kind};
use crate::tail::{self, Cursor, Pending};
use crate::wal::{self, WalHeader};
use crate::wal_index;

/// How a [`Shipper`] runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often the WAL is looked at for new commits (a `stat` when
    /// nothing changed). Bounds the lag of an idle-then-written database.
    pub poll_interval: Duration,
    /// WAL frames after which the shipper ends the WAL's cycle (the
    /// engine's automatic checkpoint threshold by default: 8192 pages,
    /// 32 MiB): it checkpoints every quarter of this as it reads, and at
    /// this many frames holds the write lock while it reads the commits
    /// since its last read and checkpoints them, so that the writer's next
    /// transaction restarts the WAL.
    pub checkpoint_pages: u64,
    /// Least time between two uploads of a busy database (500 ms): the
    /// commits in between go up as one object. Bounds the requests a
    /// database costs (at most 2 a second, 7,200 an hour) at the price of
    /// lag; a commit after a quiet spell goes up at once, and
    /// [`Shipper::sync`] never waits for it.
    pub min_upload_interval: Duration,
    /// Where an earlier shipper of this database stopped cleanly, if the
    /// database file is unchanged since: the log then continues without a
    /// snapshot when the store's latest position is still that one.
    pub resume: Option<Resume>,
    /// A file beside the database recording the highest position a shipper
    /// of it wrote or was about to write (written before each upload). At
    /// start, a store whose log is past it was extended by another writer
    /// since, so this copy is older than the log: [`Error::Stale`].
    pub position_file: Option<PathBuf>,
    /// The engine's writer, lent to end a WAL cycle
    /// ([`agentcomputer_fs::Fs::writer_hold`]): holding it, the shipper
    /// has SQLite's write lock at once, where without it a writer
    /// committing back to back leaves the lock free only for microseconds
    /// and its WAL grows without bound. `None` races for the lock.
    pub writer_hold: Option<WriterHold>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            poll_interval: Duration::from_millis(10),
            checkpoint_pages: 8192,
            min_upload_interval: Duration::from_millis(500),
            resume: None,
            position_file: None,
            writer_hold: None,
        }
    }
}

/// Where a clean stop left a database's log ([`Shipper::stop`]): the
/// position it reached and that object's digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// The last position written.
    pub position: u64,
    /// The trailer digest of the object at `position`.
    pub digest: [u8; 32],
}

/// Where a shipper's log stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// The last position written (an object `<prefix>/log/<position>`).
    pub position: u64,
    /// Transactions shipped by this shipper since its snapshot (which is 0).
    pub txn: u64,
    /// Snapshots this shipper wrote (1 unless a WAL restart it did not
    /// allow forced another; 0 when it resumed the log).
    pub snapshots: u64,
    /// The digest of the object at `position` (what a later shipper needs
    /// to resume after a clean stop, [`Resume`]).
    pub digest: [u8; 32],
    /// Objects this shipper uploaded.
    pub uploads: u64,
    /// Bytes of the objects this shipper uploaded.
    pub uploaded_bytes: u64,
    /// Rounds that failed (and were retried), since start.
    pub failed_rounds: u64,
    /// When the latest object went up (wall clock), if one did.
    pub shipped_at: Option<SystemTime>,
    /// Since when commits have been waiting to be shipped (the first round
    /// that saw them, within the poll interval of their commit); `None`
    /// when everything committed is in the store. Now minus this is the
    /// backup's lag.
    pub unshipped_since: Option<std::time::Instant>,
}

enum Cmd {
    Sync(oneshot::Sender<Result<Position>>),
    Stop(oneshot::Sender<Result<Position>>),
    /// Something committed: look now rather than at the next poll.
    Wake,
}

/// The commands' sending side, shared with [`Wake`] handles; emptied when
/// the shipper is dropped or stopped, which ends its task.
type Commands = Arc<Mutex<Option<mpsc::UnboundedSender<Cmd>>>>;

/// Tells a running shipper that its database committed, so it ships
/// without waiting for its next poll ([`Shipper::wake_handle`]). Cheap and
/// safe to call from any thread, as often as commits happen: wakes that
/// arrive while one is pending are merged. Does nothing once the shipper
/// is gone.
#[derive(Clone)]
pub struct Wake {
    cmds: Commands,
    pending: Arc<std::sync::atomic::AtomicBool>,
}

impl Wake {
    /// Asks the shipper for a round now (merged with one already asked).
    pub fn wake(&self) {
        use std::sync::atomic::Ordering;
        if !self.pending.swap(true, Ordering::AcqRel)
            && let Some(tx) = self.cmds.lock().unwrap().as_ref()
        {
            let _ = tx.send(Cmd::Wake);
        }
    }
}

/// A running shipper of one database. Dropping it stops it after the
/// round under way, without a last one and without waiting.
pub struct Shipper {
    cmds: Commands,
    wake_pending: Arc<std::sync::atomic::AtomicBool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shipped: watch::Receiver<Position>,
    written: Arc<Mutex<Vec<u64>>>,
    stopped: Arc<Mutex<Option<String>>>,
}

impl Shipper {
    /// Starts shipping the database at `db_path` (in WAL mode) under
    /// `prefix`: writes a snapshot at the position after the latest one
    /// in the store (or, with [`Options::resume`] matching the store's
    /// latest position and digest, continues the log without one), then
    /// ships each commit. Must be called within a multi-thread Tokio
    /// runtime, whose I/O drives the uploads.
    ///
    /// Errors: [`Error::Stale`] if the store's log is past what this
    /// database's shippers wrote ([`Options::position_file`],
    /// [`Options::resume`]); [`Error::Fenced`] if another shipper took the
    /// next position first; [`Error::Database`] if the database is not in
    /// WAL mode; store errors as they come.
    pub async fn start(
        db_path: &FsPath,
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        options: Options,
    ) -> Result<Shipper> {
        let rt = Handle::current();
        if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            // Rounds wait on blocking threads for uploads this runtime's I/O
            // drives, which a single-threaded runtime does only while it is
            // polled.
            return Err(Error::Unsupported(
                "a backup shipper needs a multi-thread Tokio runtime".into(),
            ));
        }
        let db_path = db_path.to_path_buf();
        let (cmds, rx) = mpsc::unbounded_channel();
        let wake_pending = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (shipped_tx, shipped) = watch::channel(Position::default());
        let written = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(Mutex::new(None));
        let w = written.clone();
        let mut state = tokio::task::spawn_blocking(move || {
            State::start(db_path, store, prefix, options, rt, shipped_tx, w)
        })
        .await
        .map_err(|e| Error::Stopped(format!("the shipper ended while starting: {e}")))??;
        state.stopped_shared = stopped.clone();
        state.wake_pending = wake_pending.clone();
        Ok(Shipper {
            cmds: Arc::new(Mutex::new(Some(cmds))),
            wake_pending,
            task: Mutex::new(Some(tokio::spawn(drive(state, rx)))),
            shipped,
            written,
            stopped,
        })
    }

    /// Returns once every transaction committed before the call is in the
    /// store, with the position reached. Errors: the round's error; after
    /// [`Error::Fenced`] or another fatal error, [`Error::Stopped`] naming it.
    pub async fn sync(&self) -> Result<Position> {
        let (tx, rx) = oneshot::channel();
        self.send(Cmd::Sync(tx))?;
        rx.await
            .map_err(|_| Error::Stopped("the shipper ended".into()))?
    }

    /// Ships what is committed and stops; later calls return
    /// [`Error::Stopped`]. Errors: as [`Shipper::sync`].
    pub async fn stop(&self) -> Result<Position> {
        let (tx, rx) = oneshot::channel();
        let r = match self.send(Cmd::Stop(tx)) {
            Ok(()) => rx
                .await
                .map_err(|_| Error::Stopped("the shipper ended".into()))?,
            Err(e) => Err(e),
        };
        // No more wakes; the task returns right after its reply.
        drop(self.cmds.lock().unwrap().take());
        let task = self.task.lock().unwrap().take();
        if let Some(t) = task {
            let _ = t.await;
        }
        r
    }

    fn send(&self, cmd: Cmd) -> Result<()> {
        self.cmds
            .lock()
            .unwrap()
            .as_ref()
            .ok_or_else(|| Error::Stopped("the shipper was stopped".into()))?
            .send(cmd)
            .map_err(|_| Error::Stopped("the shipper ended".into()))
    }

    /// A handle that makes the shipper look at its database now, for a
    /// commit hook of the database's writer (the node agent subscribes it
    /// to the engine's change notifications, so the shipper's polls can be
    /// rare: [`Options::poll_interval`]).
    pub fn wake_handle(&self) -> Wake {
        Wake {
            cmds: self.cmds.clone(),
            pending: self.wake_pending.clone(),
        }
    }

    /// The position reached, updated after each upload (to measure lag).
    pub fn shipped(&self) -> watch::Receiver<Position> {
        self.shipped.clone()
    }

    /// Why the shipper stopped by itself (fenced by another writer, its
    /// database unreadable), once it did; `None` while it runs.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.lock().unwrap().clone()
    }

    /// Every position this shipper wrote, in order.
    pub fn positions_written(&self) -> Vec<u64> {
        self.written.lock().unwrap().clone()
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        // Closing the channel ends the task after its current round; it is
        // not awaited, so dropping never blocks.
        drop(self.cmds.lock().unwrap().take());
        drop(self.task.get_mut().unwrap().take());
    }
}

/// The shipper's state, moved to a blocking thread for each round.
struct State {
    db_path: PathBuf,
    wal_path: PathBuf,
    /// The WAL index (`-shm`), which says how many frames are committed.
    shm_path: PathBuf,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    options: Options,
    rt: Handle,
    /// Holds the pinning read transaction of each round.
    reader: Connection,
    /// Runs the checkpoints, while `reader` pins.
    checkpointer: Connection,
    page_size: u32,
    /// Salts of the WAL cycle being read, `None` before a WAL existed.
    salt: Option<(u32, u32)>,
    /// The end of the last commit read from the WAL: reading goes on from
    /// there.
    cursor: Cursor,
    /// Committed transactions read and not yet uploaded.
    pending: Pending,
    /// Scratch space for reading the WAL, kept between reads.
    read_buf: Vec<u8>,
    /// Frames of this cycle the last checkpoint left in the database file.
    backfilled: u64,
    /// The last checkpoint copied every frame there was. Until the next
    /// commit a read transaction then takes no WAL read mark (SQLite reads
    /// such a database from its file alone), so a pin holds no checkpoint
    /// back: no checkpoint runs pinned until a read found a new commit.
    pin_unsure: bool,
    /// Frames of this cycle when the shipper last tried to end it.
    restart_tried: u64,
    /// The shipper checkpointed every frame of the cycle, all read, so the
    /// next writer may restart the WAL.
    restart_allowed: bool,
    /// When the WAL was last read, and when to read it next while commits
    /// wait for the upload interval ([`State::schedule_read`]).
    last_read: Instant,
    next_read: Instant,
    read_gap: Duration,
    /// A writer filled a checkpoint step between two reads: the WAL index
    /// is looked at every [`MIN_READ_GAP`] and the WAL read once a step
    /// of frames is committed, until a look finds nothing new.
    busy: bool,
    at: Position,
    prev_digest: [u8; 32],
    /// `PRAGMA data_version` at the last round, to skip unchanged polls.
    seen: Option<i64>,
    /// The WAL index header read just before the last round looked for
    /// commits: a timed round finding it unchanged, with nothing waiting,
    /// is skipped without leaving the runtime ([`State::idle_poll`]).
    index_seen: Option<[u8; 48]>,
    /// When a round last found a commit.
    last_change: Instant,
    /// A read found frames since the WAL file was last found small: once
    /// the database is idle, the file is truncated if it grew past the
    /// engine's limit ([`State::truncate_idle_wal`]).
    truncate_due: bool,
    /// No truncation is tried before this: a reader that held one up is
    /// given twice as long each time, up to [`TRUNCATE_BACKOFF_MAX`].
    truncate_after: Instant,
    truncate_backoff: Duration,
    shipped: watch::Sender<Position>,
    written: Arc<Mutex<Vec<u64>>>,
    /// Why the shipper stopped, once it did.
    failed: Option<String>,
    /// This shipper's random id, in every object it writes.
    writer: u64,
    /// An upload whose outcome is unknown, retried first.
    unconfirmed: Option<Unconfirmed>,
    /// When the last object went up ([`Options::min_upload_interval`]).
    last_upload: std::time::Instant,
    /// [`Shipper::stopped`]'s answer, set with `failed`.
    stopped_shared: Arc<Mutex<Option<String>>>,
    /// Set by a [`Wake`] until a round takes its wake.
    wake_pending: Arc<std::sync::atomic::AtomicBool>,
}

/// The state an uploaded object moves the shipper to.
struct Advance {
    position: u64,
    txn: u64,
    digest: [u8; 32],
    /// For a snapshot: where reading the WAL goes on after it.
    snapshot: Option<SnapshotEnd>,
}

/// The WAL as a snapshot read it: the page size, the cycle and the end of
/// its last commit (`None` without a WAL).
struct SnapshotEnd {
    page_size: u32,
    cycle: Option<((u32, u32), Cursor)>,
}

/// An upload that failed with a store error: it may have landed.
struct Unconfirmed {
    bytes: Bytes,
    advance: Advance,
}

/// How long the shipper's connections wait for a lock held by another.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Least time between two reads of a busy WAL within the upload interval.
const MIN_READ_GAP: Duration = Duration::from_millis(10);
/// Tries for the write lock when ending a WAL cycle, [`LOCK_WAIT`] apart
/// (about 30 ms in all): a writer between two transactions leaves it free
/// for a moment, which a retry soon catches.
const LOCK_TRIES: i32 = 200;
/// Sleep between two tries for the write lock.
const LOCK_WAIT: Duration = Duration::from_micros(100);
/// How long a database goes without a commit before the shipper
/// truncates its WAL file ([`State::truncate_idle_wal`]).
const IDLE_BEFORE_TRUNCATE: Duration = Duration::from_secs(1);
/// Longest time between two tries to truncate an idle WAL that readers
/// held up.
const TRUNCATE_BACKOFF_MAX: Duration = Duration::from_secs(64);
/// Longest wait for readers in a transaction when truncating an idle WAL.
const TRUNCATE_READERS_WAIT: Duration = Duration::from_millis(20);
/// Longest wait for the engine's writer when it is lent
/// ([`Options::writer_hold`]): one call's transaction, a large write's
/// included.
const HOLD_WAIT: Duration = Duration::from_secs(1);

/// A shipper's task: waits for a command or for [`State::next_wait`],
/// then serves it on the blocking pool. Ends at a stop, when every sender
/// is gone, or if a round panicked; the state (and so its connections) is
/// dropped on the blocking thread, since closing the last connection to a
/// database may checkpoint it.
async fn drive(state: State, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let mut state = Some(state);
    while let Some(mut s) = state.take() {
        let cmd = match tokio::time::timeout(s.next_wait(), rx.recv()).await {
            Ok(Some(c)) => Some(c),
            Ok(None) => {
                let _ = tokio::task::spawn_blocking(move || drop(s)).await;
                return;
            }
            Err(_) if s.idle_poll() => {
                state = Some(s);
                continue;
            }
            Err(_) => None,
        };
        state = tokio::task::spawn_blocking(move || s.serve(cmd).then_some(s))
            .await
            .ok()
            .flatten();
    }
}

/// The busy handler while the shipper takes the write lock.
fn wait_for_lock(tries: i32) -> bool {
    if tries >= LOCK_TRIES {
        return false;
    }
    std::thread::sleep(LOCK_WAIT);
    true
}

fn db_error(path: &FsPath, reason: impl Into<String>) -> Error {
    Error::Database {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The WAL's header, or `None` if there is no WAL or no valid header yet.
fn read_wal_header(path: &FsPath) -> Result<Option<WalHeader>> {
    let head = read_wal_range(path, 0, wal::HEADER_BYTES as usize)?;
    Ok(wal::parse_header(&head))
}

/// Up to `max` bytes of the WAL from `from` on (fewer at its end; none if
/// there is no WAL).
fn read_wal_range(path: &FsPath, from: u64, max: usize) -> Result<Vec<u8>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The database size in pages its header records, if valid, else from its length.
fn db_pages_from_file(db: &[u8], page_size: u32) -> u32 {
    if db.len() >= 100 && db[92..96] == db[24..28] {
        let n = u32::from_be_bytes(db[28..32].try_into().unwrap());
        if n > 0 {
            return n;
        }
    }
    (db.len() as u64 / page_size as u64) as u32
}

impl State {
    fn start(
        db_path: PathBuf,
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        options: Options,
        rt: Handle,
        shipped: watch::Sender<Position>,
        written: Arc<Mutex<Vec<u64>>>,
    ) -> Result<State> {
        let open = || -> Result<Connection> {
            let c = Connection::open_with_flags(
                &db_path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            c.busy_timeout(BUSY_TIMEOUT)?;
            c.execute_batch("PRAGMA wal_autocheckpoint = 0")?;
            Ok(c)
        };
        let reader = open()?;
        let mode: String = reader.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(db_error(
                &db_path,
                format!("journal mode is {mode}, not wal"),
            ));
        }
        let checkpointer = open()?;
        let head = {
            let dir = object::log_dir(&prefix);
            let metas: Vec<_> = rt.block_on(store.list(Some(&dir)).try_collect::<Vec<_>>())?;
            metas
                .iter()
                .filter_map(|m| object::position_of(&m.location))
                .max()
                .unwrap_or(0)
        };
        let mut wal_path = db_path.clone().into_os_string();
        wal_path.push("-wal");
        let mut shm_path = db_path.clone().into_os_string();
        shm_path.push("-shm");
        let mut s = State {
            wal_path: wal_path.into(),
            shm_path: shm_path.into(),
            db_path,
            store,
            prefix,
            options,
            rt,
            reader,
            checkpointer,
            page_size: 0,
            salt: None,
            cursor: Cursor {
                offset: wal::HEADER_BYTES,
                checksum: (0, 0),
            },
            pending: Pending::new(0),
            read_buf: Vec::new(),
            backfilled: 0,
            pin_unsure: true,
            restart_tried: 0,
            restart_allowed: false,
            last_read: Instant::now(),
            next_read: Instant::now(),
            read_gap: Duration::ZERO,
            busy: false,
            at: Position {
                position: head,
                txn: 0,
                snapshots: 0,
                digest: [0; 32],
                uploads: 0,
                uploaded_bytes: 0,
                failed_rounds: 0,
                shipped_at: None,
                unshipped_since: None,
            },
            prev_digest: [0; 32],
            seen: None,
            index_seen: None,
            last_change: Instant::now(),
            truncate_due: false,
            truncate_after: Instant::now(),
            truncate_backoff: IDLE_BEFORE_TRUNCATE,
            shipped,
            written,
            failed: None,
            writer: rand::random(),
            unconfirmed: None,
            last_upload: std::time::Instant::now(),
            stopped_shared: Arc::default(),
            wake_pending: Arc::default(),
        };
        let known = [
            s.options.resume.map(|r| r.position),
            s.options
                .position_file
                .as_deref()
                .and_then(read_position_file),
        ]
        .into_iter()
        .flatten()
        .max();
        if let Some(known) = known
            && head > known
        {
            return Err(Error::Stale { store: head, known });
        }
        // The store's latest object is at the position this copy last
        // tried to write: it is this copy's only if it is the object this
        // copy was about to write (another shipper may have taken the
        // position, fencing this one, and this copy never shipped its
        // commits there).
        if let Some((noted, Some(ours))) = s
            .options
            .position_file
            .as_deref()
            .and_then(read_position_record)
            && noted == head
            && head > 0
            && s.options.resume.is_none_or(|r| r.position < head)
        {
            let key = object::key(&s.prefix, head);
            let last = s.rt.block_on(async {
                let meta = s.store.head(&key).await?;
                let from = meta.size.saturating_sub(32);
                s.store.get_range(&key, from..meta.size).await
            })?;
            if last.as_ref() != ours {
                return Err(Error::Stale {
                    store: head,
                    known: head - 1,
                });
            }
        }
        let resumed = match s.options.resume {
            Some(r) if r.position == head && head > 0 => {
                let key = object::key(&s.prefix, head);
                let last = s.rt.block_on(async {
                    let meta = s.store.head(&key).await?;
                    let from = meta.size.saturating_sub(32);
                    s.store.get_range(&key, from..meta.size).await
                })?;
                last.as_ref() == r.digest
            }
            _ => false,
        };
        if resumed {
            s.prev_digest = s.options.resume.unwrap().digest;
            s.at.digest = s.prev_digest;
            s.pinned(|s| s.resume_cycle())?;
            s.published();
        } else {
            s.pinned(|s| s.snapshot())?;
        }
        Ok(s)
    }

    /// How long to wait for a command before a round of its own:
    /// commits held back by the upload interval go up when it ends,
    /// whether or not anything wakes the shipper before; a busy writer's
    /// WAL is read (and checkpointed) in between.
    fn next_wait(&self) -> Duration {
        match self.at.unshipped_since {
            Some(_) => self
                .options
                .min_upload_interval
                .saturating_sub(self.last_upload.elapsed())
                .min(self.next_read.saturating_duration_since(Instant::now()))
                .min(if self.busy {
                    MIN_READ_GAP
                } else {
                    Duration::MAX
                })
                .clamp(Duration::from_millis(1), self.options.poll_interval),
            None => self.options.poll_interval,
        }
    }

    /// A timed round would find nothing to do: nothing read waits for an
    /// upload, no upload is unconfirmed, the writer is not busy, and the
    /// WAL index header (one small read of the `-shm` file) is as the last
    /// round saw it. Lets an idle shipper's poll stay on the runtime
    /// instead of taking a blocking thread for a `PRAGMA data_version`.
    fn idle_poll(&self) -> bool {
        self.failed.is_none()
            && self.unconfirmed.is_none()
            && self.at.unshipped_since.is_none()
            && self.pending.txns == 0
            && !self.busy
            && !(self.truncate_due && Instant::now() >= self.truncate_after)
            && self.index_seen.is_some()
            && wal_index::header(&self.shm_path) == self.index_seen
    }

    /// Serves `cmd`, or a timed round without one; blocking (SQLite, the
    /// WAL, uploads through [`State::rt`]). Returns false once stopped.
    fn serve(&mut self, cmd: Option<Cmd>) -> bool {
        let force = matches!(cmd, Some(Cmd::Sync(_) | Cmd::Stop(_)));
        // Wakes are taken again only when this round may upload: within
        // the upload interval a busy database's commits would otherwise
        // wake the shipper once each, for nothing (the timed wait ships
        // them when the interval ends).
        if force || self.last_upload.elapsed() >= self.options.min_upload_interval {
            self.wake_pending
                .store(false, std::sync::atomic::Ordering::Release);
        }
        let result = match &self.failed {
            Some(why) => Err(Error::Stopped(why.clone())),
            None => {
                let r = self.round(force);
                if let Err(e) = &r {
                    if matches!(e, Error::Fenced { .. } | Error::Database { .. }) {
                        tracing::error!(db = %self.db_path.display(), "backup stopped: {e}");
                        self.failed = Some(e.to_string());
                        *self.stopped_shared.lock().unwrap() = Some(e.to_string());
                    } else {
                        tracing::warn!(db = %self.db_path.display(), "backup round failed, retrying: {e}");
                    }
                    self.at.failed_rounds += 1;
                    self.published();
                }
                r
            }
        };
        match cmd {
            Some(Cmd::Sync(reply)) => {
                let _ = reply.send(result);
                true
            }
            Some(Cmd::Stop(reply)) => {
                let _ = reply.send(result);
                false
            }
            Some(Cmd::Wake) | None => true,
        }
    }

    /// Runs `f` inside a pinned read transaction.
    fn pinned<T>(&mut self, f: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        self.reader.prepare_cached("BEGIN")?.execute([])?;
        let pin = self
            .reader
            .prepare_cached("SELECT count(*) FROM sqlite_master")
            .and_then(|mut st| st.query_row([], |_| Ok(())));
        let r = match pin {
            Ok(()) => f(self),
            Err(e) => Err(e.into()),
        };
        let end = self
            .reader
            .prepare_cached("COMMIT")
            .and_then(|mut st| st.execute([]));
        let v = r?;
        end?;
        Ok(v)
    }

    /// One round: reads new commits, unless no other connection committed
    /// since the last round (`PRAGMA data_version`, read from the shared
    /// WAL index without I/O), and uploads what was read once the upload
    /// interval allows; within the interval a busy writer's commits are
    /// read when [`State::schedule_read`] says, so its WAL is checkpointed
    /// and restarted on time. `force` reads and uploads at once.
    fn round(&mut self, force: bool) -> Result<Position> {
        // Before the version: a commit after this read changes the header.
        self.index_seen = wal_index::header(&self.shm_path);
        let version: i64 = self
            .reader
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        self.confirm()?;
        let changed = self.seen != Some(version);
        if changed {
            self.last_change = Instant::now();
        }
        if changed && self.at.unshipped_since.is_none() {
            self.at.unshipped_since = Some(Instant::now());
            self.published();
        }
        let upload = force || self.last_upload.elapsed() >= self.options.min_upload_interval;
        let now = Instant::now();
        let due = changed && self.busy && self.step_due();
        let read = force || (changed && (upload || now >= self.next_read)) || due;
        if !changed {
            self.busy = false;
        }
        if read {
            let frames = self.pinned(|s| s.read(upload))?;
            self.truncate_due |= frames > 0;
            self.busy = frames >= self.checkpoint_step() || (self.busy && frames > 0);
            // Read before the pin: a commit after it changes the version again.
            self.seen = Some(version);
            self.schedule_read(frames);
            self.restart_if_due()?;
        } else {
            if now >= self.next_read {
                // Nothing new since the last read: look again a gap later.
                self.next_read = now + self.read_gap;
            }
            if upload && self.pending.txns > 0 {
                self.ship()?;
            }
            if self.truncate_due
                && self.last_change.elapsed() >= IDLE_BEFORE_TRUNCATE
                && Instant::now() >= self.truncate_after
            {
                self.truncate_idle_wal();
            }
        }
        if self.pending.txns == 0 && self.seen == Some(version) && self.at.unshipped_since.is_some()
        {
            self.at.unshipped_since = None;
            self.published();
            // Everything is in the store: a node's many idle shippers keep
            // no buffers of a busy spell.
            self.read_buf = Vec::new();
            self.pending.release_spare();
        }
        Ok(self.at)
    }

    /// Sets when to read next while commits wait for the upload interval,
    /// after a read that found `frames`: when about a checkpoint step more
    /// frames are due at the rate it saw (a writer committing as fast as it
    /// can fills a step in tens of milliseconds), at least
    /// [`MIN_READ_GAP`] apart; a writer that fills no step within the
    /// upload interval is read only when its commits go up.
    fn schedule_read(&mut self, frames: u64) {
        let now = Instant::now();
        let since = now.duration_since(self.last_read);
        self.last_read = now;
        let most = self.options.min_upload_interval.max(MIN_READ_GAP);
        if frames > 0 {
            self.read_gap = since
                .mul_f64(self.checkpoint_step() as f64 / frames as f64)
                .clamp(MIN_READ_GAP, most);
        } else if self.read_gap.is_zero() {
            self.read_gap = most;
        }
        // A read that found nothing (the writer's commit went to a cycle
        // about to begin) says nothing of its pace: the gap stays.
        self.next_read = now + self.read_gap;
    }

    /// Frames between two checkpoints of a busy WAL: a quarter of
    /// [`Options::checkpoint_pages`], so the WAL a writer looks pages up
    /// in stays short between restarts.
    fn checkpoint_step(&self) -> u64 {
        (self.options.checkpoint_pages / 4).max(1)
    }

    /// Bytes of one WAL frame.
    fn frame_bytes(&self) -> u64 {
        wal::FRAME_HEADER_BYTES + self.page_size as u64
    }

    /// Frames of the current cycle read so far.
    fn cycle_frames(&self) -> u64 {
        (self.cursor.offset - wal::HEADER_BYTES) / self.frame_bytes()
    }

    /// Frames of cycle `h` committed, as the WAL index says (`None` if it
    /// cannot tell: then the frames themselves are checked to their end).
    fn committed_frames(&self, h: &WalHeader) -> Option<u64> {
        let mut salt = [0u8; 8];
        salt[..4].copy_from_slice(&h.salt.0.to_be_bytes());
        salt[4..].copy_from_slice(&h.salt.1.to_be_bytes());
        wal_index::committed_frames(&self.shm_path, salt)
    }

    /// Whether a checkpoint step of frames was committed since the last
    /// read, by the WAL index (a few bytes read, no frame).
    fn step_due(&self) -> bool {
        let Some(salt) = self.salt else {
            return false;
        };
        let h = WalHeader {
            big_endian: false,
            page_size: self.page_size,
            salt,
            checksum: (0, 0),
        };
        self.committed_frames(&h)
            .is_some_and(|n| n >= self.cycle_frames() + self.checkpoint_step())
    }

    /// Reads the commits after the cursor into `pending`, uploads them if
    /// `upload`, and checkpoints when a step of frames read is not yet in
    /// the database file (after the upload, which the lag waits for);
    /// pinned, so the checkpoint copies no frame past the pin, all read.
    /// Returns the frames read.
    fn read(&mut self, upload: bool) -> Result<u64> {
        let unsure = self.pin_unsure;
        let cycle = self.cycle()?;
        let frames = match &cycle {
            Some(h) => self.read_cycle(h)?,
            None => 0,
        };
        if upload && self.pending.txns > 0 {
            self.ship()?;
        }
        if cycle.is_some()
            && !unsure
            && self.cycle_frames() >= self.backfilled + self.checkpoint_step()
        {
            self.checkpoint()?;
        }
        Ok(frames)
    }

    /// The header of the WAL cycle to read: the same one, or the next
    /// after a restart the shipper allowed. A restart it did not allow is
    /// answered with a snapshot (which holds everything committed), and
    /// `None` returned, as when there is nothing to read.
    fn cycle(&mut self) -> Result<Option<WalHeader>> {
        let Some(h) = read_wal_header(&self.wal_path)? else {
            // No WAL content: nothing new, unless a cycle we were reading
            // vanished without our checkpoint.
            if self.salt.is_some() && !self.restart_allowed {
                self.resnapshot("the WAL was emptied by a checkpoint the shipper did not run")?;
            }
            return Ok(None);
        };
        if h.page_size != self.page_size {
            return Err(db_error(
                &self.db_path,
                format!(
                    "page size changed from {} to {}",
                    self.page_size, h.page_size
                ),
            ));
        }
        match self.salt {
            Some(salt) if salt == h.salt => {}
            None => self.begin_cycle(&h),
            Some((s1, _)) if self.restart_allowed && h.salt.0 == s1.wrapping_add(1) => {
                self.begin_cycle(&h)
            }
            Some(_) => {
                self.resnapshot("the WAL restarted after a checkpoint the shipper did not run")?;
                return Ok(None);
            }
        }
        Ok(Some(h))
    }

    /// Reads the commits of cycle `h` after the cursor into `pending`;
    /// returns their frames.
    fn read_cycle(&mut self, h: &WalHeader) -> Result<u64> {
        let file = match std::fs::File::open(&self.wal_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let bound = self.committed_frames(h).map_or(tail::Bound::Unknown, |n| {
            tail::Bound::Committed(wal::HEADER_BYTES + n * self.frame_bytes())
        });
        let frames = tail::read_commits(
            &file,
            h,
            &mut self.cursor,
            &mut self.pending,
            &mut self.read_buf,
            bound,
        )?;
        if frames > 0 {
            // The cycle now holds frames no checkpoint covered, and a
            // commit came after the last checkpoint, so pins hold again.
            self.restart_allowed = false;
            self.pin_unsure = false;
        }
        Ok(frames)
    }

    /// Checkpoints (PASSIVE, from the second connection) while reading is
    /// pinned or the write lock held, so every frame it copies was read.
    fn checkpoint(&mut self) -> Result<()> {
        let (busy, log, done): (i64, i64, i64) = self
            .checkpointer
            .prepare_cached("PRAGMA wal_checkpoint(PASSIVE)")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        self.backfilled = done.max(0) as u64;
        if done > 0
            && let Some(hold) = &self.options.writer_hold
        {
            // The database file may have grown behind the writer's map.
            hold.checkpointed();
        }
        let complete = busy == 0 && log == done;
        self.pin_unsure = complete;
        // A restart (salt-1 plus one) is expected only once every frame of
        // the cycle, all read, reached the database file; a partial
        // checkpoint is completed later.
        self.restart_allowed = complete && log as u64 == self.cycle_frames();
        Ok(())
    }

    /// Ends the WAL cycle once it holds [`Options::checkpoint_pages`]
    /// frames: a writer that never pauses always has a commit past the
    /// pin, so no pinned checkpoint completes and its WAL would grow
    /// without end. The shipper takes the write lock (`BEGIN IMMEDIATE`,
    /// between two of the writer's transactions), reads the last commits
    /// and checkpoints them; the writer's next transaction restarts the
    /// WAL. The writer waits for that read and the checkpoint's two fsyncs
    /// (the WAL's bulk is synced before the lock): a few milliseconds, and
    /// tens under a writer committing back to back, whose lock the
    /// shipper seldom catches free. If the lock is not had within
    /// [`LOCK_TRIES`], the next step of frames tries again.
    fn restart_if_due(&mut self) -> Result<()> {
        let frames = self.cycle_frames();
        if self.salt.is_none()
            || self.restart_allowed
            || frames < self.options.checkpoint_pages
            || frames < self.restart_tried + self.checkpoint_step()
        {
            return Ok(());
        }
        self.restart_tried = frames;
        std::fs::File::open(&self.wal_path)?.sync_data()?;
        if let Some(hold) = self.options.writer_hold.clone() {
            // When less than a step came since the last read, read and
            // copy it first (pinned, as a round does, beside the writer),
            // so that under the writer only the commits since are read
            // and checkpointed. A larger backlog is read under the writer:
            // beside a writer that appends faster than the shipper reads
            // and checkpoints, the backlog, and the WAL, would grow.
            let unread = match read_wal_header(&self.wal_path)? {
                Some(h) if Some(h.salt) == self.salt => self
                    .committed_frames(&h)
                    .map_or(u64::MAX, |n| n.saturating_sub(self.cycle_frames())),
                _ => u64::MAX,
            };
            if unread < self.checkpoint_step() {
                let unsure = self.pin_unsure;
                self.pinned(|s| {
                    s.read(false)?;
                    if unsure { Ok(()) } else { s.checkpoint() }
                })?;
            }
            return match hold.run(HOLD_WAIT, || self.locked(|s| s.read_locked())) {
                Ok(Some(r)) => r,
                // Closed, or its writer busy for long: the next step retries.
                Ok(None) => Ok(()),
                // The engine's open batch failed to commit (its callers
                // hear of it); the cycle ends at a later step.
                Err(e) => {
                    tracing::warn!(db = %self.db_path.display(), error = %e, "ending a WAL cycle waits: the engine's open batch did not commit");
                    Ok(())
                }
            };
        }
        self.locked(|s| s.read_locked())
    }

    /// Runs `f` holding SQLite's write lock (`BEGIN IMMEDIATE`), tried for
    /// [`LOCK_TRIES`]; does nothing when the lock was not had.
    fn locked(&mut self, f: impl FnOnce(&mut State) -> Result<()>) -> Result<()> {
        self.reader.busy_handler(Some(wait_for_lock))?;
        let locked = self.reader.execute_batch("BEGIN IMMEDIATE");
        self.reader.busy_timeout(BUSY_TIMEOUT)?;
        match locked {
            Ok(()) => {}
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy =>
            {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        let r = f(self);
        let end = self.reader.execute_batch("COMMIT");
        r?;
        end?;
        Ok(())
    }

    /// Reads the cycle to its end and checkpoints it, with the write lock
    /// held: no commit can land, so the checkpoint copies exactly what was
    /// read. A changed WAL is left to the next round.
    fn read_locked(&mut self) -> Result<()> {
        let Some(h) = read_wal_header(&self.wal_path)? else {
            return Ok(());
        };
        if Some(h.salt) != self.salt || h.page_size != self.page_size {
            return Ok(());
        }
        self.read_cycle(&h)?;
        self.checkpoint()
    }

    /// Truncates the WAL file of a database idle for
    /// [`IDLE_BEFORE_TRUNCATE`] when it is larger than the engine's limit
    /// ([`agentcomputer_fs::WAL_SIZE_LIMIT`]). The engine leaves the file
    /// at its largest while a backup runs (`journal_size_limit` off), since
    /// truncating it at a WAL restart made the writer wait for the
    /// `ftruncate(2)`: 12 ms for 60 MiB. Here the engine's writer runs a
    /// TRUNCATE checkpoint once the WAL index is as this round saw it (so
    /// every frame was read: [`WriterHold::truncate_wal`]); the next
    /// writer starts the next cycle with salt-1 plus one, which the
    /// shipper expects. Readers in a transaction are waited for
    /// [`TRUNCATE_READERS_WAIT`]; then a later idle round tries again.
    /// Without a lent writer the file is left as it is until the database
    /// closes.
    fn truncate_idle_wal(&mut self) {
        let Some(hold) = self.options.writer_hold.clone() else {
            self.truncate_due = false;
            return;
        };
        let len = std::fs::metadata(&self.wal_path).map_or(0, |m| m.len());
        if len <= agentcomputer_fs::WAL_SIZE_LIMIT {
            self.truncate_due = false;
            return;
        }
        let (seen, shm) = (self.index_seen, self.shm_path.clone());
        // No commit since this round looked: every frame was read. An
        // index that could not be read proves nothing.
        let unchanged = || seen.is_some() && wal_index::header(&shm) == seen;
        match hold.truncate_wal(TRUNCATE_READERS_WAIT, unchanged) {
            Ok(Some(Truncation::Emptied)) => {
                self.truncate_due = false;
                self.truncate_backoff = IDLE_BEFORE_TRUNCATE;
                self.all_checkpointed();
            }
            // Every frame, all read, is in the database file: the writer
            // may restart the WAL once the reader is done; a later idle
            // round empties the file, not at once, since each try holds
            // the engine's writer while it waits for the reader.
            Ok(Some(Truncation::Copied)) => {
                self.all_checkpointed();
                self.truncate_after = Instant::now() + self.truncate_backoff;
                self.truncate_backoff = (self.truncate_backoff * 2).min(TRUNCATE_BACKOFF_MAX);
            }
            // A commit came or the writer was busy: a later idle round
            // tries again.
            Ok(Some(Truncation::Refused) | None) => {}
            Err(e) => {
                tracing::warn!(db = %self.db_path.display(), error = %e, "truncating an idle WAL failed");
            }
        }
    }

    /// Notes that every frame of the cycle, all read, is in the database
    /// file, as a complete checkpoint of [`State::checkpoint`] does.
    fn all_checkpointed(&mut self) {
        self.backfilled = self.cycle_frames();
        self.pin_unsure = true;
        self.restart_allowed = true;
    }

    /// Uploads the pending transactions as one object at the next position.
    fn ship(&mut self) -> Result<()> {
        let n = self.pending.txns;
        let header = Header {
            kind: Kind::Changes,
            page_size: self.page_size,
            position: self.at.position + 1,
            first_txn: self.at.txn + 1,
            last_txn: self.at.txn + n,
            db_pages: self.pending.db_pages,
            page_count: self.pending.page_count(),
            prev_digest: self.prev_digest,
            created_ms: now_ms(),
            writer: self.writer,
        };
        let (bytes, digest) = object::encode(&header, self.pending.pages());
        self.pending.clear();
        self.upload(
            bytes,
            Advance {
                position: header.position,
                txn: header.last_txn,
                digest,
                snapshot: None,
            },
        )
    }

    /// Continues the log of a database that a clean stop left exactly at
    /// the log's latest position: everything in its WAL now came after it
    /// (the close checkpointed and ended the WAL), so reading starts at the
    /// WAL's first frame. Pinned.
    fn resume_cycle(&mut self) -> Result<()> {
        match read_wal_header(&self.wal_path)? {
            Some(h) => {
                self.page_size = h.page_size;
                self.begin_cycle(&h);
            }
            None => {
                let head = read_db_range(&self.db_path, 100)?;
                if head.len() < 100 {
                    return Err(db_error(
                        &self.db_path,
                        "not a SQLite database (shorter than its header)",
                    ));
                }
                self.page_size = match u16::from_be_bytes([head[16], head[17]]) {
                    1 => 65536,
                    n => n as u32,
                };
                self.salt = None;
                self.cursor = Cursor {
                    offset: wal::HEADER_BYTES,
                    checksum: (0, 0),
                };
            }
        }
        self.pending.set_page_size(self.page_size);
        Ok(())
    }

    fn begin_cycle(&mut self, h: &WalHeader) {
        self.salt = Some(h.salt);
        self.cursor = Cursor {
            offset: wal::HEADER_BYTES,
            checksum: h.checksum,
        };
        self.backfilled = 0;
        self.restart_tried = 0;
        self.restart_allowed = false;
    }

    fn resnapshot(&mut self, why: &str) -> Result<()> {
        tracing::warn!(db = %self.db_path.display(), "backup takes a new snapshot: {why}");
        self.snapshot()
    }

    /// Writes the whole database as of the pin at the next position; pinned.
    fn snapshot(&mut self) -> Result<()> {
        let header = read_wal_header(&self.wal_path)?;
        let tail = read_wal_range(&self.wal_path, wal::HEADER_BYTES, usize::MAX >> 1)?;
        let db = std::fs::read(&self.db_path)?;
        if db.len() < 100 {
            return Err(db_error(
                &self.db_path,
                "not a SQLite database (shorter than its header)",
            ));
        }
        let page_size = match header {
            Some(h) => h.page_size,
            None => match u16::from_be_bytes([db[16], db[17]]) {
                1 => 65536,
                n => n as u32,
            },
        };
        let found = header.map(|h| wal::scan(&tail, &h, h.checksum));
        let ps = page_size as usize;
        let db_pages = match found.as_ref().and_then(|f| f.transactions.last()) {
            Some(t) => t.db_pages,
            None => db_pages_from_file(&db, page_size),
        };
        let mut image = vec![0u8; db_pages as usize * ps];
        let n = image.len().min(db.len());
        image[..n].copy_from_slice(&db[..n]);
        if let Some(f) = &found {
            for t in &f.transactions {
                for &(pgno, off) in &t.frames {
                    if pgno <= db_pages {
                        let at = (pgno as usize - 1) * ps;
                        image[at..at + ps].copy_from_slice(&tail[off..off + ps]);
                    }
                }
            }
        }
        let header_obj = Header {
            kind: Kind::Snapshot,
            page_size,
            position: self.at.position + 1,
            first_txn: self.at.txn,
            last_txn: self.at.txn,
            db_pages,
            page_count: db_pages,
            prev_digest: self.prev_digest,
            created_ms: now_ms(),
            writer: self.writer,
        };
        let pages = image
            .chunks_exact(ps)
            .enumerate()
            .map(|(i, p)| (i as u32 + 1, p));
        let (bytes, digest) = object::encode(&header_obj, pages);
        let cycle = match (header, found) {
            (Some(h), Some(f)) => Some((
                h.salt,
                Cursor {
                    offset: wal::HEADER_BYTES + f.consumed as u64,
                    checksum: f.checksum,
                },
            )),
            _ => None,
        };
        // The snapshot holds every transaction read and not yet uploaded.
        self.pending.clear();
        self.upload(
            bytes,
            Advance {
                position: header_obj.position,
                txn: self.at.txn,
                digest,
                snapshot: Some(SnapshotEnd { page_size, cycle }),
            },
        )?;
        Ok(())
    }

    /// Uploads an object and, once it is in the store, moves the state to
    /// `advance`. If the outcome is unknown (a store error: the object may
    /// or may not have landed), the same bytes are kept and retried first
    /// in the next round, so a landed object is recognised as ours.
    fn upload(&mut self, bytes: Vec<u8>, advance: Advance) -> Result<()> {
        let bytes = Bytes::from(bytes);
        self.note_position(advance.position, &object::digest(&bytes))?;
        match self.put(advance.position, &bytes) {
            Ok(()) => {
                self.at.uploads += 1;
                self.at.uploaded_bytes += bytes.len() as u64;
                self.apply(advance);
                Ok(())
            }
            Err(e @ Error::Store(_)) => {
                self.unconfirmed = Some(Unconfirmed { bytes, advance });
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Retries an upload whose outcome was unknown, before anything else.
    fn confirm(&mut self) -> Result<()> {
        let Some(u) = self.unconfirmed.take() else {
            return Ok(());
        };
        match self.put(u.advance.position, &u.bytes) {
            Ok(()) => {
                self.at.uploads += 1;
                self.at.uploaded_bytes += u.bytes.len() as u64;
                self.apply(u.advance);
                Ok(())
            }
            Err(e @ Error::Store(_)) => {
                self.unconfirmed = Some(u);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn apply(&mut self, a: Advance) {
        self.last_upload = std::time::Instant::now();
        self.prev_digest = a.digest;
        self.at.digest = a.digest;
        self.written.lock().unwrap().push(a.position);
        self.at.position = a.position;
        self.at.txn = a.txn;
        self.at.shipped_at = Some(SystemTime::now());
        if let Some(end) = a.snapshot {
            self.at.snapshots += 1;
            self.page_size = end.page_size;
            self.pending.set_page_size(end.page_size);
            let (salt, cursor) = match end.cycle {
                Some((salt, cursor)) => (Some(salt), cursor),
                None => (
                    None,
                    Cursor {
                        offset: wal::HEADER_BYTES,
                        checksum: (0, 0),
                    },
                ),
            };
            self.salt = salt;
            self.cursor = cursor;
            self.backfilled = 0;
            self.restart_tried = 0;
            self.restart_allowed = false;
            // Whether the engine's last checkpoint copied everything is
            // not known.
            self.pin_unsure = true;
        }
        self.published();
    }

    /// Creates the object at `position`. An existing object with the same
    /// bytes is ours (a retried request whose first try landed); any other
    /// means another shipper took the position: [`Error::Fenced`].
    fn put(&self, position: u64, bytes: &Bytes) -> Result<()> {
        let key = object::key(&self.prefix, position);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let r = self.rt.block_on(self.store.put_opts(
            &key,
            PutPayload::from_bytes(bytes.clone()),
            opts,
        ));
        match r {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let theirs = self
                    .rt
                    .block_on(async { self.store.get(&key).await?.bytes().await })?;
                if theirs != *bytes {
                    return Err(Error::Fenced {
                        key: key.to_string(),
                    });
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn published(&self) {
        let _ = self.shipped.send(self.at);
    }

    /// Records `position` in the position file before it is written, so a
    /// later start knows this copy went that far (see
    /// [`Options::position_file`]).
    /// The object's digest goes with it: at the same position a later
    /// start tells this copy's object from another shipper's.
    fn note_position(&self, position: u64, digest: &[u8; 32]) -> Result<()> {
        let Some(path) = &self.options.position_file else {
            return Ok(());
        };
        if read_position_file(path).is_some_and(|p| p > position) {
            return Ok(());
        }
        let tmp = path.with_extension("tmp");
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&tmp, format!("{position} {hex}\n"))?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}

/// The position recorded in a position file, if it holds one.
fn read_position_file(path: &FsPath) -> Option<u64> {
    read_position_record(path).map(|(p, _)| p)
}

/// The position file's position and, when it names one, the digest of the
/// object this copy was about to write there (`POSITION [HEX]`).
fn read_position_record(path: &FsPath) -> Option<(u64, Option<[u8; 32]>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut words = text.split_whitespace();
    let position = words.next()?.parse().ok()?;
    let digest = words.next().and_then(|h| {
        if h.len() != 64 {
            return None;
        }
        let mut d = [0u8; 32];
        for (i, b) in d.iter_mut().enumerate() {
            *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(d)
    });
    Some((position, digest))
}

/// Up to `max` bytes from the start of the database file.
fn read_db_range(path: &FsPath, max: usize) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}
