//! Bounds on the connections the proxy holds: per computer, and for all
//! computers together, so one computer's flood of idle connections cannot
//! take the descriptors every other computer (and the agent itself) needs.
//!
//! A connection is counted from its accept to its end, under the key of
//! the listener it came in on (a computer's own listener counts as that
//! computer; the host-side credential listener is one key of its own). One
//! proxied connection holds two descriptors: the client's and the
//! upstream's.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Default of [`ConnectionLimits::new`]'s `per_key`: connections one
/// computer may hold through the proxy at once.
pub const DEFAULT_PER_COMPUTER: usize = 256;

/// Connection counts shared by every proxy of an agent. Cheap to clone.
#[derive(Clone)]
pub struct ConnectionLimits {
    inner: Arc<Inner>,
}

struct Inner {
    total: usize,
    per_key: usize,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    open: usize,
    by_key: HashMap<String, usize>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key (computer) holds its limit of connections.
    PerComputer,
    /// All proxies together hold the agent's limit.
    Total,
}

/// One admitted connection; dropping it gives the place back.
pub struct Admitted {
    inner: Arc<Inner>,
    key: Arc<str>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.inner.counts.lock();
        counts.open = counts.open.saturating_sub(1);
        if let Some(n) = counts.by_key.get_mut(&*self.key) {
            *n -= 1;
            if *n == 0 {
                counts.by_key.remove(&*self.key);
            }
        }
    }
}

impl Default for ConnectionLimits {
    /// No limit at all: for a listener whose connections are not one
    /// computer's (identified per request), which the caller bounds
    /// otherwise.
    fn default() -> ConnectionLimits {
        ConnectionLimits::new(usize::MAX, usize::MAX)
    }
}

impl ConnectionLimits {
    /// At most `total` connections for all keys together and `per_key`
    /// for one key (both at least 1).
    pub fn new(total: usize, per_key: usize) -> ConnectionLimits {
        ConnectionLimits {
            inner: Arc::new(Inner {
                total: total.max(1),
                per_key: per_key.max(1),
                counts: Mutex::new(Counts::default()),
            }),
        }
    }

    /// Limits that fit in `descriptors` descriptors (two per connection),
    /// with one computer allowed at most a quarter of them and never more
    /// than [`DEFAULT_PER_COMPUTER`] connections.
    pub fn within(descriptors: usize) -> ConnectionLimits {
        let total = descriptors / 2;
        ConnectionLimits::new(total, (total / 4).clamp(1, DEFAULT_PER_COMPUTER))
    }

    /// Counts one more connection of `key`, or says why not.
    pub fn admit(&self, key: &Arc<str>) -> Result<Admitted, Refusal> {
        let mut counts = self.inner.counts.lock();
        let mine = counts.by_key.get(&**key).copied().unwrap_or(0);
        if mine >= self.inner.per_key {
            return Err(Refusal::PerComputer);
        }
        if counts.open >= self.inner.total {
            return Err(Refusal::Total);
        }
        counts.open += 1;
        *counts.by_key.entry(key.to_string()).or_insert(0) += 1;
        Ok(Admitted {
            inner: Arc::clone(&self.inner),
            key: Arc::clone(key),
        })
    }

    /// Connections open now under `key`.
    pub fn open(&self, key: &str) -> usize {
        self.inner
            .counts
            .lock()
            .by_key
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The per-key limit.
    pub fn per_key(&self) -> usize {
        self.inner.per_key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_and_total_limits_hold_and_free_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let a1 = limits.admit(&a).unwrap();
        let _a2 = limits.admit(&a).unwrap();
        assert_eq!(limits.admit(&a).err(), Some(Refusal::PerComputer));
        let _b1 = limits.admit(&b).unwrap();
        assert_eq!(limits.admit(&b).err(), Some(Refusal::Total));
        drop(a1);
        assert_eq!(limits.open("a"), 1);
        assert!(limits.admit(&b).is_ok());
        let within = ConnectionLimits::within(3072);
        assert_eq!(within.per_key(), 256);
        assert_eq!(ConnectionLimits::within(400).per_key(), 50);
    }
}
