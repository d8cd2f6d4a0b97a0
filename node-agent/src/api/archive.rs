//! Export and Import: a tree of a computer as a tar stream, out and in.
//!
//! Export walks a directory without following any symlink under it and
//! writes GNU tar (long names as GNU extension entries) into a bounded
//! channel of chunks, on a blocking thread: a slow client holds the walk
//! back. Import reads the caller's tar stream on a blocking thread through
//! a bounded channel and unpacks each entry into the engine as it comes, so
//! neither side holds the archive.
//!
//! An archive comes from whoever holds the token, so Import trusts none of
//! its names: the packing and the guarded unpacking are those of
//! `agentcomputer-archive` ([`unpack_whole`], [`Packer`]), whose guard the
//! shell runtime's `tar` uses too; this file carries them over gRPC streams
//! and turns their errors into statuses ([`archive_status`]). An Import is
//! all or nothing: unpacked into a hidden directory under the target and
//! merged in only once the whole archive is in.

use std::io::{Read, Write};

use agentcomputer_archive::{ArchiveError, Packer, unpack_whole};
use agentcomputer_fs::FileKind;
use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use nix::errno::Errno;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::convert::{OWNER, resolve};
use super::streams::{StreamGate, idle_error};
use crate::errors::{errno_detail, fs_status};
use crate::paths::ApiPath;
use crate::registry::{Lease, Registry};

/// Chunks of an archive buffered between the blocking thread and the
/// client, either way.
const AHEAD: usize = 4;

/// The stream of an Export call.
pub type ExportStream = ReceiverStream<Result<pb::ExportChunk, Status>>;

