//! Per-credential and per-computer limits: calls in flight (a streaming
//! call counts until it ends) and calls started per second.
//!
//! One computer has one credential, so the two differ only while a token
//! is rotated (old and new both route to the computer until the old
//! fingerprint is gone) and in what they protect: the per-computer limit
//! keeps one tenant from taking the node agent serving it, the
//! per-credential rate keeps a leaked or looping client from taking the
//! gateway. A call past a limit gets `RESOURCE_EXHAUSTED` naming it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits' settings.
#[derive(Clone, Copy, Debug)]
pub struct LimitSettings {
    /// Calls in flight per computer.
    pub per_computer_in_flight: usize,
    /// Calls in flight per credential.
    pub per_token_in_flight: usize,
    /// Calls started per second per credential (a token bucket holding
    /// twice this).
    pub per_token_rate: f64,
}

impl Default for LimitSettings {
    fn default() -> LimitSettings {
        LimitSettings {
            per_computer_in_flight: 128,
            per_token_in_flight: 64,
            per_token_rate: 200.0,
        }
    }
}

/// Which limit refused a call, with its value.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Exceeded {
    /// The computer has `limit` calls in flight.
    #[error(
        "too many calls in flight for computer {computer}: at most {limit} at once (gateway --per-computer-in-flight)"
    )]
    ComputerInFlight {
        /// `NAMESPACE/NAME`.
        computer: String,
        /// The limit.
        limit: usize,
    },
    /// The credential has `limit` calls in flight.
    #[error(
        "too many calls in flight with this credential: at most {limit} at once (gateway --per-token-in-flight)"
    )]
    TokenInFlight {
        /// The limit.
        limit: usize,
    },
    /// The credential started its burst's worth of calls faster than
    /// `limit` a second.
    #[error(
        "too many calls with this credential: at most {limit} a second (gateway --per-token-rate)"
    )]
    TokenRate {
        /// The limit, calls a second.
        limit: f64,
    },
}

/// Held for a call's whole life; dropping it frees its places.
pub struct Admitted {
    _computer: OwnedSemaphorePermit,
    _token: OwnedSemaphorePermit,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The limits' state, by computer and by credential fingerprint.
pub struct Limits {
    settings: LimitSettings,
    computers: Mutex<HashMap<String, Arc<Semaphore>>>,
    tokens: Mutex<HashMap<String, (Arc<Semaphore>, Bucket)>>,
}

/// Entries kept before idle ones are dropped (a full semaphore and a full
/// bucket hold nothing worth keeping).
const PRUNE_AT: usize = 4096;

impl Limits {
    /// No call admitted yet.
    pub fn new(settings: LimitSettings) -> Limits {
        Limits {
            settings,
            computers: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a call of `computer` (`NAMESPACE/NAME`) with the credential
    /// whose fingerprint is `token`, or says which limit it would pass.
    pub fn admit(&self, computer: &str, token: &str) -> Result<Admitted, Exceeded> {
        let s = self.settings;
        let token_permit = {
            let mut tokens = self.tokens.lock();
            if tokens.len() >= PRUNE_AT {
                let full = s.per_token_in_flight;
                tokens.retain(|_, (sem, _)| sem.available_permits() < full);
            }
            let (sem, bucket) = tokens.entry(token.to_string()).or_insert_with(|| {
                (
                    Arc::new(Semaphore::new(s.per_token_in_flight)),
                    Bucket {
                        tokens: 2.0 * s.per_token_rate,
                        at: Instant::now(),
                    },
                )
            });
            let now = Instant::now();
            let burst = 2.0 * s.per_token_rate;
            bucket.tokens = (bucket.tokens
                + now.duration_since(bucket.at).as_secs_f64() * s.per_token_rate)
                .min(burst);
            bucket.at = now;
            if bucket.tokens < 1.0 {
                return Err(Exceeded::TokenRate {
                    limit: s.per_token_rate,
                });
            }
            let permit = sem
                .clone()
                .try_acquire_owned()
                .map_err(|_| Exceeded::TokenInFlight {
                    limit: s.per_token_in_flight,
                })?;
            bucket.tokens -= 1.0;
            permit
        };
        let computer_permit = {
            let mut computers = self.computers.lock();
            if computers.len() >= PRUNE_AT {
                let full = s.per_computer_in_flight;
                computers.retain(|_, sem| sem.available_permits() < full);
            }
            computers
                .entry(computer.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(s.per_computer_in_flight)))
                .clone()
                .try_acquire_owned()
                .map_err(|_| Exceeded::ComputerInFlight {
                    computer: computer.to_string(),
                    limit: s.per_computer_in_flight,
                })?
        };
        Ok(Admitted {
            _computer: computer_permit,
            _token: token_permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_refuses_past_its_value_and_frees_with_the_call() {
        let l = Limits::new(LimitSettings {
            per_computer_in_flight: 2,
            per_token_in_flight: 3,
            per_token_rate: 1000.0,
        });
        let a = l.admit("ns/c", "t1").unwrap();
        let _b = l.admit("ns/c", "t2").unwrap();
        assert!(matches!(
            l.admit("ns/c", "t3"),
            Err(Exceeded::ComputerInFlight { limit: 2, .. })
        ));
        drop(a);
        let _c = l.admit("ns/c", "t3").unwrap();
        let _d = l.admit("ns/x", "t4").unwrap();
        let _e = l.admit("ns/y", "t4").unwrap();
        let _f = l.admit("ns/z", "t4").unwrap();
        assert_eq!(
            l.admit("ns/w", "t4").err(),
            Some(Exceeded::TokenInFlight { limit: 3 })
        );
    }

    #[test]
    fn the_rate_allows_a_burst_of_twice_the_rate_then_refuses() {
        let l = Limits::new(LimitSettings {
            per_computer_in_flight: 1000,
            per_token_in_flight: 1000,
            per_token_rate: 5.0,
        });
        let admitted = (0..20).filter(|_| l.admit("ns/c", "t").is_ok()).count();
        // 10 in the bucket, and whatever refilled while the loop ran.
        assert!((10..=11).contains(&admitted), "{admitted}");
        let e = l.admit("ns/c", "t").err().unwrap();
        assert!(e.to_string().contains("at most 5 a second"), "{e}");
    }
}
