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

use super::convert::resolve;
use super::errors::{errno_status, on};
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

/// Starts streaming `req`'s byte range in pieces of at most [`READ_PIECE`]
/// bytes. The inode is resolved and opened before the first piece, so a
/// concurrent rename or replace of the path does not mix two files in one
/// read. A client that takes no piece for `idle_timeout` gets
/// `DEADLINE_EXCEEDED`, and the lease and open handle are released then.
/// Errors before streaming: path errors, `EISDIR`, `EINVAL` for non-regular
/// files; during streaming: the engine's read errors.
pub async fn start(
    lease: Lease,
    req: pb::ReadRequest,
    permit: StreamPermit,
    idle_timeout: Duration,
) -> Result<ReadStream, Status> {
    let path = ApiPath::parse(&req.path)?;
    let fs = lease.fs().clone();
    let (ino, handle, shown) = blocking(move || {
        let attr = resolve(&fs, &path, true)?;
        match attr.kind {
            FileKind::RegularFile => {}
            FileKind::Directory => return Err(errno_status(Errno::EISDIR, path.shown())),
            _ => return Err(errno_status(Errno::EINVAL, path.shown())),
        }
        let handle = fs.open_inode(attr.ino).map_err(on(path.shown()))?;
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
        let mut offset = req.offset;
        while offset < end {
            let want = (end - offset).min(READ_PIECE as u64) as usize;
            let fs = fs.clone();
            let result = blocking(move || fs.read(ino, offset, want)).await;
            let (item, last) = match result {
                Ok(data) if data.is_empty() => break,
                Ok(data) => {
                    let n = data.len();
                    let at = offset;
                    offset += n as u64;
                    (Ok(pb::ReadChunk { offset: at, data }), n < want)
                }
                Err(e) => (Err(on(&shown)(e)), true),
            };
            match tokio::time::timeout(idle_timeout, tx.send(item)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return, // client went away
                Err(_) => {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(idle_error(&format!("read of {shown}"), idle_timeout));
                    return;
                }
            }
            if last {
                break; // end of file, or the error was sent
            }
        }
    });
    Ok(ReadStream {
        rx,
        failure,
        _permit: permit,
    })
}
