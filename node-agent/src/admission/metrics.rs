//! The admission gauges and counters.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts};

use super::*;

/// Gauges and counters of admission, registered with
/// [`Admission::register_metrics`].
pub(super) struct Metrics {
    pub(super) running: IntGauge,
    pub(super) queued: IntGauge,
    pub(super) reserved: IntGauge,
    pub(super) refused: IntCounterVec,
    pub(super) limits: IntGaugeVec,
}

impl Metrics {
    pub(super) fn new(config: &AdmissionConfig) -> Metrics {
        let m = Metrics {
            running: IntGauge::new(
                "agentcomputer_execs_running",
                "Execs admitted and not yet ended",
            )
            .expect("valid metric"),
            queued: IntGauge::new("agentcomputer_execs_queued", "Execs waiting for admission")
                .expect("valid metric"),
            reserved: IntGauge::new(
                "agentcomputer_exec_memory_reserved_bytes",
                "Memory budgets of the running execs, added up",
            )
            .expect("valid metric"),
            refused: IntCounterVec::new(
                Opts::new(
                    "agentcomputer_execs_refused_total",
                    "Execs refused with RESOURCE_EXHAUSTED, by the limit that kept them out",
                ),
                &["limit"],
            )
            .expect("valid metric"),
            limits: IntGaugeVec::new(
                Opts::new("agentcomputer_exec_limit", "Configured admission limits"),
                &["limit"],
            )
            .expect("valid metric"),
        };
        for limit in Limit::ALL {
            // Present from the start, so rates work before the first refusal.
            m.refused.with_label_values(&[limit.name()]);
            let value = match limit {
                Limit::Execs => config.slots() as i64,
                Limit::ExecsPerComputer => config.max_execs_per_computer as i64,
                Limit::Memory => i64::try_from(config.exec_memory_bytes).unwrap_or(i64::MAX),
                Limit::Queue => config.max_queued as i64,
            };
            m.limits.with_label_values(&[limit.name()]).set(value);
        }
        m
    }
}
