//! A thread of its own for the archive code, which reads and writes
//! `std::io` streams, beside the command's async side.
//!
//! The exec's stdin arrives on the exec thread's runtime (the feeder is a
//! pipeline stage of the same interpreter), so the synchronous tar reader
//! cannot wait for it there: the command reads its input and hands it over
//! a bounded channel to the worker thread ([`ChannelReader`]), and takes
//! the archive the worker writes from another one ([`ChannelWriter`]).
//! At most [`AHEAD`] chunks wait either way, so memory stays bounded
//! whatever the archive's size. When the command stops (a timeout, a
//! reader gone), it drops its end and the worker's next read sees the end
//! of input, or its next write a broken pipe, and the worker ends.

use std::io::{Read, Write};
use tokio::sync::{mpsc, oneshot};

/// Chunks waiting between the command and the worker, either way.
pub(super) const AHEAD: usize = 4;

/// Bytes of archive the worker gathers before handing them over (256 KiB).
const OUT_CHUNK_BYTES: usize = 256 * 1024;

/// The archive as the command hands it over, read on the worker.
pub(super) struct ChannelReader {
    rx: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl ChannelReader {
    pub(super) fn new(rx: mpsc::Receiver<Vec<u8>>) -> ChannelReader {
        ChannelReader {
            rx,
            chunk: Vec::new(),
            at: 0,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                // The end of input, or the command stopped feeding: a cut
                // archive fails in the tar reader.
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The archive the worker writes, handed to the command in chunks of
/// [`OUT_CHUNK_BYTES`]. Errors: `BrokenPipe` once the command stopped
/// taking them.
pub(super) struct ChannelWriter {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    pub(super) fn new(tx: mpsc::Sender<Vec<u8>>) -> ChannelWriter {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(OUT_CHUNK_BYTES),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(OUT_CHUNK_BYTES));
        self.tx
            .blocking_send(data)
            .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(OUT_CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == OUT_CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Runs `work` on a thread of its own; its answer comes on the receiver
/// (closed without one if it panicked). Errors: no thread could start.
pub(super) fn spawn<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<oneshot::Receiver<T>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("shell-tar".into())
        .spawn(move || {
            let _ = tx.send(work());
        })?;
    Ok(rx)
}
