//! Download slots: how many share-link downloads run at once, on the whole
//! agent and per computer, so one computer's downloads (however slow their
//! readers) cannot take the places every other computer's links need.
//!
//! A slot is taken when a download starts sending its body and given back
//! when the body ends (sent, failed, or dropped for its reader). Nothing
//! waits: a download without a slot is answered `503` at once.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a download got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The computer runs its limit of downloads.
    Computer,
    /// The agent runs its limit of downloads (all computers together).
    Agent,
}

/// The agent's download slots. Cheap to clone.
#[derive(Clone)]
pub struct DownloadSlots {
    inner: Arc<Inner>,
}

struct Inner {
    total: usize,
    per_computer: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    by_computer: HashMap<String, usize>,
}

/// One running download; dropping it gives the slot back.
pub struct Slot {
    inner: Arc<Inner>,
    computer: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock();
        state.running = state.running.saturating_sub(1);
        if let Some(n) = state.by_computer.get_mut(&self.computer) {
            *n -= 1;
            if *n == 0 {
                state.by_computer.remove(&self.computer);
            }
        }
    }
}

/// Default per-computer limit for an agent-wide limit of `total`: an
/// eighth of it, at least 1. So at least eight computers' links are
/// served at once whatever the first one's readers do.
pub fn default_per_computer(total: usize) -> usize {
    (total / 8).max(1)
}

impl DownloadSlots {
    /// At most `total` downloads at once, and `per_computer` of one
    /// computer (both at least 1; `per_computer` at most `total`).
    pub fn new(total: usize, per_computer: usize) -> DownloadSlots {
        let total = total.max(1);
        DownloadSlots {
            inner: Arc::new(Inner {
                total,
                per_computer: per_computer.clamp(1, total),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Takes a slot for a download of `computer` (registry key), or says
    /// why there is none.
    pub fn take(&self, computer: &str) -> Result<Slot, Busy> {
        let mut state = self.inner.state.lock();
        let mine = state.by_computer.get(computer).copied().unwrap_or(0);
        if mine >= self.inner.per_computer {
            return Err(Busy::Computer);
        }
        if state.running >= self.inner.total {
            return Err(Busy::Agent);
        }
        state.running += 1;
        *state.by_computer.entry(computer.to_string()).or_insert(0) += 1;
        Ok(Slot {
            inner: Arc::clone(&self.inner),
            computer: computer.to_string(),
        })
    }

    /// Downloads of `computer` running now.
    #[cfg(test)]
    pub fn running(&self, computer: &str) -> usize {
        self.inner
            .state
            .lock()
            .by_computer
            .get(computer)
            .copied()
            .unwrap_or(0)
    }

    /// The per-computer limit in force.
    #[cfg(test)]
    pub fn per_computer(&self) -> usize {
        self.inner.per_computer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_computer_and_agent_limits_hold_and_free_on_drop() {
        let slots = DownloadSlots::new(3, 2);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert_eq!(slots.take("a").err(), Some(Busy::Computer));
        let _b1 = slots.take("b").unwrap();
        assert_eq!(slots.take("c").err(), Some(Busy::Agent));
        drop(a1);
        assert_eq!(slots.running("a"), 1);
        assert!(slots.take("c").is_ok());
        assert_eq!(default_per_computer(64), 8);
        assert_eq!(default_per_computer(3), 1);
        assert_eq!(DownloadSlots::new(4, 10).per_computer(), 4);
    }
}
