//! The stop flag of one exec: raised by the runtime (timeout, cancellation,
//! a dropped caller) or by a long command that saw the deadline pass, and
//! seen by everything that must stop.
//!
//! bashkit's interpreter checks its own cancellation token before every
//! command, but only that token: a flag polled by
//! `Execution::cancel_with` is seen only when the interpreter yields
//! (every 64th command), so after a stopped `cp` the script's next
//! statements ran before anything noticed. Raising this flag also raises
//! every token linked to it ([`StopFlag::link`]), so the interpreter ends
//! the script at its next statement boundary.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once, never cleared; cheap to check (one atomic load).
#[derive(Debug, Default)]
pub(crate) struct StopFlag {
    raised: AtomicBool,
    /// Tokens raised together with this flag (the interpreter's).
    linked: Mutex<Vec<Arc<AtomicBool>>>,
}

impl StopFlag {
    /// A new flag, not raised.
    pub(crate) fn new() -> Arc<StopFlag> {
        Arc::default()
    }

    /// Raises the flag and every linked token. Idempotent.
    pub(crate) fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        for token in self.tokens().iter() {
            token.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the flag was raised.
    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Relaxed)
    }

    /// Raises `token` whenever this flag is raised: at once if it already
    /// was, else together with it.
    pub(crate) fn link(&self, token: Arc<AtomicBool>) {
        let mut tokens = self.tokens();
        tokens.push(Arc::clone(&token));
        // Under the lock: a `raise` that stored its flag before we pushed
        // either sees the token or is seen here.
        if self.raised.load(Ordering::SeqCst) {
            token.store(true, Ordering::SeqCst);
        }
    }

    fn tokens(&self) -> parking_lot::MutexGuard<'_, Vec<Arc<AtomicBool>>> {
        self.linked.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linked_tokens_rise_with_the_flag_before_or_after_linking() {
        let flag = StopFlag::new();
        let early = Arc::new(AtomicBool::new(false));
        flag.link(Arc::clone(&early));
        assert!(!flag.is_raised());
        assert!(!early.load(Ordering::SeqCst));
        flag.raise();
        assert!(flag.is_raised());
        assert!(early.load(Ordering::SeqCst));
        let late = Arc::new(AtomicBool::new(false));
        flag.link(Arc::clone(&late));
        assert!(late.load(Ordering::SeqCst));
    }
}
