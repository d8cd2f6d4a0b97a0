//! The pace a download's reader must keep: at least a minimum rate, so a
//! reader that stalls or trickles gives its download slot back instead of
//! holding it for as long as it likes.
//!
//! What counts is what the client has received: the bytes it acknowledged
//! on its connection ([`crate::gate::Ticket::bytes_acked`]), not what the
//! server handed to its buffers, which hold hundreds of KiB. In every
//! window of [`WINDOW`] the client must take at least `min_rate × WINDOW`
//! bytes; a download that falls behind is ended (the connection closed
//! before `Content-Length` bytes). Where the acknowledged bytes are not
//! known, only the idle timeout of each piece applies.

use std::time::Duration;

/// Span over which the minimum rate is measured.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The minimum rate of downloads.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes a second (0: no minimum).
    pub min_rate: u64,
    /// Span over which it is measured ([`WINDOW`]).
    pub window: Duration,
}

impl Pace {
    /// Completes once the client fell behind: over one window, `progress`
    /// (bytes the client has taken so far, `None` when unknown) moved by
    /// less than `min_rate × window`. Never completes with no minimum
    /// rate, nor while the progress is unknown.
    pub async fn fallen_behind(&self, mut progress: impl FnMut() -> Option<u64>) {
        if self.min_rate == 0 || self.window.is_zero() {
            return std::future::pending().await;
        }
        let need = (self.min_rate as f64 * self.window.as_secs_f64()) as u64;
        let mut last = progress();
        loop {
            tokio::time::sleep(self.window).await;
            let now = progress();
            if let (Some(before), Some(after)) = (last, now) {
                if after.saturating_sub(before) < need {
                    return;
                }
            }
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    const SPAN: Duration = Duration::from_millis(200);

    /// Ends the download in the first window that moved too little.
    #[tokio::test]
    async fn a_window_below_the_rate_ends_the_download() {
        let taken = Arc::new(AtomicU64::new(0));
        let feed = taken.clone();
        // 10 KiB/s: 2 KiB per 200 ms window. The client takes 3 KiB in
        // each of the first three windows, then 1 KiB.
        tokio::spawn(async move {
            tokio::time::sleep(SPAN / 2).await;
            for step in 0..20u64 {
                let per_window = if step < 3 { 3 } else { 1 };
                feed.fetch_add(per_window * 1024, Ordering::SeqCst);
                tokio::time::sleep(SPAN).await;
            }
        });
        let start = Instant::now();
        let pace = Pace {
            min_rate: 10 * 1024,
            window: SPAN,
        };
        pace.fallen_behind(|| Some(taken.load(Ordering::SeqCst)))
            .await;
        let took = start.elapsed();
        assert!(
            took >= SPAN * 4 && took < SPAN * 6,
            "ended after {took:?}, not in the fourth window"
        );
    }

    #[tokio::test]
    async fn no_rate_or_no_progress_known_never_ends_it() {
        let off = Pace {
            min_rate: 0,
            window: SPAN,
        };
        let unknown = Pace {
            min_rate: 1024,
            window: SPAN,
        };
        let both = async {
            tokio::join!(
                off.fallen_behind(|| Some(0)),
                unknown.fallen_behind(|| None)
            );
        };
        assert!(
            tokio::time::timeout(SPAN * 5, both).await.is_err(),
            "a download was ended without a known shortfall"
        );
    }
}
