//! Restore: the latest snapshot and every position after it, verified,
//! into a new database file.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::{Error, Result};
use crate::object::{self, Kind, Object};

/// What a restore brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The snapshot's position.
    pub snapshot: u64,
    /// The latest position applied (the latest in the store).
    pub position: u64,
    /// Database size in pages.
    pub db_pages: u32,
    /// Page size in bytes.
    pub page_size: u32,
    /// Digest of the object at `position` (what the next object's header
    /// names as the one before it): with `position` it lets a shipper
    /// continue this log from the restored file ([`crate::Resume`]), and
    /// [`catch_up`] bring the file forward later.
    pub digest: [u8; 32],
    /// The file is exactly the log's state at `position`: the checks after
    /// the restore wrote nothing to it (its length and modification time
    /// did not change), so a shipper may continue the log from it.
    pub exact: bool,
}

fn corrupt(key: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Restores the latest state under `prefix` into a new file `dest`.
///
/// Reads positions back from the latest until a snapshot, then applies
/// the snapshot and each following object in order, checking each one's
/// digest, length, position and link to the one before. The file is built
/// as `<dest>.restoring`, synced, checked with `PRAGMA integrity_check` and
/// the engine's own check, and only then renamed to `dest`.
///
/// Errors: [`Error::DestinationExists`] (nothing is touched);
/// [`Error::NoBackup`]; [`Error::Missing`] or [`Error::Corrupt`] naming
/// the object; [`Error::Check`] if the result fails its checks. On any
/// error `<dest>.restoring` is removed and `dest` never appears.
pub async fn restore(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    dest: &FsPath,
) -> Result<Restored> {
    restore_at(store, prefix, dest, None).await
}

/// [`restore`] of the log as it was at position `at` (the latest when
/// `None`): the latest snapshot at or before `at` and every object after it
/// up to `at`, with the same checks. A named position of the log (a
/// snapshot of a computer) is materialised this way.
///
/// Errors: those of [`restore`]; [`Error::NoBackup`] when the log has no
/// object at `at` (ends before it, or was pruned below it).
pub async fn restore_at(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    dest: &FsPath,
    at: Option<u64>,
) -> Result<Restored> {
    if dest.exists() {
        return Err(Error::DestinationExists(dest.display().to_string()));
    }
    let metas: Vec<_> = store
        .list(Some(&object::log_dir(prefix)))
        .try_collect()
        .await?;
    let mut positions: Vec<u64> = metas
        .iter()
        .filter_map(|m| object::position_of(&m.location))
        .collect();
    positions.sort_unstable();
    let Some(&latest) = positions.last() else {
        return Err(Error::NoBackup {
            prefix: prefix.to_string(),
            reason: "no objects".into(),
        });
    };
    let head = match at {
        None => latest,
        Some(p) if positions.binary_search(&p).is_ok() => p,
        Some(p) => {
            return Err(Error::NoBackup {
                prefix: prefix.to_string(),
                reason: format!(
                    "no object at position {p} (the log holds {}..={latest})",
                    positions[0]
                ),
            });
        }
    };
    // Back from the head to the latest snapshot, every position present;
    // a rewind continues from the position it names.
    let steps = plan(store, prefix, head, &positions).await?;
    let Some(&Step::Apply(base)) = steps.first() else {
        unreachable!("a plan starts with its snapshot")
    };

    let tmp: PathBuf = {
        let mut s = dest.as_os_str().to_owned();
        s.push(".restoring");
        s.into()
    };
    // A leftover of a restore cut short by a crash is ours to replace.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let result = build(store, prefix, &steps, file, &tmp).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let (page_size, db_pages, digest, exact) = result?;
    std::fs::rename(&tmp, dest)?;
    if let Some(dir) = dest.parent() {
        let dir = if dir.as_os_str().is_empty() {
            FsPath::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(Restored {
        snapshot: base,
        position: head,
        db_pages,
        page_size,
        digest,
        exact,
    })
}

/// Brings `db`, a file exactly at position `from.position` of the log
/// under `prefix` (restored, or closed with that position shipped), to the
/// store's latest position, in place: only the objects after it are read.
/// The first must name `from.digest` as the object before it, so a file
/// that is not what the log says at that position is never patched.
/// Returns the new position; `snapshot` is `from.position` when no later
/// snapshot was applied.
///
/// Not atomic: the caller marks the file as being caught up and discards
/// it if a crash interrupts this. Unlike [`restore`] it runs no
/// integrity check (the file was checked when it was restored, and each
/// object's digest chain is checked).
///
/// Errors: [`Error::Stale`] when the store's latest position is below
/// `from.position` (the log is not the one this file came from);
/// [`Error::Missing`] or [`Error::Corrupt`] naming the object (a chain
/// that does not follow `from.digest` is `Corrupt`); I/O errors.
pub async fn catch_up(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    db: &FsPath,
    from: crate::Resume,
) -> Result<Restored> {
    let metas: Vec<_> = store
        .list(Some(&object::log_dir(prefix)))
        .try_collect()
        .await?;
    let head = metas
        .iter()
        .filter_map(|m| object::position_of(&m.location))
        .max()
        .unwrap_or(0);
    if head < from.position {
        return Err(Error::Stale {
            store: head,
            known: from.position,
        });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(db)?;
    let page_size = {
        // The page size is bytes 16-17 of the header (big-endian, 1 means
        // 65536): https://www.sqlite.org/fileformat.html#the_database_header
        let mut h = [0u8; 18];
        use std::io::Read;
        (&file).read_exact(&mut h)?;
        match u16::from_be_bytes([h[16], h[17]]) {
            1 => 65536,
            n => u32::from(n),
        }
    };
    let db_pages = (file.metadata()?.len() / u64::from(page_size.max(1))) as u32;
    if head == from.position {
        // Still the object this file was made from (its trailer is its
        // digest), not another writer's at the same position.
        let key = object::key(prefix, head);
        let meta = store.head(&key).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => Error::Missing {
                key: key.to_string(),
            },
            e => e.into(),
        })?;
        let trailer = store
            .get_range(&key, meta.size.saturating_sub(32)..meta.size)
            .await?;
        if trailer.as_ref() != from.digest {
            return Err(corrupt(
                &key,
                "is not the object this copy was made from (digest differs)",
            ));
        }
        return Ok(Restored {
            snapshot: from.position,
            position: head,
            db_pages,
            page_size,
            digest: from.digest,
            exact: true,
        });
    }
    let steps: Vec<Step> = (from.position + 1..=head).map(Step::Apply).collect();
    let (page_size, db_pages, digest, snapshot, _) = apply(
        store,
        prefix,
        &steps,
        file,
        Some((from.digest, page_size)),
        Sync::Now,
    )
    .await?;
    Ok(Restored {
        snapshot: snapshot.unwrap_or(from.position),
        position: head,
        db_pages,
        page_size,
        digest,
        exact: true,
    })
}

/// Writes `steps` into `file` (at `tmp`), syncs and checks it. Returns
/// (page size, database pages, the last object's digest, whether the
/// checks left the file as the log made it).
async fn build(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    steps: &[Step],
    file: std::fs::File,
    tmp: &FsPath,
) -> Result<(u32, u32, [u8; 32], bool)> {
    let started = std::time::Instant::now();
    let (page_size, db_pages, digest, _, file) =
        apply(store, prefix, steps, file, None, Sync::Deferred).await?;
    let applied = started.elapsed();
    let before = stamp(tmp)?;
    // The file goes to disk while it is checked: the checks read it from
    // the page cache, and nothing uses it before both are done.
    let (synced, checked) = std::thread::scope(|s| {
        let synced = s.spawn(move || file.sync_all());
        let checked = check(tmp);
        (synced.join(), checked)
    });
    synced.map_err(|_| Error::Check("the sync of the restored file panicked".into()))??;
    checked?;
    let exact = stamp(tmp)? == before;
    tracing::debug!(
        objects = steps.len(),
        apply_ms = applied.as_millis() as u64,
        check_ms = (started.elapsed() - applied).as_millis() as u64,
        "built a database from the log"
    );
    Ok((page_size, db_pages, digest, exact))
}

/// A file's length and modification time (ns), which any write changes.
fn stamp(path: &FsPath) -> Result<(u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((
        m.len(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    ))
}

/// One step of building a position: an object whose pages are applied,
/// or a rewind, checked against the state the steps before it built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Apply(u64),
    Rewind(u64),
}

/// The steps that build the state at `head`, in order: from the snapshot
/// it starts from, each changes object applied, each rewind followed back
/// to the position it names. `positions` is the log's, sorted.
async fn plan(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    head: u64,
    positions: &[u64],
) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut p = head;
    loop {
        let key = object::key(prefix, p);
        if positions.binary_search(&p).is_err() {
            return Err(Error::Missing {
                key: key.to_string(),
            });
        }
        let h = read_header(store, &key, p).await?;
        match h.kind {
            Kind::Snapshot => {
                steps.push(Step::Apply(p));
                break;
            }
            Kind::Changes => {
                steps.push(Step::Apply(p));
                if p == 0 || p <= positions[0] {
                    let below = object::key(prefix, p.saturating_sub(1));
                    return Err(if p > 1 {
                        Error::Missing {
                            key: below.to_string(),
                        }
                    } else {
                        Error::NoBackup {
                            prefix: prefix.to_string(),
                            reason: "no snapshot".into(),
                        }
                    });
                }
                p -= 1;
            }
            Kind::Rewind => {
                steps.push(Step::Rewind(p));
                p = rewind_target(store, &key, p).await?.0;
            }
        }
    }
    steps.reverse();
    Ok(steps)
}

/// The header of the object at `key`, which must hold position `p`.
async fn read_header(store: &Arc<dyn ObjectStore>, key: &Path, p: u64) -> Result<object::Header> {
    let head_bytes = store
        .get_range(key, 0..object::HEADER_BYTES as u64)
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => Error::Missing {
                key: key.to_string(),
            },
            e => e.into(),
        })?;
    let h = object::decode_header(&head_bytes).map_err(|r| corrupt(key, r))?;
    if h.position != p {
        return Err(corrupt(
            key,
            format!("holds position {} instead", h.position),
        ));
    }
    Ok(h)
}

