//! Counters of the proxy's decisions.

use prometheus::{IntCounterVec, Opts, Registry};

/// Decisions of the egress proxy, as the Prometheus counter
/// `agentcomputer_egress_proxy_decisions_total{decision, reason}`:
/// `decision` is `allowed`, `denied` or `failed`; `reason` is empty for
/// allowed, one of `deny-all`, `not-listed`, `metadata`, `local`, `node`,
/// `unauthenticated`, `throttled` (a source past its wrong-credential
/// budget, answered `429`), `too-many-connections` (closed at accept: a
/// [`crate::ConnectionLimits`] limit), `bad-request` for denied, and `lookup`, `connect`
/// for failed. Cheap to clone (one shared counter).
#[derive(Clone)]
pub struct Metrics {
    decisions: IntCounterVec,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh, unregistered counter.
    pub fn new() -> Metrics {
        let decisions = IntCounterVec::new(
            Opts::new(
                "agentcomputer_egress_proxy_decisions_total",
                "Connections and requests the egress proxy allowed, denied or could not complete.",
            ),
            &["decision", "reason"],
        )
        .expect("valid metric definition");
        Metrics { decisions }
    }

    /// Registers the counter in `registry` (the agent's metrics endpoint).
    /// Errors: a counter of the same name is registered already.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.decisions.clone()))
    }

    /// Counts one decision.
    pub fn count(&self, decision: &str, reason: &str) {
        self.decisions.with_label_values(&[decision, reason]).inc();
    }

    /// How many decisions of this kind were counted.
    pub fn get(&self, decision: &str, reason: &str) -> u64 {
        self.decisions.with_label_values(&[decision, reason]).get()
    }
}
