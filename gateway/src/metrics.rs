//! The gateway's Prometheus metrics, served at `/metrics`.
//!
//! - `agentcomputer_gateway_calls_total{method, code}`: calls ended, by
//!   gRPC method (`Exec`, `Read`, …) and status code name (`OK`,
//!   `UNAUTHENTICATED`, …), refusals of the gateway's own included;
//! - `agentcomputer_gateway_call_seconds{method}`: from a call's arrival to
//!   its end (the last byte of a stream);
//! - `agentcomputer_gateway_computer_calls_total{computer, code}`: calls
//!   ended per computer (`NAMESPACE/NAME`). Latency is not broken down by
//!   computer: a histogram per computer and method would be thousands of
//!   series per installation; a slow computer shows in its access logs.
//! - `agentcomputer_gateway_calls_in_flight`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// The metrics, registered once.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    seconds: HistogramVec,
    computer_calls: IntCounterVec,
    /// Calls forwarded and not yet ended.
    pub in_flight: IntGauge,
}

impl Metrics {
    /// A fresh registry with the gateway's metrics.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "agentcomputer_gateway_calls_total",
                "gRPC calls ended, by method and status code",
            ),
            &["method", "code"],
        )
        .unwrap();
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                "agentcomputer_gateway_call_seconds",
                "Seconds from a call's arrival to its end, by method",
            )
            .buckets(vec![
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0,
            ]),
            &["method"],
        )
        .unwrap();
        let computer_calls = IntCounterVec::new(
            Opts::new(
                "agentcomputer_gateway_computer_calls_total",
                "gRPC calls ended, by computer (NAMESPACE/NAME) and status code",
            ),
            &["computer", "code"],
        )
        .unwrap();
        let in_flight = IntGauge::new(
            "agentcomputer_gateway_calls_in_flight",
            "gRPC calls forwarded and not yet ended",
        )
        .unwrap();
        registry.register(Box::new(calls.clone())).unwrap();
        registry.register(Box::new(seconds.clone())).unwrap();
        registry.register(Box::new(computer_calls.clone())).unwrap();
        registry.register(Box::new(in_flight.clone())).unwrap();
        Metrics {
            registry,
            calls,
            seconds,
            computer_calls,
            in_flight,
        }
    }

    /// Records a call of `method` for `computer` (`None` when it was
    /// refused before a computer was known) that ended with `code` after
    /// `seconds`.
    pub fn ended(&self, method: &str, computer: Option<&str>, code: tonic::Code, seconds: f64) {
        let code = code_name(code);
        self.calls.with_label_values(&[method, code]).inc();
        self.seconds.with_label_values(&[method]).observe(seconds);
        if let Some(c) = computer {
            self.computer_calls.with_label_values(&[c, code]).inc();
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// The status code's name as gRPC spells it (doc/statuscodes.md).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