/// The whole object at `key`, which must hold position `p`, verified
/// (hashed once), with its header.
async fn read_object(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    p: u64,
) -> Result<(bytes::Bytes, object::Header)> {
    let bytes = fetch(store, key).await?;
    let header = Object::decode(&bytes).map_err(|r| corrupt(key, r))?.header;
    if header.position != p {
        return Err(corrupt(
            key,
            format!("holds position {} instead", header.position),
        ));
    }
    Ok((bytes, header))
}

/// The position a rewind at `p` names (below `p`) and its object's digest.
async fn rewind_target(
    store: &Arc<dyn ObjectStore>,
    key: &Path,
    p: u64,
) -> Result<(u64, [u8; 32])> {
    let (bytes, header) = read_object(store, key, p).await?;
    let Some((to, digest)) = Object::verified(&bytes, header).rewind_target() else {
        return Err(corrupt(key, "is no longer a rewind"));
    };
    if to >= p {
        return Err(corrupt(
            key,
            format!("rewinds to position {to}, not below it"),
        ));
    }
    Ok((to, digest))
}

/// The digest of the object at `key` (its last 32 bytes), unverified.
async fn trailer(store: &Arc<dyn ObjectStore>, key: &Path) -> Result<[u8; 32]> {
    let missing = |e| match e {
        object_store::Error::NotFound { .. } => Error::Missing {
            key: key.to_string(),
        },
        e => e.into(),
    };
    let meta = store.head(key).await.map_err(missing)?;
    let t = store
        .get_range(key, meta.size.saturating_sub(32)..meta.size)
        .await
        .map_err(missing)?;
    t.as_ref()
        .try_into()
        .map_err(|_| corrupt(key, "shorter than a digest"))
}

