//! The node's storage capacity for computers, published as one
//! `storage.k8s.io/v1` CSIStorageCapacity in the agent's own namespace so
//! that the operator places computers only where they fit.
//!
//! room = floor(overcommit × (available bytes of the data directory's
//! filesystem + Σ bytes used by the computers stored here)) − Σ their
//! quotas, at least 0. A computer whose AgentComputer is gone (data kept
//! after a Retain deletion) cannot grow, so it counts with its used bytes
//! as its quota. Published as both `capacity` and `maximumVolumeSize`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Node;
use super::keys::{FIELD_MANAGER, HOSTNAME_LABEL, NODE_LABEL, STORAGE_CLASS, capacity_name};

/// Longest time between two publications, even with nothing changed.
pub const REPUBLISH: Duration = Duration::from_secs(60);

/// Delay before retrying a failed publication.
const RETRY: Duration = Duration::from_secs(2);

/// One computer's part in the formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Bytes its files use now.
    pub used: u64,
    /// Bytes it may grow to.
    pub quota: u64,
}

/// The formula: `floor(overcommit × (available + Σ used)) − Σ quota`,
/// at least 0 (saturating, so absurd inputs cannot wrap).
pub fn room(available: u64, computers: &[Stored], overcommit: f64) -> u64 {
    let used: u128 = computers.iter().map(|c| c.used as u128).sum();
    let quotas: u128 = computers.iter().map(|c| c.quota as u128).sum();
    let total = (available as u128 + used) as f64 * overcommit;
    let total = if total.is_finite() && total > 0.0 {
        total.floor() as u128
    } else {
        0
    };
    total.saturating_sub(quotas).min(i64::MAX as u128) as u64
}

/// Bytes available to an unprivileged writer on the filesystem of `dir`
/// (statvfs(3): `f_bavail × f_frsize`).
pub fn available_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// Computes the room of this node now.
async fn compute(node: &Node) -> anyhow::Result<u64> {
    let data_dir = node.config.data_dir.clone();
    let available = tokio::task::spawn_blocking(move || available_bytes(&data_dir)).await??;
    let mut stored = Vec::new();
    for info in node.registry.list().await? {
        let used = info.usage.used_bytes;
        let served = node.index.get(&info.settings.name).is_some();
        stored.push(Stored {
            used,
            quota: if served {
                info.settings.max_bytes
            } else {
                used
            },
        });
    }
    Ok(room(available, &stored, node.config.overcommit))
}

/// Publishes the capacity object (server-side apply: created or updated).
async fn publish(node: &Node, bytes: u64) -> kube::Result<()> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(node.client.clone(), &node.config.namespace);
    let name = capacity_name(&node.config.node_name);
    let body = serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: node.config.node_name},
        },
        "storageClassName": STORAGE_CLASS,
        "nodeTopology": {"matchLabels": {HOSTNAME_LABEL: node.config.node_name}},
        "capacity": bytes.to_string(),
        "maximumVolumeSize": bytes.to_string(),
    });
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}

/// Publishes at start, whenever the computers placed here change, and at
/// least every [`REPUBLISH`], until `stop`. An unchanged value is written
/// again only by the periodic publication.
pub async fn run(node: Arc<Node>, stop: CancellationToken) {
    let mut last: Option<(u64, Instant)> = None;
    loop {
        let due = last.is_none_or(|(_, at)| at.elapsed() >= REPUBLISH);
        let ok = match compute(&node).await {
            Ok(bytes) if !due && last.is_some_and(|(b, _)| b == bytes) => true,
            Ok(bytes) => match publish(&node, bytes).await {
                Ok(()) => {
                    if last.is_none_or(|(b, _)| b != bytes) {
                        info!(bytes, "published storage capacity");
                    }
                    last = Some((bytes, Instant::now()));
                    node.readiness.set_capacity_published();
                    true
                }
                Err(e) => {
                    warn!(error = %e, "cannot publish storage capacity; retrying");
                    false
                }
            },
            Err(e) => {
                warn!(error = %e, "cannot compute storage capacity; retrying");
                false
            }
        };
        let wait = if ok {
            last.map_or(RETRY, |(_, at)| REPUBLISH.saturating_sub(at.elapsed()))
        } else {
            RETRY
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = node.placement_changed.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula() {
        let c = |used, quota| Stored { used, quota };
        assert_eq!(room(1000, &[], 1.0), 1000);
        assert_eq!(room(1000, &[c(100, 300)], 1.0), 800);
        assert_eq!(room(1000, &[c(100, 300)], 2.0), 1900);
        assert_eq!(room(1000, &[c(0, 5000)], 1.0), 0);
        assert_eq!(room(999, &[], 0.5), 499);
        assert_eq!(room(u64::MAX, &[c(u64::MAX, 0)], 1.0), i64::MAX as u64);
        assert_eq!(room(1000, &[], f64::NAN), 0);
    }

    #[test]
    fn statvfs_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(available_bytes(dir.path()).unwrap() > 0);
        assert!(available_bytes(&dir.path().join("missing")).is_err());
    }
}
