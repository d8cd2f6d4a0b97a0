//! The agent's file descriptors: the soft `RLIMIT_NOFILE` raised to the
//! hard limit at start, and a reserve of them that is never handed to
//! anyone outside the agent.
//!
//! Connections that others open (API and share clients, a sandbox's
//! connections to its egress proxy and the proxy's own upstream
//! connections) may hold at most [`Descriptors::outside`] descriptors
//! together; the rest, [`Descriptors::reserve`], stays for the agent's own
//! files: computers' databases, FUSE connections, the descriptor holder's
//! link, container runs' pipes. So a flood from outside ends at its limit
//! with `EMFILE` never reached.

use tracing::{info, warn};

/// Descriptors kept for the agent itself: a quarter of the limit, at least
/// 256.
pub fn reserve_for(limit: u64) -> u64 {
    (limit / 4).max(256).min(limit)
}

/// The agent's descriptor budget.
#[derive(Debug, Clone, Copy)]
pub struct Descriptors {
    /// The soft `RLIMIT_NOFILE` in force.
    pub limit: u64,
    /// Descriptors never handed to outside connections.
    pub reserve: u64,
}

impl Descriptors {
    /// Raises the soft `RLIMIT_NOFILE` to the hard limit (the `rlimit`
    /// crate; a failure is logged and the current limit kept) and returns
    /// the budget under the limit now in force.
    pub fn raise() -> Descriptors {
        let before = rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024);
        let limit = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(now) => {
                if now > before {
                    info!(
                        from = before,
                        to = now,
                        "raised the soft descriptor limit (RLIMIT_NOFILE) to the hard limit"
                    );
                }
                now
            }
            Err(e) => {
                warn!(error = %e, limit = before, "cannot raise the descriptor limit (RLIMIT_NOFILE)");
                before
            }
        };
        Descriptors::within(limit)
    }

    /// The budget under `limit` descriptors.
    pub fn within(limit: u64) -> Descriptors {
        Descriptors {
            limit,
            reserve: reserve_for(limit),
        }
    }

    /// Descriptors outside connections may hold together.
    pub fn outside(&self) -> usize {
        usize::try_from(self.limit - self.reserve).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_a_quarter_and_at_least_256() {
        assert_eq!(Descriptors::within(1024).outside(), 768);
        assert_eq!(Descriptors::within(8192).outside(), 6144);
        assert_eq!(Descriptors::within(300).outside(), 44);
        assert_eq!(Descriptors::within(100).outside(), 0);
    }
}
