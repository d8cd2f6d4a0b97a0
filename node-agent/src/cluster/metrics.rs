//! The node agent's Prometheus metrics (the `prometheus` crate), served at
//! `/metrics` in the text exposition format.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `agentcomputer_node_execs_total` | counter | `runtime`, `outcome` |
//! | `agentcomputer_node_exec_duration_seconds` | histogram | `runtime` |
//! | `agentcomputer_node_computers` | gauge | `state` (`open`, `hibernated`) |
//! | `agentcomputer_node_stored_bytes` | gauge | |
//! | `agentcomputer_node_stored_inodes` | gauge | |
//! | `agentcomputer_node_disk_bytes` | gauge | |
//! | `agentcomputer_node_fuse_connections` | gauge | |
//! | `agentcomputer_node_credential_refusals_total` | counter | `code` |
//! | `agentcomputer_node_sandbox_runners` | gauge | (registered by [`super::sandboxes`]) |
//! | `agentcomputer_node_backup_lag_seconds` | gauge | |
//! | `agentcomputer_node_backup_uploads_total` | counter | |
//! | `agentcomputer_node_backup_uploaded_bytes_total` | counter | |
//! | `agentcomputer_node_backup_failed_rounds_total` | counter | |
//! | `agentcomputer_node_backup_stopped` | gauge | |
//!
//! The backup families are 0 on an agent without a backup store. Their
//! counters count every shipper of this process, also those stopped when
//! their computer closed ([`crate::registry::Registry::backup_totals`]).
//!
//! And the standard process families of the Prometheus client libraries
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`,
//! `process_open_fds`, ...), read from `/proc/self`.

use std::time::{Duration, Instant};

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use tonic::Code;

use crate::api::ExecOutcome;
use crate::registry::{BackupReport, ShippedTotals};

/// Upper bounds of the exec latency buckets, seconds: from the in-process
/// runtimes' sub-millisecond starts to the longest timeouts.
const EXEC_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0,
];

/// Every metric of the node agent.
pub struct Metrics {
    registry: Registry,
    execs: IntCounterVec,
    exec_seconds: HistogramVec,
    computers: IntGaugeVec,
    stored_bytes: IntGauge,
    stored_inodes: IntGauge,
    disk_bytes: IntGauge,
    fuse_connections: IntGauge,
    refusals: IntCounterVec,
    backup_lag: Gauge,
    backup_uploads: IntCounter,
    backup_bytes: IntCounter,
    backup_failed_rounds: IntCounter,
    backup_stopped: IntGauge,
}

/// The backup gauges of the open computers' reports at `now`: the largest
/// lag in seconds (0 when everything committed is shipped), and how many
/// computers' backup does not run.
pub fn backup_gauges(reports: &[BackupReport], now: Instant) -> (f64, usize) {
    let mut lag = Duration::ZERO;
    let mut stopped = 0;
    for r in reports {
        match &r.state {
            Ok(p) => {
                if let Some(since) = p.unshipped_since {
                    lag = lag.max(now.saturating_duration_since(since));
                }
            }
            Err(_) => stopped += 1,
        }
    }
    (lag.as_secs_f64(), stopped)
}

impl Metrics {
    /// The registry behind `/metrics`, for families other modules own
    /// (the exec admission's).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Registers every family, with the exec counters and refusal codes
    /// present at zero so dashboards see them before the first event.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let execs = IntCounterVec::new(
            Opts::new(
                "agentcomputer_node_execs_total",
                "Execs ended, by runtime and outcome",
            ),
            &["runtime", "outcome"],
        )
        .expect("valid metric");
        let exec_seconds = HistogramVec::new(
            HistogramOpts::new(
                "agentcomputer_node_exec_duration_seconds",
                "Wall-clock time of execs that ran, by runtime",
            )
            .buckets(EXEC_BUCKETS.to_vec()),
            &["runtime"],
        )
        .expect("valid metric");
        let computers = IntGaugeVec::new(
            Opts::new(
                "agentcomputer_node_computers",
                "Computers stored on this node, by state: open (engine loaded) or hibernated",
            ),
            &["state"],
        )
        .expect("valid metric");
        let stored_bytes = IntGauge::new(
            "agentcomputer_node_stored_bytes",
            "Bytes of file content stored by this node's computers",
        )
        .expect("valid metric");
        let stored_inodes = IntGauge::new(
            "agentcomputer_node_stored_inodes",
            "Inodes in use in this node's computers",
        )
        .expect("valid metric");
        let disk_bytes = IntGauge::new(
            "agentcomputer_node_disk_bytes",
            "Bytes this node's computers' databases take on its disk (files plus write-ahead logs)",
        )
        .expect("valid metric");
        let fuse_connections = IntGauge::new(
            "agentcomputer_node_fuse_connections",
            "FUSE connections this agent serves",
        )
        .expect("valid metric");
        let refusals = IntCounterVec::new(
            Opts::new(
                "agentcomputer_node_credential_refusals_total",
                "API calls refused by the credential check, by gRPC code",
            ),
            &["code"],
        )
        .expect("valid metric");
        let backup_lag = Gauge::new(
            "agentcomputer_node_backup_lag_seconds",
            "How long the oldest commit not yet shipped to the backup store has waited, the largest over open computers (0: all shipped)",
        )
        .expect("valid metric");
        let backup_uploads = IntCounter::new(
            "agentcomputer_node_backup_uploads_total",
            "Objects uploaded to the backup store",
        )
        .expect("valid metric");
        let backup_bytes = IntCounter::new(
            "agentcomputer_node_backup_uploaded_bytes_total",
            "Bytes of the objects uploaded to the backup store",
        )
        .expect("valid metric");
        let backup_failed_rounds = IntCounter::new(
            "agentcomputer_node_backup_failed_rounds_total",
            "Backup rounds that failed (and were retried, unless the backup stopped)",
        )
        .expect("valid metric");
        let backup_stopped = IntGauge::new(
            "agentcomputer_node_backup_stopped",
            "Open computers whose backup does not run (could not start, or stopped)",
        )
        .expect("valid metric");
        for c in [
            Box::new(execs.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(exec_seconds.clone()),
            Box::new(computers.clone()),
            Box::new(stored_bytes.clone()),
            Box::new(stored_inodes.clone()),
            Box::new(disk_bytes.clone()),
            Box::new(fuse_connections.clone()),
            Box::new(refusals.clone()),
            Box::new(backup_lag.clone()),
            Box::new(backup_uploads.clone()),
            Box::new(backup_bytes.clone()),
            Box::new(backup_failed_rounds.clone()),
            Box::new(backup_stopped.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        // The agent's own memory and CPU: what an operator watches first
        // on a node agent that serves many computers.
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metric names are unique");
        for runtime in ["shell", "javascript"] {
            for outcome in ExecOutcome::ALL {
                execs.with_label_values(&[runtime, outcome.as_str()]);
            }
            exec_seconds.with_label_values(&[runtime]);
        }
        for code in [Code::Unauthenticated, Code::NotFound] {
            refusals.with_label_values(&[code_name(code)]);
        }
        Metrics {
            registry,
            execs,
            exec_seconds,
            computers,
            stored_bytes,
            stored_inodes,
            disk_bytes,
            fuse_connections,
            refusals,
            backup_lag,
            backup_uploads,
            backup_bytes,
            backup_failed_rounds,
            backup_stopped,
        }
    }

    /// Sets the backup families: the gauges as [`backup_gauges`] gives
    /// them, and the counters to `totals`. A total below a counter (a
    /// shipper between its slot and the stopped counts,
    /// [`crate::registry::Registry::backup_totals`]) leaves it as it is:
    /// counters never go down.
    pub fn set_backup(&self, (lag, stopped): (f64, usize), totals: ShippedTotals) {
        self.backup_lag.set(lag);
        self.backup_stopped.set(stopped as i64);
        for (counter, total) in [
            (&self.backup_uploads, totals.uploads),
            (&self.backup_bytes, totals.uploaded_bytes),
            (&self.backup_failed_rounds, totals.failed_rounds),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// Counts an exec's end; runs that ran also feed the latency histogram.
    pub fn exec_finished(&self, runtime: &str, outcome: ExecOutcome, duration: Duration) {
        self.execs
            .with_label_values(&[runtime, outcome.as_str()])
            .inc();
        if outcome != ExecOutcome::Rejected {
            self.exec_seconds
                .with_label_values(&[runtime])
                .observe(duration.as_secs_f64());
        }
    }

    /// Counts a call refused by the credential check.
    pub fn refused(&self, code: Code) {
        self.refusals.with_label_values(&[code_name(code)]).inc();
    }

    /// Sets the computer counts.
    pub fn set_computers(&self, open: usize, hibernated: usize) {
        self.computers.with_label_values(&["open"]).set(open as i64);
        self.computers
            .with_label_values(&["hibernated"])
            .set(hibernated as i64);
    }

    /// Sets the stored totals: content bytes, inodes, and bytes the
    /// databases take on the host disk.
    pub fn set_stored(&self, bytes: u64, inodes: u64, disk: u64) {
        self.stored_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.stored_inodes
            .set(i64::try_from(inodes).unwrap_or(i64::MAX));
        self.disk_bytes.set(i64::try_from(disk).unwrap_or(i64::MAX));
    }

    /// Sets the number of FUSE connections served.
    pub fn set_fuse_connections(&self, n: usize) {
        self.fuse_connections.set(n as i64);
    }

    /// Every family in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding into memory does not fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The gRPC code's canonical name (`UNAUTHENTICATED`, ...), as clients
/// print it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Unauthenticated => "UNAUTHENTICATED",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::NotFound => "NOT_FOUND",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_counts() {
        let m = Metrics::new();
        m.exec_finished("shell", ExecOutcome::Success, Duration::from_millis(2));
        m.exec_finished("javascript", ExecOutcome::Rejected, Duration::ZERO);
        m.refused(Code::PermissionDenied);
        m.set_computers(2, 3);
        m.set_stored(10, 4, 8192);
        let text = String::from_utf8(m.encode()).unwrap();
        for line in [
            r#"agentcomputer_node_execs_total{outcome="success",runtime="shell"} 1"#,
            r#"agentcomputer_node_execs_total{outcome="rejected",runtime="javascript"} 1"#,
            r#"agentcomputer_node_exec_duration_seconds_count{runtime="shell"} 1"#,
            r#"agentcomputer_node_exec_duration_seconds_count{runtime="javascript"} 0"#,
            r#"agentcomputer_node_credential_refusals_total{code="PERMISSION_DENIED"} 1"#,
            r#"agentcomputer_node_credential_refusals_total{code="UNAUTHENTICATED"} 0"#,
            r#"agentcomputer_node_computers{state="hibernated"} 3"#,
            "agentcomputer_node_stored_bytes 10",
            "agentcomputer_node_stored_inodes 4",
            "agentcomputer_node_disk_bytes 8192",
            "agentcomputer_node_fuse_connections 0",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        // The process's own resident memory, a real, non-zero number.
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap_or_else(|| panic!("no process_resident_memory_bytes in\n{text}"))
            .parse()
            .unwrap();
        assert!(rss > 1e6, "resident memory {rss}");
    }

    fn report(name: &str, state: Result<agentcomputer_backup::Position, String>) -> BackupReport {
        BackupReport {
            name: name.into(),
            state,
        }
    }

    #[test]
    fn backup_gauges_take_the_largest_lag_and_count_the_stopped() {
        let now = Instant::now();
        let shipped = agentcomputer_backup::Position::default();
        let waiting = |secs| agentcomputer_backup::Position {
            unshipped_since: Some(now - Duration::from_secs(secs)),
            ..Default::default()
        };
        assert_eq!(backup_gauges(&[], now), (0.0, 0));
        assert_eq!(backup_gauges(&[report("a", Ok(shipped))], now), (0.0, 0));
        let reports = [
            report("a", Ok(shipped)),
            report("b", Ok(waiting(3))),
            report("c", Ok(waiting(7))),
            report("d", Err("fenced".into())),
            report("e", Err("cannot reach the store".into())),
        ];
        assert_eq!(backup_gauges(&reports, now), (7.0, 2));
    }

    /// The counters follow the totals up and never down, and the gauges
    /// are set as given.
    #[test]
    fn backup_counters_never_go_down() {
        let m = Metrics::new();
        let text = || String::from_utf8(m.encode()).unwrap();
        for line in [
            "agentcomputer_node_backup_uploads_total 0",
            "agentcomputer_node_backup_lag_seconds 0",
            "agentcomputer_node_backup_stopped 0",
        ] {
            assert!(text().contains(line), "{line} missing in\n{}", text());
        }
        let totals = |uploads, bytes, failed| ShippedTotals {
            uploads,
            uploaded_bytes: bytes,
            failed_rounds: failed,
        };
        m.set_backup((1.5, 1), totals(3, 3000, 1));
        m.set_backup((0.0, 0), totals(2, 2000, 0));
        let t = text();
        for line in [
            "agentcomputer_node_backup_uploads_total 3\n",
            "agentcomputer_node_backup_uploaded_bytes_total 3000\n",
            "agentcomputer_node_backup_failed_rounds_total 1\n",
            "agentcomputer_node_backup_lag_seconds 0\n",
            "agentcomputer_node_backup_stopped 0\n",
        ] {
            assert!(t.contains(line), "{line} missing in\n{t}");
        }
        m.set_backup((2.25, 2), totals(5, 5500, 1));
        let t = text();
        for line in [
            "agentcomputer_node_backup_uploads_total 5\n",
            "agentcomputer_node_backup_uploaded_bytes_total 5500\n",
            "agentcomputer_node_backup_lag_seconds 2.25\n",
            "agentcomputer_node_backup_stopped 2\n",
        ] {
            assert!(t.contains(line), "{line} missing in\n{t}");
        }
    }
}
