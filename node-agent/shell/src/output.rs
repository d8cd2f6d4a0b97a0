//! Delivery of a script's output to the caller's channel, under the
//! combined stdout+stderr byte cap.

use crate::runtime::OutputChunk;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::mpsc::Sender;

/// Why the gate refused a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The cap was reached; the bytes up to it were delivered.
    CapReached,
    /// The receiver is gone or the run was abandoned.
    Closed,
}

/// Shared by the exec thread (which delivers) and the caller's task
/// (which closes it when the run ends or is abandoned). Closing drops the
/// gate's sender, so the caller's receiver ends even while an abandoned
/// exec thread still holds the gate.
pub(crate) struct OutputGate {
    tx: Mutex<Option<Sender<OutputChunk>>>,
    cap: u64,
    used: AtomicU64,
    cap_reached: AtomicBool,
    /// Taken by each delivery for its whole send, first come first served,
    /// so chunks reach the channel in the order their deliveries started
    /// (the `stderr` module relies on it).
    order: tokio::sync::Mutex<()>,
    /// Deliveries started so far (see [`OutputGate::deliveries`]).
    started: AtomicU64,
}

impl OutputGate {
    /// A gate delivering at most `cap` bytes in total to `tx`.
    pub(crate) fn new(tx: Sender<OutputChunk>, cap: u64) -> Self {
        Self {
            tx: Mutex::new(Some(tx)),
            cap,
            used: AtomicU64::new(0),
            cap_reached: AtomicBool::new(false),
            order: tokio::sync::Mutex::new(()),
            started: AtomicU64::new(0),
        }
    }

    /// Sends `bytes` as stdout or stderr, waiting for channel room (so a slow
    /// reader slows the script down rather than growing a buffer).
    pub(crate) async fn deliver(&self, stderr: bool, mut bytes: Vec<u8>) -> Result<(), Refusal> {
        let Some(tx) = self.sender() else {
            return Err(Refusal::Closed);
        };
        self.started.fetch_add(1, Ordering::AcqRel);
        let _turn = self.order.lock().await;
        let len = bytes.len() as u64;
        let before = self.used.fetch_add(len, Ordering::AcqRel);
        let room = self.cap.saturating_sub(before);
        let over = len > room;
        if over {
            bytes.truncate(room as usize);
            self.cap_reached.store(true, Ordering::Release);
        }
        if !bytes.is_empty() {
            let chunk = if stderr {
                OutputChunk::Stderr(bytes)
            } else {
                OutputChunk::Stdout(bytes)
            };
            if tx.send(chunk).await.is_err() {
                return Err(Refusal::Closed);
            }
        }
        if over {
            Err(Refusal::CapReached)
        } else {
            Ok(())
        }
    }

    fn sender(&self) -> Option<Sender<OutputChunk>> {
        self.tx.lock().clone()
    }

    /// How many deliveries have started: a count that stands still while
    /// no pump hands the gate anything.
    pub(crate) fn deliveries(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    /// Refuses all further output and lets go of the channel.
    pub(crate) fn close(&self) {
        self.tx.lock().take();
    }

    /// Whether the cap cut the output short.
    pub(crate) fn cap_reached(&self) -> bool {
        self.cap_reached.load(Ordering::Acquire)
    }

    /// The cap, in bytes.
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn cap_cuts_exactly_and_counts_both_streams() {
        let (tx, mut rx) = mpsc::channel(8);
        let gate = OutputGate::new(tx, 5);
        assert_eq!(gate.deliver(false, b"abc".to_vec()).await, Ok(()));
        assert_eq!(
            gate.deliver(true, b"def".to_vec()).await,
            Err(Refusal::CapReached)
        );
        assert_eq!(
            gate.deliver(false, b"g".to_vec()).await,
            Err(Refusal::CapReached)
        );
        assert!(gate.cap_reached());
        drop(gate);
        let mut got = Vec::new();
        while let Some(c) = rx.recv().await {
            got.push(c);
        }
        assert_eq!(
            got,
            vec![
                OutputChunk::Stdout(b"abc".to_vec()),
                OutputChunk::Stderr(b"de".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn closed_receiver_refuses() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let gate = OutputGate::new(tx, 100);
        assert_eq!(
            gate.deliver(false, b"x".to_vec()).await,
            Err(Refusal::Closed)
        );
    }

    #[tokio::test]
    async fn close_ends_the_receiver() {
        let (tx, mut rx) = mpsc::channel(1);
        let gate = OutputGate::new(tx, 100);
        gate.close();
        assert_eq!(rx.recv().await, None);
        assert_eq!(
            gate.deliver(false, b"x".to_vec()).await,
            Err(Refusal::Closed)
        );
    }
}
