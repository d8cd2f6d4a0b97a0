//! `snapshot`, `snapshots`, `delete-snapshot` and `create --from` in a
//! cluster: a snapshot is a ComputerSnapshot object of the computer's
//! namespace (so its name is unique there, and `kubectl get
//! computersnapshots` and GitOps see what the CLI made), and a computer made
//! from saved state is an AgentComputer with `spec.source`
//! (docs/snapshots.md, "In a cluster").

use std::time::Duration;

use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{
    AgentComputer, ComputerSnapshot, ComputerSnapshotSpec, SnapshotDeletionPolicy, SourceKind,
    SourceRef,
};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;

use super::{Cluster, api_error};
use crate::cmd::computers::created_line;
use crate::error::{CliError, Result};
use crate::size::human;

/// How long `snapshot` waits for the operator to take it.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(120);

impl Cluster {
    /// The ComputerSnapshots of [`Cluster::namespace`].
    pub fn snapshots(&self) -> Api<ComputerSnapshot> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

fn ready(s: &ComputerSnapshot) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.ready_to_use)
        .unwrap_or(false)
}

/// Why `s` is not ready: its Ready condition's reason and message.
fn not_ready(s: &ComputerSnapshot) -> String {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Ready"))
        .map_or_else(
            || "no status yet (is the operator running?)".to_string(),
            |c| format!("{}: {}", c.reason, c.message),
        )
}

/// Reasons of a snapshot's Ready condition that waiting cannot change.
const FINAL: &[&str] = &["NoBackupStore", "SnapshotFailed", "ComputerDeleted"];

fn failed(s: &ComputerSnapshot) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.conditions.iter().any(|c| {
            c.type_ == "Ready" && c.status == "False" && FINAL.contains(&c.reason.as_str())
        })
    })
}

/// `snapshot NAME [SNAP]`: makes ComputerSnapshot SNAP (default
/// `NAME-<unix seconds>`) of computer NAME and waits until the operator
/// took it. Errors: the computer is not there, the name is taken in the
/// namespace (the API server's AlreadyExists), the snapshot failed (its
/// reason), or it was not taken within two minutes.
pub async fn take(cluster: &Cluster, computer: &str, snapshot: Option<String>) -> Result<()> {
    cluster.get(computer).await?;
    let name = snapshot.filter(|s| !s.is_empty()).unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("{computer}-{secs}")
    });
    let object = ComputerSnapshot {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: ComputerSnapshotSpec {
            computer: computer.to_string(),
            deletion_policy: SnapshotDeletionPolicy::default(),
        },
        status: None,
    };
    let api = cluster.snapshots();
    let started = std::time::Instant::now();
    api.create(&PostParams::default(), &object)
        .await
        .map_err(|e| api_error(&e))?;
    let settled = |s: Option<&ComputerSnapshot>| s.is_some_and(|s| ready(s) || failed(s));
    let taken = match tokio::time::timeout(SNAPSHOT_WAIT, await_condition(api, &name, settled))
        .await
    {
        Ok(Ok(Some(s))) if ready(&s) => s,
        Ok(Ok(Some(s))) => {
            return Err(CliError::new(format!(
                "snapshot {name} of {computer} failed: {}",
                not_ready(&s)
            )));
        }
        Ok(Ok(None)) => {
            return Err(CliError::new(format!(
                "snapshot {name} of {computer} was deleted before it was taken"
            )));
        }
        Ok(Err(e)) => return Err(CliError::new(format!("snapshot {name}: {e}"))),
        Err(_) => {
            let now = cluster.snapshots().get_opt(&name).await.ok().flatten();
            return Err(CliError::new(format!(
                "snapshot {name} of {computer} was not taken within {} s: {} (it stays; delete-snapshot {computer} {name} removes it)",
                SNAPSHOT_WAIT.as_secs(),
                now.as_ref().map_or_else(|| "gone".to_string(), not_ready)
            )));
        }
    };
    let st = taken.status.unwrap_or_default();
    outln!(
        "snapshot {name} of {computer} taken in {} ms (position {}, {}; ComputerSnapshot {}/{name})",
        started.elapsed().as_millis(),
        st.position.unwrap_or(0),
        human(st.size_bytes.unwrap_or(0).max(0) as u64),
        cluster.namespace
    );
    Ok(())
}

