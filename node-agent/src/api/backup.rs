//! The Backup call: a consistent copy of a computer's database, streamed.
//!
//! The engine writes the copy ([`agentcomputer_fs::Fs::backup_to`]) into
//! the agent's private scratch directory; the file is unlinked as soon as
//! it is open, so it never outlives the call (and a crash leaves it to the
//! scratch cleanup at the next start), and streamed from there in
//! [`CHUNK_BYTES`] pieces. Streaming through the API works the same in
//! local and cluster mode: the client never needs the node's disk.

use parking_lot::Mutex;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use tokio::sync::mpsc;
use tonic::Status;

use nix::errno::Errno;

use super::streams::{PermitStream, StreamPermit, idle_error};
use crate::blocking::blocking;
use crate::errors::{errno_status, on};
use crate::registry::Lease;

/// The stream of a Backup call: the copy's pieces, then the error that
/// ended it early, if any. Holds the stream's place under the stream caps
/// until dropped.
pub type BackupStream = PermitStream<pb::BackupChunk>;

/// Takes the backup of the leased computer now (before answering, so the
/// copy holds every call answered before this one began) and starts
/// streaming it. Errors: the engine's (`ENOSPC` when the node's disk cannot
/// hold the copy, `EIO`), `DEADLINE_EXCEEDED` for a client that takes no
/// piece for `idle_timeout`.
pub async fn start(
    lease: Lease,
    permit: StreamPermit,
    idle_timeout: Duration,
) -> Result<BackupStream, Status> {
    let name = lease.name().to_string();
    let path = lease
        .scratch_dir()
        .join(format!("backup-{name}-{:016x}.db", rand::random::<u64>()));
    let fs = lease.fs().clone();
    let shown = format!("backup of computer \"{name}\"");
    let (file, total) = {
        let shown = shown.clone();
        blocking(move || {
            let taken = fs.backup_to(&path).map_err(on(&shown));
            let opened = taken.and_then(|total| {
                std::fs::File::open(&path)
                    .map(|f| (f, total))
                    .map_err(|e| io_status(e, &shown))
            });
            // Open or not, the name goes: the descriptor keeps the bytes.
            let _ = std::fs::remove_file(&path);
            opened
        })
        .await?
    };
    // The copy is taken: the computer may hibernate while the client reads.
    drop(lease);
    let (tx, rx) = mpsc::channel(1);
    let failure = Arc::new(Mutex::new(None));
    let failed = failure.clone();
    tokio::spawn(async move {
        let file = Arc::new(Mutex::new(file));
        let mut offset = 0u64;
        loop {
            let file = file.clone();
            let piece = blocking(move || {
                let mut buf = vec![0u8; CHUNK_BYTES];
                let mut f = file.lock();
                let mut n = 0;
                while n < buf.len() {
                    match f.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                buf.truncate(n);
                Ok(buf)
            })
            .await;
            let (item, last) = match piece {
                Ok(data) if data.is_empty() => break,
                Ok(data) => {
                    let at = offset;
                    offset += data.len() as u64;
                    let last = offset >= total;
                    (
                        Ok(pb::BackupChunk {
                            offset: at,
                            data,
                            total_bytes: total,
                        }),
                        last,
                    )
                }
                Err(e) => (Err(io_status(e, &shown)), true),
            };
            match tokio::time::timeout(idle_timeout, tx.send(item)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    *failed.lock() = Some(idle_error(&shown, idle_timeout));
                    return;
                }
            }
            if last {
                break;
            }
        }
    });
    Ok(PermitStream::new(rx, failure, permit))
}

/// The status for a host I/O error on the copy: its errno (`EIO` without one).
fn io_status(e: std::io::Error, shown: &str) -> Status {
    let errno = e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO);
    errno_status(errno, shown)
}
