//! The Read call: a ranged, streamed read of one regular file.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_fs::FileKind;
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tokio::sync::mpsc;
use tonic::Status;

use super::streams::{PermitStream, StreamPermit, idle_error};
use crate::blocking::blocking;
use crate::errors::{aborted, errno_status, on};
use crate::paths::ApiPath;
use crate::registry::Lease;

/// Largest piece read from the engine and sent as one message, in bytes.
/// With [`READ_AHEAD`] this bounds what one Read stream holds while its
/// client does not read: one piece queued, one waiting for queue space,
/// and what the HTTP/2 layer buffers under its flow-control window.
pub const READ_PIECE: usize = 256 * 1024;
/// Pieces queued ahead of a slow client.
const READ_AHEAD: usize = 1;

/// The stream of a Read call: the pieces as they come, then the error that
/// ended the stream early, if any (a failed read, or a client that took
/// nothing for the idle timeout). Holds the stream's place under the
/// per-client and per-computer caps until dropped.
pub type ReadStream = PermitStream<pb::ReadChunk>;

/// Most bytes of a Read's range read in one SQLite read transaction (the
/// stream's snapshot): up to here the Read sees one version of the file
/// whatever writes run meanwhile. Past it (or past [`SNAPSHOT_TIME`]) each
/// [`READ_PIECE`] is read in its own transaction and checked against the
/// file's [`agentcomputer_fs::DataVersion`] as the snapshot saw it; a change
/// ends the stream with `ABORTED`, so a read never mixes two versions.
pub const SNAPSHOT_BYTES: u64 = 4 * 1024 * 1024;
/// Longest a Read keeps its snapshot. A read transaction keeps SQLite from
/// checkpointing past it, so the WAL grows with every commit while it is
/// held: a slow or stalled client must not hold it long.
pub const SNAPSHOT_TIME: Duration = Duration::from_secs(10);

/// Starts streaming `req`'s byte range in pieces of at most [`READ_PIECE`]
/// bytes. The path is resolved and its inode opened in one snapshot, so a
/// concurrent rename or replace of the path neither gives a spurious
/// `ENOENT` nor mixes two files in one read. The first [`SNAPSHOT_BYTES`]
/// of the range (read within [`SNAPSHOT_TIME`]) come from one read
/// transaction; past them, a change of the file ends the stream with
/// `ABORTED` (errno `ECANCELED`). A client that takes no piece for
/// `idle_timeout` gets `DEADLINE_EXCEEDED`, and the lease and open handle
/// are released then. Errors before streaming: path errors, `EISDIR`,
/// `EINVAL` for non-regular files; during streaming: the engine's read
/// errors and the change of the file past the snapshot.
pub async fn start(
    lease: Lease,
    req: pb::ReadRequest,
    permit: StreamPermit,
    idle_timeout: Duration,
) -> Result<ReadStream, Status> {
    let path = ApiPath::parse(&req.path)?;
    let fs = lease.fs().clone();
    let (ino, size, handle, shown) = blocking(move || {
        let (attr, handle) = open_path(&fs, &path)?;
        match attr.kind {
            FileKind::RegularFile => {}
            FileKind::Directory => return Err(errno_status(Errno::EISDIR, path.shown())),
            _ => return Err(errno_status(Errno::EINVAL, path.shown())),
        }
        Ok((attr.ino, attr.size, handle, path.shown().to_string()))
    })
    .await?;
    let end = match req.length {
        0 => u64::MAX,
        n => req.offset.saturating_add(n),
    };
    // What one piece covers is one transaction anyway: no snapshot to hold
    // (if the file grew meanwhile, the version check catches it).
    let one_piece = end.min(size).saturating_sub(req.offset) <= READ_PIECE as u64;
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let failure = Arc::new(Mutex::new(None));
    let failed = failure.clone();
    tokio::spawn(async move {
        // The lease and the open handle keep the computer and inode alive.
        let _keep = (lease, handle);
        let fs = _keep.0.fs().clone();
        let taken = std::time::Instant::now();
        let mut snapshot = if one_piece {
            None
        } else {
            let fs = fs.clone();
            match blocking(move || fs.read_snapshot()).await {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = tx.send(Err(on(&shown)(e))).await;
                    return;
                }
            }
        };
        let snapshot_end = req.offset.saturating_add(SNAPSHOT_BYTES);
        let mut version = None;
        let mut offset = req.offset;
        while offset < end {
            let want = (end - offset).min(READ_PIECE as u64) as usize;
            if offset >= snapshot_end || taken.elapsed() >= SNAPSHOT_TIME {
                snapshot = None;
            }
            let fs = fs.clone();
            let held = snapshot.take();
            let (held, result) = blocking(move || match held {
                Some(s) => {
                    let r = s.read(ino, offset, want);
                    (Some(s), r)
                }
                None => (None, fs.read_versioned(ino, offset, want)),
            })
            .await;
            snapshot = held;
            let (item, last) = match result {
                // Before the end-of-file test: a file cut short meanwhile
                // must not end the stream as if complete.
                Ok((_, now)) if version.is_some_and(|v| v != now) => {
                    (Err(changed_during_read(&shown, offset)), true)
                }
                Ok((data, _)) if data.is_empty() => break,
                Ok((data, now)) => {
                    version = Some(now);
                    let n = data.len();
                    let at = offset;
                    offset += n as u64;
                    (Ok(pb::ReadChunk { offset: at, data }), n < want)
                }
                Err(e) => (Err(on(&shown)(e)), true),
            };
            let send = tx.send(item);
            tokio::pin!(send);
            let mut sent = None;
            if snapshot.is_some() {
                // A client slow to take this piece must not keep the
                // snapshot past its time: the rest is version-checked.
                let left = SNAPSHOT_TIME.saturating_sub(taken.elapsed());
                match tokio::time::timeout(left, &mut send).await {
                    Ok(r) => sent = Some(r),
                    Err(_) => snapshot = None,
                }
            }
            let outcome = match sent {
                Some(r) => Ok(r),
                None => tokio::time::timeout(idle_timeout, send).await,
            };
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return, // client went away
                Err(_) => {
                    *failed.lock() = Some(idle_error(&format!("read of {shown}"), idle_timeout));
                    return;
                }
            }
            if last {
                break; // end of file, or the error was sent
            }
        }
    });
    Ok(PermitStream::new(rx, failure, permit))
}

/// Resolves `path`, following a final symlink, and opens the inode in one
/// snapshot (`ENOTDIR` for a trailing `/` on a non-directory).
fn open_path(
    fs: &agentcomputer_fs::Fs,
    path: &ApiPath,
) -> Result<(agentcomputer_fs::Attr, agentcomputer_fs::Handle), Status> {
    let (attr, handle) = fs
        .open_path(agentcomputer_fs::ROOT_INO, &path.engine_path(), true)
        .map_err(on(path.shown()))?;
    if path.dir_only() && attr.kind != FileKind::Directory {
        return Err(errno_status(Errno::ENOTDIR, path.shown()));
    }
    Ok((attr, handle))
}

/// [`aborted`]: the file changed while it was read past its snapshot.
fn changed_during_read(shown: &str, offset: u64) -> Status {
    aborted(format_args!(
        "{shown} changed while it was read (at byte {offset}); past its first {SNAPSHOT_BYTES} \
         bytes or {} s a read stops rather than mix two versions: read it again",
        SNAPSHOT_TIME.as_secs()
    ))
}
