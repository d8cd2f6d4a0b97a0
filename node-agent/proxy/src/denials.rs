//! The proxy's recent refusals per computer, so that the exec whose
//! program was refused can say why: a program behind the proxy sees only a
//! status (`curl` prints `CONNECT tunnel failed, response 403` and drops the
//! body that gives the policy's reason).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Refusals kept per computer: the most recent ones.
pub(crate) const KEPT_PER_COMPUTER: usize = 16;

/// Computers with refusals kept; past it, those whose last refusal is older
/// than [`STALE_AFTER`] are forgotten (and, if that frees none, all).
const MAX_COMPUTERS: usize = 4096;

/// Age past which a computer's refusals may be forgotten to make room.
const STALE_AFTER: Duration = Duration::from_secs(600);

/// One refusal: when, and the line an exec shows for it.
#[derive(Debug, Clone)]
struct Denial {
    at: Instant,
    line: String,
}

/// Recent refusals, keyed by the computer's registry key (its name
/// locally, its uid in a cluster). Cheap to clone; clones share the log.
#[derive(Debug, Clone, Default)]
pub struct Denials {
    by_computer: Arc<Mutex<HashMap<String, VecDeque<Denial>>>>,
}

impl Denials {
    /// An empty log.
    pub fn new() -> Denials {
        Denials::default()
    }

    /// Records that `computer`'s `method` request to `target` was refused
    /// for `reason` (the egress engine's words).
    pub fn record(&self, computer: &str, method: &str, target: &str, reason: &str) {
        let line = format!("egress denied {method} {target}: {reason}");
        let now = Instant::now();
        let mut all = self.by_computer.lock();
        if !all.contains_key(computer) && all.len() >= MAX_COMPUTERS {
            all.retain(|_, kept| {
                kept.back()
                    .is_some_and(|d| now.duration_since(d.at) < STALE_AFTER)
            });
            if all.len() >= MAX_COMPUTERS {
                all.clear();
            }
        }
        let kept = all.entry(computer.to_string()).or_default();
        if kept.len() == KEPT_PER_COMPUTER {
            kept.pop_front();
        }
        kept.push_back(Denial { at: now, line });
    }

    /// The lines of `computer`'s refusals at or after `since`, oldest
    /// first (the most recent 16 at most).
    pub fn since(&self, computer: &str, since: Instant) -> Vec<String> {
        self.by_computer
            .lock()
            .get(computer)
            .map(|kept| {
                kept.iter()
                    .filter(|d| d.at >= since)
                    .map(|d| d.line.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets `computer`'s refusals (it was deleted or moved away).
    pub fn forget(&self, computer: &str) {
        self.by_computer.lock().remove(computer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_per_computer_from_a_time_on() {
        let log = Denials::new();
        log.record("a", "CONNECT", "old.example:443", "not on the allow-list");
        let start = Instant::now();
        for i in 0..20 {
            log.record(
                "a",
                "CONNECT",
                &format!("h{i}.example:443"),
                "not on the allow-list",
            );
        }
        log.record("b", "GET", "http://x/", "deny-all");
        let seen = log.since("a", start);
        assert_eq!(seen.len(), KEPT_PER_COMPUTER);
        assert_eq!(
            seen[0],
            "egress denied CONNECT h4.example:443: not on the allow-list"
        );
        assert_eq!(
            seen.last().unwrap(),
            "egress denied CONNECT h19.example:443: not on the allow-list"
        );
        assert_eq!(
            log.since("b", start),
            vec!["egress denied GET http://x/: deny-all"]
        );
        assert!(log.since("c", start).is_empty());
        let later = Instant::now();
        assert!(log.since("a", later).is_empty());
        log.forget("a");
        assert!(log.since("a", start).is_empty());
    }

    #[test]
    fn the_number_of_computers_is_bounded() {
        let log = Denials::new();
        for i in 0..MAX_COMPUTERS + 10 {
            log.record(&format!("c{i}"), "CONNECT", "x:443", "deny-all");
        }
        assert!(log.by_computer.lock().len() <= MAX_COMPUTERS);
        let last = format!("c{}", MAX_COMPUTERS + 9);
        assert_eq!(
            log.since(&last, Instant::now() - Duration::from_secs(5))
                .len(),
            1
        );
    }
}
