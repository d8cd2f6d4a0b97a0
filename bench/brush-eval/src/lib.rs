//! Measuring helpers of the `brush-eval` benchmark, which compares the
//! shell runtime (`agentcomputer-shell`, bashkit) with brush-core run in
//! the same process: a global allocator wrapper that counts live heap
//! bytes ([`Counting`]) and latency percentiles ([`Summary`]).
//!
//! The benchmark itself is `src/main.rs`, built only with the `bench`
//! feature (the runtime alone) or `brush` (both interpreters); see
//! `docs/shell-runtime.md`, "Interpreter choice: bashkit and brush".

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// A [`GlobalAlloc`] that forwards to `A` and keeps the number of live
/// heap bytes (requested sizes, not the allocator's rounding) and their
/// high-water mark in atomics.
pub struct Counting<A> {
    inner: A,
    live: AtomicI64,
    peak: AtomicI64,
}

impl<A> Counting<A> {
    /// Wraps `inner`; usable in a `static` with `#[global_allocator]`.
    pub const fn new(inner: A) -> Self {
        Self {
            inner,
            live: AtomicI64::new(0),
            peak: AtomicI64::new(0),
        }
    }

    /// The largest [`Counting::live_bytes`] since the last
    /// [`Counting::reset_peak`] (or since start).
    pub fn peak_bytes(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Starts a new high-water mark at the current live bytes.
    pub fn reset_peak(&self) {
        self.peak.store(self.live_bytes(), Ordering::Relaxed);
    }

    fn grew(&self, by: i64) {
        let now = self.live.fetch_add(by, Ordering::Relaxed) + by;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Bytes allocated and not yet freed through this allocator, summed
    /// over all threads (may be negative for a wrapper that was not the
    /// global allocator from the start).
    pub fn live_bytes(&self) -> i64 {
        self.live.load(Ordering::Relaxed)
    }
}

// SAFETY: every call is forwarded unchanged to `inner`, which upholds the
// GlobalAlloc contract; the counter has no effect on the memory returned.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same layout, forwarded.
        let p = unsafe { self.inner.alloc(layout) };
        if !p.is_null() {
            self.grew(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same layout, forwarded.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        if !p.is_null() {
            self.grew(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `inner` with this layout.
        unsafe { self.inner.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `inner` with `layout`.
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.grew(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
    /// Largest sample.
    pub max: Duration,
}

impl Summary {
    /// Summarizes `samples` (any order); `None` when empty.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        Some(Summary {
            n: s.len(),
            p50: nearest_rank(&s, 50.0),
            p99: nearest_rank(&s, 99.0),
            max: s[s.len() - 1],
        })
    }
}

/// The nearest-rank percentile `p` (0 < p ≤ 100) of sorted, non-empty
/// `sorted`: the smallest value with at least p % of samples at or below it.
pub fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Resident set size of this process in bytes, from `/proc/self/statm`
/// (its second field, in pages); `None` off Linux or when unreadable.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&x| Duration::from_millis(x)).collect()
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = Summary::of(&ms(&[5, 1, 4, 2, 3])).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.p50, Duration::from_millis(3));
        assert_eq!(s.p99, Duration::from_millis(5));
        assert_eq!(s.max, Duration::from_millis(5));
        // 100 samples 1..=100: p50 is the 50th, p99 the 99th.
        let v: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&ms(&v)).unwrap();
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn counting_allocator_tracks_live_bytes() {
        let a = Counting::new(System);
        let l = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: non-zero layout; each pointer is freed with its layout.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null());
            assert_eq!(a.live_bytes(), 1000);
            let q = a.alloc_zeroed(l);
            assert_eq!(*q, 0);
            assert_eq!(a.live_bytes(), 2000);
            let p = a.realloc(p, l, 3000);
            assert_eq!(a.live_bytes(), 4000);
            a.dealloc(p, Layout::from_size_align(3000, 8).unwrap());
            assert_eq!(a.peak_bytes(), 4000);
            a.reset_peak();
            assert_eq!(a.peak_bytes(), 1000);
            a.dealloc(q, l);
        }
        assert_eq!(a.live_bytes(), 0);
        assert_eq!(a.peak_bytes(), 1000);
    }

    #[test]
    fn rss_is_read_from_proc() {
        let rss = rss_bytes().expect("/proc/self/statm");
        // A running test binary has at least a megabyte resident.
        assert!(rss > 1 << 20, "rss {rss}");
    }
}
