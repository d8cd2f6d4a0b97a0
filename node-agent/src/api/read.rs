//! The Read call: a ranged, streamed read of one regular file.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agentcomputer_fs::FileKind;
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Status;

use super::errors::{aborted, errno_status, on};
use super::paths::ApiPath;
use super::streams::{StreamPermit, idle_error};
use crate::blocking::blocking;
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
pub struct ReadStream {
    rx: mpsc::Receiver<Result<pb::ReadChunk, Status>>,
    /// Set by the reading task when it gives up on a stalled client, whose
    /// queue was full: reported after the queued pieces.
    failure: Arc<Mutex<Option<Status>>>,
    _permit: StreamPermit,
}

impl Stream for ReadStream {
    type Item = Result<pb::ReadChunk, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                let failure = self
                    .failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                Poll::Ready(failure.map(Err))
            }
            other => other,
        }
    }
}

/// Largest range, in bytes, read in one SQLite read transaction: such a
/// Read sees one version of the file whatever writes run meanwhile. Longer
/// ranges read the rest in [`READ_PIECE`] steps, each checking that the
/// file's [`agentcomputer_fs::DataVersion`] is still the first one, and fail with `ABORTED`
/// when it is not, so a read never mixes two versions and never holds a
/// transaction (pinning the WAL) while a slow client takes its time.
pub const SNAPSHOT_BYTES: usize = 4 * 1024 * 1024;

/// Starts streaming `req`'s byte range in pieces of at most [`READ_PIECE`]
/// bytes. The path is resolved and its inode opened in one snapshot, so a
/// concurrent rename or replace of the path neither gives a spurious
/// `ENOENT` nor mixes two files in one read. The first [`SNAPSHOT_BYTES`]
/// of the range are read in one transaction; past them, a change of the
/// file ends the stream with `ABORTED` (errno `ECANCELED`). A client that
/// takes no piece for `idle_timeout` gets `DEADLINE_EXCEEDED`, and the
/// lease and open handle are released then. Errors before streaming: path
/// errors, `EISDIR`, `EINVAL` for non-regular files; during streaming: the
/// engine's read errors and the change of a long file.
pub async fn start(
    lease: Lease,
    req: pb::ReadRequest,
    permit: StreamPermit,
    idle_timeout: Duration,
) -> Result<ReadStream, Status> {
    let path = ApiPath::parse(&req.path)?;
    let fs = lease.fs().clone();
    let (ino, handle, shown) = blocking(move || {
        let (attr, handle) = open_path(&fs, &path)?;
        match attr.kind {
            FileKind::RegularFile => {}
            FileKind::Directory => return Err(errno_status(Errno::EISDIR, path.shown())),
            _ => return Err(errno_status(Errno::EINVAL, path.shown())),
        }
        Ok((attr.ino, handle, path.shown().to_string()))
    })
    .await?;
    let end = match req.length {
        0 => u64::MAX,
        n => req.offset.saturating_add(n),
    };
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let failure = Arc::new(Mutex::new(None));
    let failed = failure.clone();
    tokio::spawn(async move {
        // The lease and the open handle keep the computer and inode alive.
        let _keep = (lease, handle);
        let fs = _keep.0.fs().clone();
        let send = |item| {
            let tx = tx.clone();
            let failed = failed.clone();
            let shown = shown.clone();
            async move {
                match tokio::time::timeout(idle_timeout, tx.send(item)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(_)) => false, // client went away
                    Err(_) => {
                        *failed.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(idle_error(&format!("read of {shown}"), idle_timeout));
                        false
                    }
                }
            }
        };
        // The first part, in one snapshot.
        let mut offset = req.offset;
        let want = (end - offset).min(SNAPSHOT_BYTES as u64) as usize;
        let first = {
            let fs = fs.clone();
            blocking(move || fs.read_versioned(ino, offset, want)).await
        };
        let (data, version) = match first {
            Ok(r) => r,
            Err(e) => {
                send(Err(on(&shown)(e))).await;
                return;
            }
        };
        let mut last = data.len() < want;
        for piece in data.chunks(READ_PIECE) {
            let chunk = pb::ReadChunk {
                offset,
                data: piece.to_vec(),
            };
            offset += piece.len() as u64;
            if !send(Ok(chunk)).await {
                return;
            }
        }
        drop(data);
        // The rest, piece by piece, while the version holds.
        while !last && offset < end {
            let want = (end - offset).min(READ_PIECE as u64) as usize;
            let fs = fs.clone();
            let result = blocking(move || fs.read_versioned(ino, offset, want)).await;
            let item = match result {
                Ok((data, _)) if data.is_empty() => break,
                Ok((_, now)) if now != version => {
                    last = true;
                    Err(changed_during_read(&shown, offset))
                }
                Ok((data, _)) => {
                    let n = data.len();
                    let at = offset;
                    offset += n as u64;
                    last = n < want;
                    Ok(pb::ReadChunk { offset: at, data })
                }
                Err(e) => {
                    last = true;
                    Err(on(&shown)(e))
                }
            };
            if !send(item).await {
                return;
            }
        }
    });
    Ok(ReadStream {
        rx,
        failure,
        _permit: permit,
    })
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

/// [`aborted`]: a range longer than [`SNAPSHOT_BYTES`] changed while it
/// was read past that point.
fn changed_during_read(shown: &str, offset: u64) -> Status {
    aborted(format_args!(
        "{shown} changed while it was read (at byte {offset}); ranges over {SNAPSHOT_BYTES} \
         bytes are read in pieces and stop rather than mix two versions: read it again"
    ))
}
