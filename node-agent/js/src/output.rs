//! Streams stdout/stderr to the caller as produced, under the output cap.

use std::cell::Cell;
use std::sync::Arc;

use tokio::sync::mpsc::{Sender, error::TrySendError};

use crate::OutputChunk;
use crate::stop::{StopReason, Stopper};

/// Which stream a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

pub(crate) struct OutputSink {
    tx: Sender<OutputChunk>,
    handle: tokio::runtime::Handle,
    stop: Arc<Stopper>,
    cancel: tokio_util::sync::CancellationToken,
    cap: u64,
    written: Cell<u64>,
}

impl OutputSink {
    pub(crate) fn new(
        tx: Sender<OutputChunk>,
        handle: tokio::runtime::Handle,
        stop: Arc<Stopper>,
        cancel: tokio_util::sync::CancellationToken,
        cap: u64,
    ) -> OutputSink {
        OutputSink {
            tx,
            handle,
            stop,
            cancel,
            cap,
            written: Cell::new(0),
        }
    }

    /// The output cap in bytes.
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// Writes what fits under the cap. Returns false when the cap was hit
    /// (the exec is then stopping) or the caller went away.
    pub(crate) fn write(&self, stream: Stream, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return true;
        }
        let room = self.cap.saturating_sub(self.written.get());
        let fits = (bytes.len() as u64).min(room) as usize;
        if fits > 0 {
            self.written.set(self.written.get() + fits as u64);
            self.send(stream, bytes[..fits].to_vec());
        }
        if fits < bytes.len() {
            self.stop.stop(StopReason::OutputCap);
            return false;
        }
        true
    }

    /// Writes past the cap: for the final report of why the exec ended.
    pub(crate) fn write_final(&self, stream: Stream, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.send(stream, bytes.to_vec());
        }
    }

    fn send(&self, stream: Stream, bytes: Vec<u8>) {
        let chunk = match stream {
            Stream::Stdout => OutputChunk::Stdout(bytes),
            Stream::Stderr => OutputChunk::Stderr(bytes),
        };
        match self.tx.try_send(chunk) {
            Ok(()) => {}
            Err(TrySendError::Closed(_)) => self.stop.stop(StopReason::Cancelled),
            Err(TrySendError::Full(chunk)) => self.send_blocking(chunk),
        }
    }

    /// The caller is slower than the code: wait for room, but never past the
    /// deadline or a cancellation.
    fn send_blocking(&self, chunk: OutputChunk) {
        let deadline = tokio::time::Instant::from_std(self.stop.deadline);
        let sent = self.handle.block_on(async {
            tokio::select! {
                r = self.tx.send(chunk) => Some(r.is_ok()),
                _ = self.cancel.cancelled() => None,
                _ = tokio::time::sleep_until(deadline) => None,
            }
        });
        match sent {
            Some(true) => {}
            Some(false) | None if self.cancel.is_cancelled() => {
                self.stop.stop(StopReason::Cancelled)
            }
            Some(false) => self.stop.stop(StopReason::Cancelled),
            None => self.stop.stop(StopReason::Timeout),
        }
    }
}
