//! What the node agent writes on its AgentComputers:
//! `status.volume.bytesUsed` / `inodesUsed` / `diskBytes` (server-side apply on the status
//! subresource, field manager `agentcomputer-node-agent`, only when changed
//! and at most once per `status_interval` per computer) and the annotation
//! `agentcomputer.dev/last-activity` (RFC 3339, merge patch, at most every
//! [`ACTIVITY_INTERVAL`] per computer). With a backup store, it reports
//! each computer's backup too ([`super::backup_status`]). It also keeps the
//! stored totals of the metrics current.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agentcomputer_crds::{AgentComputer, labels::LAST_ACTIVITY};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Node;
use super::index::Entry;
use super::keys::FIELD_MANAGER;
use crate::computer::Usage;
use crate::registry::RegistryError;

/// Shortest time between two last-activity annotations of one computer
/// (the operator's idle timeouts are counted in minutes).
pub const ACTIVITY_INTERVAL: Duration = Duration::from_secs(30);

/// How often the reporter looks for due work.
const TICK: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Reported {
    usage: Option<(Usage, Instant)>,
    activity: Option<(SystemTime, Instant)>,
    backup: super::backup_status::Reported,
}

/// Reports usage and activity until `stop`.
pub async fn run(node: Arc<Node>, stop: CancellationToken) {
    let mut reported: HashMap<String, Reported> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        let entries = node.index.entries();
        reported.retain(|uid, _| entries.iter().any(|e| &e.uid == uid));
        let mut totals = (0u64, 0u64, 0u64);
        for entry in &entries {
            let state = reported.entry(entry.uid.clone()).or_default();
            report_usage(&node, entry, state).await;
            if let Some((usage, _)) = state.usage {
                totals.0 += usage.used_bytes;
                totals.1 += usage.used_inodes;
                totals.2 += usage.disk_bytes;
            }
        }
        node.metrics.set_stored(totals.0, totals.1, totals.2);
        if node.registry.backup_target().is_some() {
            let reports: HashMap<String, _> = node
                .registry
                .backup_reports()
                .into_iter()
                .map(|r| (r.name, r.state))
                .collect();
            let now = Instant::now();
            for entry in &entries {
                if let Some(state) = reported.get_mut(&entry.uid) {
                    let report = reports.get(&entry.uid);
                    super::backup_status::report(&node, entry, report, &mut state.backup, now)
                        .await;
                }
            }
        }
        for (uid, used_at) in node.activity.snapshot() {
            if let (Some(entry), Some(state)) = (node.index.get(&uid), reported.get_mut(&uid)) {
                report_activity(&node, &entry, used_at, state).await;
            }
        }
    }
}

/// Publishes `entry`'s usage when it changed and the last report is at
/// least the configured interval old.
async fn report_usage(node: &Node, entry: &Entry, state: &mut Reported) {
    if let Some((_, at)) = state.usage
        && at.elapsed() < node.config.status_interval
    {
        return;
    }
    let usage = match node.registry.get(&entry.uid).await {
        Ok(info) => info.usage,
        // Database not created yet, or deleted: nothing to report.
        Err(RegistryError::NotFound(_)) => return,
        Err(e) => {
            warn!(computer = %entry.shown(), error = %e, "cannot read usage");
            return;
        }
    };
    if state.usage.is_some_and(|(u, _)| u == usage) {
        return;
    }
    let api: Api<AgentComputer> = Api::namespaced(node.client.clone(), &entry.namespace);
    let body = serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1",
        "kind": "AgentComputer",
        "metadata": {"name": entry.name},
        "status": {"volume": volume_status(&usage)},
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api
        .patch_status(&entry.name, &params, &Patch::Apply(body))
        .await
    {
        Ok(_) => {
            debug!(computer = %entry.shown(), bytes = usage.used_bytes, inodes = usage.used_inodes, "reported usage");
            state.usage = Some((usage, Instant::now()));
        }
        Err(e) => warn!(computer = %entry.shown(), error = %e, "cannot report usage"),
    }
}

/// Writes the last-activity annotation when there was use since the last
/// one and that one is at least [`ACTIVITY_INTERVAL`] old.
async fn report_activity(node: &Node, entry: &Entry, used_at: SystemTime, state: &mut Reported) {
    if let Some((written, at)) = state.activity
        && (written >= used_at || at.elapsed() < ACTIVITY_INTERVAL)
    {
        return;
    }
    let Ok(stamp) = Timestamp::try_from(used_at) else {
        return;
    };
    let text = stamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let api: Api<AgentComputer> = Api::namespaced(node.client.clone(), &entry.namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {LAST_ACTIVITY: text}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match api.patch(&entry.name, &params, &Patch::Merge(patch)).await {
        Ok(_) => state.activity = Some((used_at, Instant::now())),
        Err(e) => warn!(computer = %entry.shown(), error = %e, "cannot record last activity"),
    }
}

/// `status.volume` as this agent owns it: the byte and inode counts, and
/// the disk bytes also as a quantity for people (`25Mi`), which the `Disk`
/// printer column of `kubectl get agentcomputers` shows.
fn volume_status(usage: &Usage) -> serde_json::Value {
    serde_json::json!({
        "bytesUsed": i64::try_from(usage.used_bytes).unwrap_or(i64::MAX),
        "inodesUsed": i64::try_from(usage.used_inodes).unwrap_or(i64::MAX),
        "diskBytes": i64::try_from(usage.disk_bytes).unwrap_or(i64::MAX),
        "disk": agentcomputer_runtime_contract::human_quantity(usage.disk_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_status_shows_disk_bytes_as_a_quantity_too() {
        let usage = Usage {
            used_bytes: 1000,
            used_inodes: 3,
            disk_bytes: 25 << 20,
        };
        assert_eq!(
            volume_status(&usage),
            serde_json::json!({
                "bytesUsed": 1000,
                "inodesUsed": 3,
                "diskBytes": 26214400,
                "disk": "25Mi",
            })
        );
        let odd = Usage {
            disk_bytes: (3 << 30) / 2 + 1,
            ..usage
        };
        assert_eq!(volume_status(&odd)["disk"], "1.5Gi");
    }
}
