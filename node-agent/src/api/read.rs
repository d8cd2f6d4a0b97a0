//! The Read call: a ranged, streamed read of one regular file.

use agentcomputer_fs::FileKind;
use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use nix::errno::Errno;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::convert::resolve;
use super::errors::{errno_status, on};
use super::paths::ApiPath;
use crate::blocking::blocking;
use crate::registry::Lease;

/// Chunks buffered ahead of a slow client.
const READ_AHEAD: usize = 4;

/// The stream of a Read call.
pub type ReadStream = ReceiverStream<Result<pb::ReadChunk, Status>>;

/// Starts streaming `req`'s byte range in chunks of at most [`CHUNK_BYTES`].
/// The inode is resolved and opened before the first chunk, so a concurrent
/// rename or replace of the path does not mix two files in one read.
/// Errors before streaming: path errors, `EISDIR`, `EINVAL` for non-regular
/// files; during streaming: the engine's read errors.
pub async fn start(lease: Lease, req: pb::ReadRequest) -> Result<ReadStream, Status> {
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
    tokio::spawn(async move {
        // The lease and the open handle keep the computer and inode alive.
        let _keep = (lease, handle);
        let fs = _keep.0.fs().clone();
        let mut offset = req.offset;
        while offset < end {
            let want = (end - offset).min(CHUNK_BYTES as u64) as usize;
            let fs = fs.clone();
            let result = blocking(move || fs.read(ino, offset, want)).await;
            match result {
                Ok(data) if data.is_empty() => break,
                Ok(data) => {
                    let n = data.len();
                    if tx.send(Ok(pb::ReadChunk { offset, data })).await.is_err() {
                        return; // client went away
                    }
                    offset += n as u64;
                    if n < want {
                        break; // end of file
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(on(&shown)(e))).await;
                    return;
                }
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}
