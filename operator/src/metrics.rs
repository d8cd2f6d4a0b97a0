//! Prometheus metrics of the operator (text exposition format at /metrics).
//!
//! - `agentcomputer_operator_reconciles_total{result="ok|error"}`
//! - `agentcomputer_operator_reconcile_errors_total{step, reason}`: one per
//!   failed step of a reconcile (`crate::steps::Step`; `reconcile` or
//!   `finalizer` for a failure outside the steps), `reason` as
//!   [`crate::Error::reason`]
//! - `agentcomputer_operator_reconcile_duration_seconds` (histogram)
//! - `agentcomputer_operator_computers{phase}`: computers by status.phase,
//!   refreshed from the cache at each scrape
//! - `agentcomputer_operator_leader`: 1 while this replica holds the lease

use std::time::Duration;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use kube::runtime::reflector::Store;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// The operator's metric families and their registry.
pub struct Metrics {
    registry: Registry,
    reconciles: IntCounterVec,
    errors: IntCounterVec,
    duration: HistogramVec,
    computers: IntGaugeVec,
    /// 1 while this replica is the leader.
    pub leader: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every family.
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("agentcomputer_operator".into()), None)
            .expect("valid prefix");
        let reconciles = IntCounterVec::new(
            Opts::new("reconciles_total", "Reconciles by result"),
            &["result"],
        )
        .unwrap();
        let errors = IntCounterVec::new(
            Opts::new(
                "reconcile_errors_total",
                "Failed steps of reconciles, by step and reason",
            ),
            &["step", "reason"],
        )
        .unwrap();
        let duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "Duration of one reconcile").buckets(
                vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ],
            ),
            &[],
        )
        .unwrap();
        let computers = IntGaugeVec::new(
            Opts::new("computers", "AgentComputers by phase"),
            &["phase"],
        )
        .unwrap();
        let leader =
            IntGauge::new("leader", "1 while this replica holds the leader lease").unwrap();
        for c in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(duration.clone()),
            Box::new(computers.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Self {
            registry,
            reconciles,
            errors,
            duration,
            computers,
            leader,
        }
    }

    /// Records one finished reconcile: `failed` lists `(step, reason)` of
    /// each step that failed, empty for a successful one.
    pub fn observe(&self, took: Duration, failed: &[(&str, &str)]) {
        self.duration
            .with_label_values::<&str>(&[])
            .observe(took.as_secs_f64());
        if failed.is_empty() {
            self.reconciles.with_label_values(&["ok"]).inc();
            return;
        }
        self.reconciles.with_label_values(&["error"]).inc();
        for (step, reason) in failed {
            self.errors.with_label_values(&[step, reason]).inc();
        }
    }

    /// Recounts computers by phase ("Unknown" before a first status).
    pub fn count_phases(&self, store: &Store<AgentComputer>) {
        let mut counts = [0i64; ComputerPhase::ALL.len()];
        let mut unknown = 0;
        for c in store.state() {
            match c.status.as_ref().and_then(|s| s.phase) {
                Some(p) => counts[ComputerPhase::ALL.iter().position(|q| *q == p).unwrap()] += 1,
                None => unknown += 1,
            }
        }
        for (p, n) in ComputerPhase::ALL.iter().zip(counts) {
            self.computers.with_label_values(&[p.as_str()]).set(n);
        }
        self.computers.with_label_values(&["Unknown"]).set(unknown);
    }

    /// Text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).expect("utf-8 exposition")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_exposition() {
        let m = Metrics::new();
        m.observe(Duration::from_millis(3), &[]);
        m.observe(
            Duration::from_millis(4),
            &[("volume", "forbidden"), ("egress", "invalid")],
        );
        let text = m.render();
        assert!(
            text.contains("agentcomputer_operator_reconciles_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "agentcomputer_operator_reconcile_errors_total{reason=\"forbidden\",step=\"volume\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains(
            "agentcomputer_operator_reconcile_errors_total{reason=\"invalid\",step=\"egress\"} 1"
        ));
        assert!(text.contains("agentcomputer_operator_reconciles_total{result=\"error\"} 1"));
        assert!(text.contains("agentcomputer_operator_reconcile_duration_seconds_count 2"));
    }
}