/// Writes `steps` into `file` in order, each object checked against the
/// one before (`after`: the digest and page size of the object before the
/// first, when the file already holds it), and syncs it. A rewind is
/// checked (it names the state built so far, and follows the object
/// before it), and writes nothing; met where an object to apply was
/// planned, it is [`Error::Rewound`]. Returns (page size, database pages,
/// digest of the last object, the position of the last snapshot applied).
async fn apply(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    steps: &[Step],
    file: std::fs::File,
    after: Option<([u8; 32], u32)>,
    sync: Sync,
) -> Result<(u32, u32, [u8; 32], Option<u64>, std::fs::File)> {
    let mut prev_digest = after.map(|(d, _)| d);
    let mut page_size = after.map_or(0, |(_, p)| p);
    let mut db_pages = 0;
    let mut snapshot = None;
    for &step in steps {
        let p = match step {
            Step::Apply(p) | Step::Rewind(p) => p,
        };
        let key = object::key(prefix, p);
        if let Step::Rewind(_) = step {
            let (bytes, header) = read_object(store, &key, p).await?;
            let o = Object::verified(&bytes, header);
            let Some((to, to_digest)) = o.rewind_target() else {
                return Err(corrupt(&key, "is no longer a rewind"));
            };
            if Some(to_digest) != prev_digest
                || o.header.db_pages != db_pages
                || o.header.page_size != page_size
            {
                return Err(corrupt(
                    &key,
                    format!("does not name the state of position {to} it rewinds to"),
                ));
            }
            if p > 0 && trailer(store, &object::key(prefix, p - 1)).await? != o.header.prev_digest {
                return Err(corrupt(
                    &key,
                    "does not follow the object before it (chain digest differs)",
                ));
            }
            prev_digest = Some(object::digest(&bytes));
            continue;
        }
        let bytes = fetch(store, &key).await?;
        let o = Object::decode_unverified(&bytes).map_err(|r| corrupt(&key, r))?;
        if o.header.position != p {
            return Err(corrupt(
                &key,
                format!("holds position {} instead", o.header.position),
            ));
        }
        if o.header.kind == Kind::Rewind {
            return Err(Error::Rewound {
                key: key.to_string(),
            });
        }
        if let Some(prev) = prev_digest {
            if o.header.prev_digest != prev {
                return Err(corrupt(
                    &key,
                    "does not follow the object before it (chain digest differs)",
                ));
            }
            if o.header.kind == Kind::Snapshot {
                // A later snapshot replaces everything before it.
                file.set_len(0)?;
            }
            if o.header.page_size != page_size {
                return Err(corrupt(
                    &key,
                    format!("page size {} after {page_size}", o.header.page_size),
                ));
            }
        } else if o.header.kind != Kind::Snapshot {
            return Err(corrupt(&key, "a restore cannot start from changes"));
        }
        if o.header.kind == Kind::Snapshot {
            snapshot = Some(p);
        }
        page_size = o.header.page_size;
        db_pages = o.header.db_pages;
        // Runs of consecutive pages (a snapshot object is one run) go to
        // the file in one write each, not a write per page. Into a new
        // file (a restore) a large object is hashed on another thread
        // while its pages are written, and checked before anything uses
        // the file; a file in use (a catch-up) gets only checked pages.
        let write = |o: &Object<'_>| -> Result<()> {
            let mut run = Run::new(page_size);
            for (pgno, page) in o.pages() {
                if pgno == 0 || pgno > db_pages {
                    return Err(corrupt(&key, format!("page {pgno} outside 1..={db_pages}")));
                }
                run.add(&file, pgno, page)?;
            }
            run.flush(&file)?;
            Ok(())
        };
        if sync == Sync::Deferred && bytes.len() >= OVERLAP_BYTES {
            let (verified, written) = std::thread::scope(|s| {
                let verified = s.spawn(|| o.verify());
                let written = write(&o);
                (verified.join(), written)
            });
            verified
                .map_err(|_| corrupt(&key, "its check panicked"))?
                .map_err(|r| corrupt(&key, r))?;
            written?;
        } else {
            o.verify().map_err(|r| corrupt(&key, r))?;
            write(&o)?;
        }
        file.set_len(db_pages as u64 * page_size as u64)?;
        prev_digest = Some(object::digest(&bytes));
    }
    if sync == Sync::Now {
        file.sync_all()?;
    }
    Ok((
        page_size,
        db_pages,
        prev_digest.unwrap_or([0; 32]),
        snapshot,
        file,
    ))
}

