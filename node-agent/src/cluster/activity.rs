//! When each computer was last used, and the observer that records it (and
//! counts calls in the metrics) for the API service.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tonic::Code;

use super::metrics::Metrics;
use crate::api::{ExecOutcome, Observer};

/// Last use of each computer (wall-clock, for the RFC 3339 annotation).
#[derive(Debug, Default)]
pub struct Activity {
    last: Mutex<HashMap<String, SystemTime>>,
}

impl Activity {
    /// Records a use of computer `uid` now.
    pub fn record(&self, uid: &str) {
        let now = SystemTime::now();
        let mut map = self.last.lock();
        match map.get_mut(uid) {
            Some(t) => *t = now,
            None => {
                map.insert(uid.to_string(), now);
            }
        }
    }

    /// Last recorded use of every computer.
    pub fn snapshot(&self) -> Vec<(String, SystemTime)> {
        let map = self.last.lock();
        map.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Forgets computer `uid`.
    pub fn forget(&self, uid: &str) {
        let mut map = self.last.lock();
        map.remove(uid);
    }
}

/// The API service's [`Observer`] in cluster mode: records use for the
/// last-activity annotation and counts execs and refusals.
pub struct NodeObserver {
    /// Where counts go.
    pub metrics: Arc<Metrics>,
    /// Where use is recorded.
    pub activity: Arc<Activity>,
}

impl Observer for NodeObserver {
    fn used(&self, computer: &str) {
        self.activity.record(computer);
    }

    fn refused(&self, code: Code) {
        self.metrics.refused(code);
    }

    fn exec_finished(&self, runtime: &'static str, outcome: ExecOutcome, duration: Duration) {
        self.metrics.exec_finished(runtime, outcome, duration);
    }
}
