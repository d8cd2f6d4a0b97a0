//! Reading a sandbox's stdout and stderr as they come, under one cap on
//! the bytes of both together.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, mpsc};

use crate::OutputChunk;

/// Bytes read at most per chunk.
const READ_SIZE: usize = 64 * 1024;

/// The shared budget of both streams; `over` is notified once the cap is
/// passed.
pub(crate) struct Budget {
    left: AtomicU64,
    pub(crate) cap: u64,
    pub(crate) over: Notify,
    passed: std::sync::atomic::AtomicBool,
}

impl Budget {
    pub(crate) fn new(cap: u64) -> Arc<Budget> {
        Arc::new(Budget {
            left: AtomicU64::new(cap),
            cap,
            over: Notify::new(),
            passed: Default::default(),
        })
    }

    /// Takes up to `n` bytes; returns how many may be sent. Taking fewer
    /// than asked marks the budget passed.
    fn take(&self, n: u64) -> u64 {
        let mut left = self.left.load(Ordering::SeqCst);
        loop {
            let grant = left.min(n);
            match self
                .left
                .compare_exchange(left, left - grant, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    if grant < n {
                        self.passed.store(true, Ordering::SeqCst);
                        self.over.notify_one();
                    }
                    return grant;
                }
                Err(now) => left = now,
            }
        }
    }

    /// Whether some output was cut.
    pub(crate) fn passed(&self) -> bool {
        self.passed.load(Ordering::SeqCst)
    }
}

/// Forwards `stream` to `out` until end of file, the budget is passed or
/// `out` is closed. Returns whether `out` was found closed.
pub(crate) async fn forward<R: AsyncRead + Unpin>(
    mut stream: R,
    stdout: bool,
    budget: Arc<Budget>,
    out: mpsc::Sender<OutputChunk>,
) -> bool {
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let grant = budget.take(n as u64) as usize;
        if grant > 0 {
            let bytes = buf[..grant].to_vec();
            let chunk = if stdout {
                OutputChunk::Stdout(bytes)
            } else {
                OutputChunk::Stderr(bytes)
            };
            if out.send(chunk).await.is_err() {
                return true;
            }
        }
        if grant < n {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_cap_is_shared_and_cuts_exactly() {
        let budget = Budget::new(5);
        let (tx, mut rx) = mpsc::channel(8);
        forward(&b"abc"[..], true, budget.clone(), tx.clone()).await;
        assert!(!budget.passed());
        forward(&b"defg"[..], false, budget.clone(), tx).await;
        assert!(budget.passed());
        assert_eq!(rx.recv().await, Some(OutputChunk::Stdout(b"abc".to_vec())));
        assert_eq!(rx.recv().await, Some(OutputChunk::Stderr(b"de".to_vec())));
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_closed_receiver_is_reported() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        assert!(forward(&b"x"[..], true, Budget::new(10), tx).await);
    }
}