/// When [`apply`] syncs the file it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// Before it returns.
    Now,
    /// The caller syncs it (while checking it); the file is new, so its
    /// pages may be written before their object's digest is checked.
    Deferred,
}

/// Objects from this size on are hashed while their pages are written.
const OVERLAP_BYTES: usize = 16 << 20;

/// The bytes of the object at `key`.
async fn fetch(store: &Arc<dyn ObjectStore>, key: &Path) -> Result<bytes::Bytes> {
    match store.get(key).await {
        Ok(r) => Ok(r.bytes().await?),
        Err(object_store::Error::NotFound { .. }) => Err(Error::Missing {
            key: key.to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Bytes of consecutive pages gathered before one write.
const RUN_BYTES: usize = 4 << 20;

/// Consecutive pages gathered for one positioned write.
struct Run {
    page_size: u64,
    first: u32,
    next: u32,
    bytes: Vec<u8>,
}

impl Run {
    fn new(page_size: u32) -> Run {
        Run {
            page_size: u64::from(page_size),
            first: 0,
            next: 0,
            bytes: Vec::new(),
        }
    }

    fn add(&mut self, file: &std::fs::File, pgno: u32, page: &[u8]) -> std::io::Result<()> {
        if pgno != self.next || self.bytes.len() >= RUN_BYTES {
            self.flush(file)?;
            self.first = pgno;
        }
        self.bytes.extend_from_slice(page);
        self.next = pgno + 1;
        Ok(())
    }

    fn flush(&mut self, file: &std::fs::File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        use std::os::unix::io::AsRawFd;
        if !self.bytes.is_empty() {
            let at = u64::from(self.first - 1) * self.page_size;
            file.write_all_at(&self.bytes, at)?;
            // Start writing it out now (sync_file_range(2), without
            // waiting), so the sync at the end finds most of a large
            // restore on disk already. Only a hint: its failure is the
            // final sync's to report.
            // SAFETY: a valid descriptor, a range and a flag; no memory.
            unsafe {
                libc::sync_file_range(
                    file.as_raw_fd(),
                    at as libc::off64_t,
                    self.bytes.len() as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
            self.bytes.clear();
        }
        Ok(())
    }
}

/// Makes the state at the log's latest position `head` the state of the
/// earlier position `to` again, by writing a rewind at `head + 1` (a few
/// dozen bytes, whatever the database's size): what a restore of a
/// computer to `to` ships instead of the restored database. `to_digest`,
/// `page_size` and `db_pages` are what [`restore_at`] of `to` returned.
/// Returns the new position and its object's digest, from which a shipper
/// of the restored file continues the log ([`crate::Resume`]).
///
/// Errors: [`Error::Stale`] when `head` is not the log's latest position;
/// [`Error::Fenced`] when another writer took `head + 1` first; the
/// store's.
pub async fn rewind(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    head: u64,
    to: &Restored,
) -> Result<(u64, [u8; 32])> {
    let latest = log_objects(store, prefix)
        .await?
        .last()
        .map_or(0, |o| o.position);
    if latest != head || to.position > head {
        return Err(Error::Stale {
            store: latest,
            known: head,
        });
    }
    let prev_digest = trailer(store, &object::key(prefix, head)).await?;
    let header = object::Header {
        kind: Kind::Rewind,
        page_size: to.page_size,
        position: head + 1,
        first_txn: 0,
        last_txn: 0,
        db_pages: to.db_pages,
        page_count: 0,
        prev_digest,
        created_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        writer: rand::random(),
    };
    let (bytes, digest) = object::encode_rewind(&header, to.position, &to.digest);
    let key = object::key(prefix, head + 1);
    match store
        .put_opts(
            &key,
            bytes.into(),
            object_store::PutOptions {
                mode: object_store::PutMode::Create,
                ..Default::default()
            },
        )
        .await
    {
        Ok(_) => Ok((head + 1, digest)),
        Err(object_store::Error::AlreadyExists { .. }) => Err(Error::Fenced {
            key: key.to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// `PRAGMA integrity_check`, then the engine's check (which opens the
/// file as a filesystem): what every restore runs before it places a file,
/// for a database file from elsewhere too (an imported copy).
///
/// Errors: [`Error::Check`] naming the problems, I/O and SQLite errors.
pub fn check_database(path: &FsPath) -> Result<()> {
    check(path)
}

fn check(path: &FsPath) -> Result<()> {
    let started = std::time::Instant::now();
    {
        let c = rusqlite::Connection::open(path)?;
        let rows: Vec<String> = c
            .prepare("PRAGMA integrity_check")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if rows != ["ok"] {
            return Err(Error::Check(format!(
                "integrity_check: {}",
                rows.join("; ")
            )));
        }
    }
    let integrity = started.elapsed();
    let fs =
        agentcomputer_fs::Fs::open(path).map_err(|e| Error::Check(format!("engine open: {e}")))?;
    let problems = fs.check()?;
    tracing::debug!(
        integrity_ms = integrity.as_millis() as u64,
        engine_ms = (started.elapsed() - integrity).as_millis() as u64,
        "checked a database"
    );
    if !problems.is_empty() {
        return Err(Error::Check(format!(
            "engine check: {}",
            problems.join("; ")
        )));
    }
    Ok(())
}

/// One object of a log: its position and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogObject {
    /// Its position.
    pub position: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Every object of the log under `prefix`, by position.
pub async fn log_objects(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Result<Vec<LogObject>> {
    let metas: Vec<_> = store
        .list(Some(&object::log_dir(prefix)))
        .try_collect()
        .await?;
    let mut objects: Vec<LogObject> = metas
        .iter()
        .filter_map(|m| {
            object::position_of(&m.location).map(|position| LogObject {
                position,
                bytes: m.size,
            })
        })
        .collect();
    objects.sort_unstable_by_key(|o| o.position);
    Ok(objects)
}

/// The position of the snapshot a restore at `at` starts from: walks the
/// object headers back from `at` to the first snapshot (a rewind jumps to
/// the position it names). `known` maps
/// positions to their base where already known (earlier named
/// positions): a walk reaching one of them stops there, so each walk
/// reads only the headers since the last known position.
///
/// Errors: [`Error::Missing`] for a gap, [`Error::Corrupt`] for a header
/// that does not decode or names another position, [`Error::NoBackup`]
/// when no snapshot precedes `at`.
pub async fn base_of(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    at: u64,
    known: &std::collections::BTreeMap<u64, u64>,
) -> Result<u64> {
    let mut p = at;
    loop {
        let key = object::key(prefix, p);
        let h = read_header(store, &key, p).await?;
        match h.kind {
            Kind::Snapshot => return Ok(p),
            // The state of an earlier position: its base.
            Kind::Rewind => p = rewind_target(store, &key, p).await?.0,
            Kind::Changes if p == 0 => {
                return Err(Error::NoBackup {
                    prefix: prefix.to_string(),
                    reason: format!("no snapshot before position {at}"),
                });
            }
            Kind::Changes => p -= 1,
        }
        if let Some(&base) = known.get(&p) {
            return Ok(base);
        }
    }
}

/// Deletes every object of the log under `prefix` below position `keep_from`
/// (positions no restore still needs: below the base of the latest
/// position and of every named one). Returns how many objects and bytes
/// went. An object already gone counts as deleted.
pub async fn prune_below(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    keep_from: u64,
) -> Result<(u64, u64)> {
    let mut count = 0;
    let mut bytes = 0;
    for o in log_objects(store, prefix).await? {
        if o.position >= keep_from {
            break;
        }
        match store.delete(&object::key(prefix, o.position)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        count += 1;
        bytes += o.bytes;
    }
    Ok((count, bytes))
}

/// The latest position of the log under `prefix` whose object was made at
/// or before `at_ms` (ms since the Unix epoch): the state a point-in-time
/// restore to that moment brings back. Objects are made in position order,
/// so this is a binary search over their headers (a few dozen reads for a
/// log of millions of objects). `None` when the log's oldest kept object
/// is younger.
///
/// Errors: the store's; [`Error::Corrupt`] for a header that does not
/// decode.
pub async fn position_at_time(
    store: &Arc<dyn ObjectStore>,
    prefix: &Path,
    at_ms: u64,
) -> Result<Option<u64>> {
    let objects = log_objects(store, prefix).await?;
    // Invariant: objects[..lo] were made at or before `at_ms`, objects[hi..] after.
    let (mut lo, mut hi) = (0, objects.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let p = objects[mid].position;
        let key = object::key(prefix, p);
        if read_header(store, &key, p).await?.created_ms <= at_ms {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo.checked_sub(1).map(|i| objects[i].position))
}