/// `snapshots NAME`: the ComputerSnapshots of computer NAME, oldest first.
pub async fn list(cluster: &Cluster, computer: &str) -> Result<()> {
    let all = cluster
        .snapshots()
        .list(&Default::default())
        .await
        .map_err(|e| api_error(&e))?;
    let mut mine: Vec<ComputerSnapshot> = all
        .items
        .into_iter()
        .filter(|s| s.spec.computer == computer)
        .collect();
    mine.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    });
    outln!(
        "{:<32} {:<24} {:>10} {:<6}",
        "NAME",
        "TIME",
        "SIZE",
        "READY"
    );
    for s in &mine {
        let st = s.status.clone().unwrap_or_default();
        outln!(
            "{:<32} {:<24} {:>10} {}",
            s.metadata.name.as_deref().unwrap_or(""),
            st.time.map_or_else(|| "-".to_string(), |t| t.0.to_string()),
            st.size_bytes
                .map_or_else(|| "-".to_string(), |b| human(b.max(0) as u64)),
            if ready(s) { "true" } else { "false" }
        );
    }
    Ok(())
}

/// `delete-snapshot NAME SNAP`: deletes ComputerSnapshot SNAP, which must
/// be of computer NAME.
pub async fn delete(cluster: &Cluster, computer: &str, snapshot: &str) -> Result<()> {
    let api = cluster.snapshots();
    match api.get_opt(snapshot).await.map_err(|e| api_error(&e))? {
        Some(s) if s.spec.computer == computer => {}
        Some(s) => {
            return Err(CliError::new(format!(
                "snapshot {snapshot} is of computer {}, not {computer}",
                s.spec.computer
            )));
        }
        None => {
            return Err(CliError::new(format!(
                "snapshot {snapshot} not found in namespace {} (snapshots {computer} lists them)",
                cluster.namespace
            )));
        }
    }
    api.delete(snapshot, &DeleteParams::default())
        .await
        .map_err(|e| api_error(&e))?;
    outln!("deleted snapshot {snapshot} of {computer}");
    Ok(())
}

/// `create NEW --from snapshot/S` or `computer/C` (`fork C NEW`): an
/// AgentComputer with `spec.source` naming the ComputerSnapshot or the
/// AgentComputer, and the spec of the computer its files come from
/// (quota, inodes, egress, runtimes, sandbox, limits, placement; the
/// operator makes new credentials). Waits until it is Ready, at most
/// `wait`. Errors: an unknown source kind (`file:` is local mode's), a
/// source that is not there, the API server's refusals.
pub async fn create_from(
    cluster: &Cluster,
    new: &str,
    from: &str,
    wait: Option<Duration>,
) -> Result<()> {
    let (kind, name) = match from.split_once('/') {
        Some(("snapshot", s)) if !s.is_empty() => (SourceKind::ComputerSnapshot, s),
        Some(("computer", s)) if !s.is_empty() => (SourceKind::AgentComputer, s),
        _ => {
            return Err(CliError::new(format!(
                "--from {from}: in a cluster give snapshot/NAME (a ComputerSnapshot) or computer/NAME (an AgentComputer) of namespace {}",
                cluster.namespace
            )));
        }
    };
    let origin = match kind {
        SourceKind::ComputerSnapshot => {
            let snap = cluster
                .snapshots()
                .get_opt(name)
                .await
                .map_err(|e| api_error(&e))?
                .ok_or_else(|| {
                    CliError::new(format!(
                        "snapshot {name} not found in namespace {}",
                        cluster.namespace
                    ))
                })?;
            snap.spec.computer
        }
        _ => name.to_string(),
    };
    let source = cluster.get(&origin).await.map_err(|e| {
        CliError::new(format!(
            "--from {from}: the spec is copied from computer {origin}: {e}"
        ))
    })?;
    let mut spec = source.spec;
    spec.source = Some(SourceRef {
        api_group: None,
        kind,
        name: name.to_string(),
    });
    let computer = AgentComputer {
        metadata: ObjectMeta {
            name: Some(new.to_string()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    let created = cluster
        .computers()
        .create(&PostParams::default(), &computer)
        .await
        .map_err(|e| api_error(&e))?;
    if let Some(limit) = wait {
        super::computers::wait_ready(cluster, new, limit).await?;
    }
    let quota = quantity_bytes(&created.spec.storage.size).unwrap_or(0);
    let inodes = match created.spec.storage.max_inodes {
        Some(n) => n.max(0) as u64,
        None => super::computers::default_inodes(quota),
    };
    outln!("{} from {from}", created_line(new, quota, inodes, None));
    Ok(())
}
