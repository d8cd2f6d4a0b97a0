//! The allocator of an exec's QuickJS runtime: the process's allocator
//! (mimalloc, through Rust's global allocator) instead of the C library's
//! malloc, and a safe point for CPU fairness.
//!
//! QuickJS checks for interrupts only every 10,000 calls or jumps, which a
//! loop allocating and filling megabytes per iteration reaches once in tens
//! of seconds. Allocations are where such a loop spends its time, so a
//! large one is also where a demoted exec waits for its computer's turn of
//! idle CPU ([`agentcomputer_sched::checkpoint`]). QuickJS's memory limit
//! (`JS_SetMemoryLimit`) is enforced before the allocator is called, so it
//! holds whatever the allocator.

use std::sync::Arc;

use rquickjs::allocator::{Allocator, RustAllocator};

use crate::stop::Stopper;

/// Allocations of at least this many bytes are safe points.
const CHECKPOINT_BYTES: usize = 64 * 1024;

/// [`RustAllocator`] with a fairness checkpoint before large allocations.
pub(crate) struct ExecAllocator {
    stop: Arc<Stopper>,
}

impl ExecAllocator {
    /// An allocator whose checkpoints end their wait when `stop` says the
    /// exec must stop.
    pub(crate) fn new(stop: Arc<Stopper>) -> ExecAllocator {
        ExecAllocator { stop }
    }

    fn checkpoint(&self, bytes: usize) {
        if bytes >= CHECKPOINT_BYTES {
            agentcomputer_sched::checkpoint(|| self.stop.should_stop());
        }
    }
}

// SAFETY: every call is forwarded unchanged to `RustAllocator`, which
// upholds the trait's contract; the checkpoint only blocks the calling
// thread before an allocation.
unsafe impl Allocator for ExecAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        self.checkpoint(size);
        RustAllocator.alloc(size)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        self.checkpoint(count.saturating_mul(size));
        RustAllocator.calloc(count, size)
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: `ptr` came from `RustAllocator` (the caller's contract).
        unsafe { RustAllocator.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        self.checkpoint(new_size);
        // SAFETY: as for `dealloc`.
        unsafe { RustAllocator.realloc(ptr, new_size) }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: as for `dealloc`.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