/// Starts writing `req.path` of the leased computer as a tar stream,
/// holding `permit` (the stream caps) until it ends. Errors before
/// streaming: path errors; during: the engine's, and `DEADLINE_EXCEEDED`
/// when the client takes no chunk for `idle` (the lease and permit are
/// released then).
pub async fn export(
    lease: Lease,
    permit: super::streams::StreamPermit,
    req: pb::ExportRequest,
    idle: std::time::Duration,
) -> Result<ExportStream, Status> {
    let path = ApiPath::parse(&req.path)?;
    let fs = lease.fs().clone();
    let root = {
        let (fs, path) = (fs.clone(), path.clone());
        crate::blocking::blocking(move || resolve(&fs, &path, true)).await?
    };
    let top = match path.split_last() {
        Some((_, name)) => name.to_string(),
        None => "workspace".to_string(),
    };
    let (tx, rx) = mpsc::channel(AHEAD);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        // Held while the archive is written: the computer stays open and
        // the stream counts against the caps of Read and Write streams.
        let _held = (lease, permit);
        let sink = ChunkSink {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
            runtime,
            idle,
        };
        let mut packer = Packer::new(&fs, sink);
        let name = match root.kind {
            FileKind::Directory => ".",
            _ => top.as_str(),
        };
        let done = packer.add(&root, name).and_then(|()| packer.finish());
        match done {
            Ok(_) => {}
            // A client that left is no error to report.
            Err(ArchiveError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(ArchiveError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                let _ = tx.try_send(Err(idle_error("export", idle)));
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(archive_status(e)));
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}

/// Collects the archive into chunks of [`CHUNK_BYTES`] for the client.
struct ChunkSink {
    tx: mpsc::Sender<Result<pb::ExportChunk, Status>>,
    buf: Vec<u8>,
    /// Where the wait for room in `tx` is timed.
    runtime: tokio::runtime::Handle,
    /// Longest wait for the client to take a chunk.
    idle: std::time::Duration,
}

impl ChunkSink {
    /// Sends the buffered chunk. Errors: `BrokenPipe` when the client left,
    /// `TimedOut` when it took nothing for the idle timeout.
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        let sent = self.runtime.block_on(tokio::time::timeout(
            self.idle,
            self.tx.send(Ok(pb::ExportChunk { data })),
        ));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(std::io::ErrorKind::BrokenPipe.into()),
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

impl Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Serves one Import stream; `authorize` checks the caller's credential
/// for the computer the header names and returns its registry key.
/// Errors (each leaving the directory as it was): `EINVAL` for a stream
/// not starting with a header and for every entry the guard refuses, `ECANCELED` for a stream that ends without
/// `ImportEnd`, path errors of the directory (`ENOTDIR`, `ENOENT`), the
/// engine's errors naming the entry (`ENOSPC`, `EDQUOT`), and
/// `DEADLINE_EXCEEDED` when no message came for the idle timeout.
pub async fn import(
    registry: &Registry,
    authorize: impl FnOnce(&str) -> Result<String, Status>,
    gate: &StreamGate,
    client: &str,
    mut stream: Streaming<pb::ImportRequest>,
) -> Result<pb::ImportResponse, Status> {
    use pb::import_request::Msg;
    let idle = gate.limits().idle_timeout;
    let first = match tokio::time::timeout(idle, stream.message()).await {
        Ok(first) => first?,
        Err(_) => return Err(idle_error("import", idle)),
    };
    let Some(pb::ImportRequest {
        msg: Some(Msg::Header(header)),
    }) = first
    else {
        return Err(errno_detail(
            Errno::EINVAL,
            "the first Import message must be a header",
        ));
    };
    let key = authorize(&header.computer)?;
    let _permit = gate.admit(client, &key)?;
    let lease = registry.acquire(&key).await?;
    let path = ApiPath::parse(&header.path)?;
    let fs = lease.fs().clone();
    let dir = {
        let (fs, path) = (fs.clone(), path.clone());
        crate::blocking::blocking(move || resolve(&fs, &path, true)).await?
    };
    if dir.kind != FileKind::Directory {
        return Err(crate::errors::errno_status(Errno::ENOTDIR, path.shown()));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(AHEAD);
    let unpack = {
        let fs = fs.clone();
        tokio::task::spawn_blocking(move || {
            let reader = ChannelReader {
                rx,
                chunk: Vec::new(),
                at: 0,
            };
            unpack_whole(&fs, dir.ino, OWNER, reader)
                .map(|done| pb::ImportResponse {
                    entries: done.entries,
                    bytes: done.bytes,
                })
                .map_err(archive_status)
        })
    };
    // Feeds the unpacker until the end message; the unpacker ending first
    // (a refused entry, the quota) drops the receiver and ends the feed.
    let fed: Result<(), Status> = async {
        loop {
            let message = match tokio::time::timeout(idle, stream.message()).await {
                Ok(m) => m?,
                Err(_) => return Err(idle_error("import", idle)),
            };
            match message {
                Some(pb::ImportRequest {
                    msg: Some(Msg::Data(data)),
                }) => {
                    let tx = tx.clone();
                    let sent = tokio::task::spawn_blocking(move || tx.send(data).is_ok())
                        .await
                        .unwrap_or(false);
                    if !sent {
                        return Ok(());
                    }
                }
                Some(pb::ImportRequest {
                    msg: Some(Msg::End(_)),
                }) => return Ok(()),
                Some(_) => {
                    return Err(errno_detail(
                        Errno::EINVAL,
                        "an Import message after the header must be data or the end",
                    ));
                }
                None => {
                    return Err(errno_detail(
                        Errno::ECANCELED,
                        "the Import stream ended without its end message",
                    ));
                }
            }
        }
    }
    .await;
    drop(tx);
    if let Err(status) = fed {
        // The unpacker sees the channel close mid-archive and stops.
        let _ = unpack.await;
        return Err(status);
    }
    let summary = unpack
        .await
        .map_err(|e| Status::internal(format!("EIO: import: {e}")))??;
    let fs2 = fs.clone();
    crate::blocking::blocking(move || fs2.fsync(None))
        .await
        .map_err(|e| fs_status(&e, path.shown()))?;
    if lease.deleted() {
        return Err(crate::errors::deleted_during(lease.name(), "the import"));
    }
    Ok(summary)
}

/// The caller's tar stream, read on the blocking thread.
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                // The end: a stream that ended early fails in the tar reader
                // (a short entry) or before the Import answers.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// An archive failure as the call's status: a refused entry and a broken
/// archive are `EINVAL` (`"EINVAL: archive entry \"x\" refused: ..."`),
/// the engine's errors keep their errno and name the entry, a stream error
/// is `EIO`.
fn archive_status(e: ArchiveError) -> Status {
    match e {
        ArchiveError::Fs { name, error } => fs_status(&error, &name),
        e @ (ArchiveError::Refused { .. } | ArchiveError::Malformed { .. }) => {
            errno_detail(Errno::EINVAL, e)
        }
        ArchiveError::Io(e) => Status::internal(format!("EIO: archive: {e}")),
    }
}
