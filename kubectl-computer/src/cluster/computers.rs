//! `create`, `delete`, `list` on AgentComputer resources.

use std::time::Duration;

use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{
    AgentComputer, AgentComputerSpec, CidrRule, EgressMode, EgressSpec, ExecLimits, PortRule,
    Protocol, RuntimesSpec, SandboxSpec, StorageSpec, condition_types,
};
use agentcomputer_proto::v1 as pb;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::wait::{await_condition, conditions};

use super::{Cluster, api_error};
use crate::cmd::computers::{Row, created_line, print_table};
use crate::error::{CliError, Result};
use crate::size::{human, quantity};

/// Quota of a computer created without `--quota` (as a local agent's).
pub const DEFAULT_QUOTA: u64 = 10 << 30;

/// What `create` asks for, from its flags.
pub struct CreateArgs {
    pub name: String,
    pub quota: Option<u64>,
    pub max_inodes: Option<u64>,
    pub egress: pb::Egress,
    /// Runtimes allowed; empty: the defaults (shell and JavaScript).
    pub runtimes: Vec<pb::Runtime>,
    pub sandbox_image: Option<String>,
    /// Wait until the computer is Ready, at most this long.
    pub wait: Option<Duration>,
}

/// The resource `create` submits. Errors: a port the API cannot carry.
pub fn resource(args: &CreateArgs) -> Result<AgentComputer> {
    let runtimes = if args.runtimes.is_empty() {
        RuntimesSpec::default()
    } else {
        RuntimesSpec {
            shell: args.runtimes.contains(&pb::Runtime::Shell),
            javascript: args.runtimes.contains(&pb::Runtime::Javascript),
            container: args.runtimes.contains(&pb::Runtime::Container),
        }
    };
    let max_inodes = match args.max_inodes {
        Some(n) => Some(
            i64::try_from(n)
                .map_err(|_| CliError::new(format!("--max-inodes {n} is too large")))?,
        ),
        None => None,
    };
    let spec = AgentComputerSpec {
        storage: StorageSpec {
            size: Quantity(quantity(args.quota.unwrap_or(DEFAULT_QUOTA))),
            reclaim_policy: Default::default(),
            max_inodes,
        },
        runtimes,
        sandbox: args.sandbox_image.as_ref().map(|image| SandboxSpec {
            image: image.clone(),
            command: None,
            resources: None,
            idle_timeout_seconds: 0,
        }),
        egress: egress_spec(&args.egress)?,
        limits: ExecLimits::default(),
        node_selector: None,
        tolerations: None,
        source: None,
        retention: None,
    };
    Ok(AgentComputer {
        metadata: ObjectMeta {
            name: Some(args.name.clone()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The egress flags (already checked by `EgressArgs::to_proto`) as the spec.
fn egress_spec(e: &pb::Egress) -> Result<EgressSpec> {
    let port = |p: u32| {
        i32::try_from(p).map_err(|_| CliError::new(format!("port {p} is out of range (1-65535)")))
    };
    let mut cidrs = Vec::with_capacity(e.cidrs.len());
    for c in &e.cidrs {
        let mut ports = Vec::with_capacity(c.ports.len());
        for p in &c.ports {
            ports.push(PortRule {
                port: port(p.port)?,
                end_port: if p.end_port == 0 {
                    None
                } else {
                    Some(port(p.end_port)?)
                },
                protocol: Protocol::Tcp,
            });
        }
        cidrs.push(CidrRule {
            cidr: c.cidr.clone(),
            ports,
        });
    }
    Ok(EgressSpec {
        mode: match pb::EgressMode::try_from(e.mode).unwrap_or(pb::EgressMode::DenyAll) {
            pb::EgressMode::AllowAll => EgressMode::AllowAll,
            pb::EgressMode::AllowList => EgressMode::AllowList,
            _ => EgressMode::DenyAll,
        },
        cidrs,
        hosts: e.hosts.clone(),
        allow_metadata: e.allow_metadata,
    })
}

/// The inode limit the node agent applies when `spec.storage.maxInodes` is
/// unset, as the CRD documents it: one per 4 KiB of quota, at least 1,024.
pub(super) fn default_inodes(quota: u64) -> u64 {
    (quota / 4096).max(1024)
}

/// Creates the computer and, unless told not to, waits until its `Ready`
/// condition is True. Errors: the API server's message (invalid name or
/// quota, already exists, RBAC), or the condition that is not ready when
/// the wait ends.
pub async fn create(cluster: &Cluster, args: CreateArgs) -> Result<()> {
    let computer = resource(&args)?;
    let api = cluster.computers();
    let created = api
        .create(&PostParams::default(), &computer)
        .await
        .map_err(|e| api_error(&e))?;
    if let Some(limit) = args.wait {
        wait_ready(cluster, &args.name, limit).await?;
    }
    let quota = quantity_bytes(&created.spec.storage.size).unwrap_or(0);
    let inodes = match created.spec.storage.max_inodes {
        Some(n) => n.max(0) as u64,
        None => default_inodes(quota),
    };
    outln!(
        "{}",
        created_line(&args.name, quota, inodes, Some(&args.egress))
    );
    Ok(())
}

/// The `Placed=False` condition of `c` when its reason is final
/// ([`agentcomputer_crds::placed_reasons::FINAL`]): waiting cannot make it
/// Ready, only a new spec can.
fn final_placement_failure(c: &AgentComputer) -> Option<&Condition> {
    conditions_of(c).iter().find(|k| {
        k.type_ == condition_types::PLACED
            && k.status == "False"
            && agentcomputer_crds::placed_reasons::FINAL.contains(&k.reason.as_str())
    })
}

/// The `Placed=False` condition of `c` when its reason says no node of the
/// cluster as it is can hold it
/// ([`agentcomputer_crds::placed_reasons::UNTIL_THE_CLUSTER_CHANGES`]): the
/// operator places it once a node with room appears, which a wait of
/// minutes rarely sees.
fn placement_needs_a_node(c: &AgentComputer) -> Option<&Condition> {
    conditions_of(c).iter().find(|k| {
        k.type_ == condition_types::PLACED
            && k.status == "False"
            && agentcomputer_crds::placed_reasons::UNTIL_THE_CLUSTER_CHANGES
                .contains(&k.reason.as_str())
    })
}

fn is_ready(c: &AgentComputer) -> bool {
    conditions_of(c)
        .iter()
        .any(|k| k.type_ == condition_types::READY && k.status == "True")
}

fn conditions_of(c: &AgentComputer) -> &[Condition] {
    c.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
}

/// Why `c` is not Ready, in one line: its phase and the first condition that
/// is not True (`Pending: Placed=False NoEligibleNode: 0/3 nodes are
/// eligible: ...`), a failed reconcile first (`Reconciled=False Forbidden:
/// step volume: ...`, the step and the API server's reason), or that it
/// has no status yet.
pub fn not_ready_reason(c: &AgentComputer) -> String {
    let Some(status) = &c.status else {
        return "no status yet (is the operator running?)".into();
    };
    let phase = status.phase.map_or("no phase", |p| p.as_str());
    let order = [
        condition_types::RECONCILED,
        condition_types::PLACED,
        condition_types::VOLUME_READY,
        condition_types::CREDENTIAL_READY,
        condition_types::EGRESS_READY,
        condition_types::SANDBOX_READY,
        condition_types::READY,
    ];
    let failing = order.iter().find_map(|t| {
        status
            .conditions
            .iter()
            .find(|k| k.type_ == *t && k.status != "True")
    });
    match failing {
        Some(k) if k.message.is_empty() => {
            format!("{phase}: {}={} {}", k.type_, k.status, k.reason)
        }
        Some(k) => format!(
            "{phase}: {}={} {}: {}",
            k.type_, k.status, k.reason, k.message
        ),
        None => format!("{phase}: no Ready condition yet"),
    }
}

/// Waits up to `limit` for the Ready condition of `name`, or until its
/// placement failed for a reason waiting cannot change, or one that only a
/// change of the cluster can (no node has room for its quota: the
/// computer stays and is placed when a node with room appears).
pub(super) async fn wait_ready(cluster: &Cluster, name: &str, limit: Duration) -> Result<()> {
    let api = cluster.computers();
    let settled = |c: Option<&AgentComputer>| {
        c.is_some_and(|c| {
            is_ready(c)
                || final_placement_failure(c).is_some()
                || placement_needs_a_node(c).is_some()
        })
    };
    match tokio::time::timeout(limit, await_condition(api, name, settled)).await {
        Ok(Ok(Some(c))) if !is_ready(&c) && placement_needs_a_node(&c).is_some() => {
            Err(CliError::new(format!(
                "computer {name} cannot be placed now: {}; it was created and stays Pending: \
                 the operator places it when a node with room for it appears (or room is freed); \
                 delete it to give up (kubectl describe agentcomputer {name} -n {})",
                not_ready_reason(&c),
                cluster.namespace
            )))
        }
        Ok(Ok(Some(c))) if !is_ready(&c) => Err(CliError::new(format!(
            "computer {name} cannot be placed: {}; it was created, fix its spec or delete it (kubectl describe agentcomputer {name} -n {})",
            not_ready_reason(&c),
            cluster.namespace
        ))),
        Ok(Ok(Some(_))) => Ok(()),
        Ok(Ok(None)) => Err(CliError::new(format!(
            "computer {name} was deleted while waiting for it to become Ready"
        ))),
        Ok(Err(e)) => Err(CliError::new(format!(
            "waiting for computer {name}: {}",
            super::innermost(&e)
        ))),
        Err(_) => {
            let c = cluster.get(name).await?;
            Err(CliError::new(format!(
                "computer {name} is not Ready after {}: {}; it was created, see kubectl describe agentcomputer {name} -n {}",
                humantime::format_duration(limit),
                not_ready_reason(&c),
                cluster.namespace
            )))
        }
    }
}

/// Deletes the computer and, unless told not to, waits up to `wait` until
/// it is gone (the operator releases its volume first).
pub async fn delete(cluster: &Cluster, name: &str, wait: Option<Duration>) -> Result<()> {
    let api = cluster.computers();
    let uid = cluster.get(name).await?.metadata.uid.unwrap_or_default();
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => return Err(cluster.not_found(name)),
        Err(e) => return Err(api_error(&e)),
    }
    if let Some(limit) = wait {
        let gone = tokio::time::timeout(
            limit,
            await_condition(api, name, conditions::is_deleted(&uid)),
        );
        match gone.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(CliError::new(format!(
                    "waiting for computer {name} to be deleted: {}",
                    super::innermost(&e)
                )));
            }
            Err(_) => {
                return Err(CliError::new(format!(
                    "computer {name} is still being deleted after {} (its finalizers run: see kubectl describe agentcomputer {name} -n {})",
                    humantime::format_duration(limit),
                    cluster.namespace
                )));
            }
        }
    }
    outln!("computer {name} deleted");
    Ok(())
}

/// Prints the computers of the namespace as the local `list` does. USED,
/// DISK and INODES come from `status.volume` (reported by the node agent),
/// STATE is the phase, BACKUP the age of `status.backup.lastShippedTime`.
pub async fn list(cluster: &Cluster) -> Result<()> {
    let list = cluster
        .computers()
        .list(&Default::default())
        .await
        .map_err(|e| api_error(&e))?;
    let rows: Vec<Row> = list.items.iter().map(row).collect();
    print_table(&rows);
    Ok(())
}

fn row(c: &AgentComputer) -> Row {
    let volume = c.status.as_ref().and_then(|s| s.volume.as_ref());
    let size = &c.spec.storage.size.0;
    Row {
        name: c.metadata.name.clone().unwrap_or_default(),
        used_bytes: volume.and_then(|v| v.bytes_used).map(|n| n.max(0) as u64),
        quota: quantity_bytes(&c.spec.storage.size)
            .map(human)
            .unwrap_or_else(|_| size.clone()),
        used_inodes: volume.and_then(|v| v.inodes_used).map(|n| n.max(0) as u64),
        disk_bytes: volume.and_then(|v| v.disk_bytes).map(|n| n.max(0) as u64),
        state: c
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .map_or("-", |p| p.as_str())
            .to_string(),
        backup: Some(backup_age(c, k8s_openapi::jiff::Timestamp::now())),
        created: c
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(|| "-".into(), |t| crate::format::time(unix_nanos(&t.0))),
    }
}

/// The age at `now` of the computer's latest backup object, `-` before
/// one is reported.
fn backup_age(c: &AgentComputer, now: k8s_openapi::jiff::Timestamp) -> String {
    let shipped = c
        .status
        .as_ref()
        .and_then(|s| s.backup.as_ref())
        .and_then(|b| b.last_shipped_time.as_ref());
    match shipped {
        Some(t) => {
            let ns = now
                .as_nanosecond()
                .saturating_sub(t.0.as_nanosecond())
                .max(0);
            crate::cmd::computers::age(std::time::Duration::from_nanos(
                u64::try_from(ns).unwrap_or(u64::MAX),
            ))
        }
        None => "-".into(),
    }
}

fn unix_nanos(t: &k8s_openapi::jiff::Timestamp) -> i64 {
    i64::try_from(t.as_nanosecond()).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::{AgentComputerStatus, ComputerPhase};

    #[test]
    fn backup_column_is_the_age_of_the_last_shipped_object() {
        let mut c: AgentComputer = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
            "metadata": {"name": "demo"}, "spec": {"storage": {"size": "1Gi"}},
        }))
        .unwrap();
        let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(backup_age(&c, now), "-");
        c.status = Some(
            serde_json::from_value(serde_json::json!({
                "backup": {"position": 3, "lastShippedTime": "2026-01-01T00:09:18Z", "lagSeconds": 0},
            }))
            .unwrap(),
        );
        assert_eq!(backup_age(&c, now), "42s");
        assert!(row(&c).backup.is_some(), "a cluster row has the column");
    }

    fn condition(t: &str, status: &str, reason: &str, message: &str) -> Condition {
        serde_json::from_value(serde_json::json!({
            "type": t, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"
        }))
        .unwrap()
    }

    fn args() -> CreateArgs {
        CreateArgs {
            name: "demo".into(),
            quota: None,
            max_inodes: None,
            egress: pb::Egress::default(),
            runtimes: Vec::new(),
            sandbox_image: None,
            wait: None,
        }
    }

    #[test]
    fn flags_become_the_spec() {
        let c = resource(&CreateArgs {
            quota: Some(500 << 20),
            max_inodes: Some(5000),
            egress: pb::Egress {
                mode: pb::EgressMode::AllowList as i32,
                hosts: vec!["pypi.org".into()],
                cidrs: vec![pb::EgressCidr {
                    cidr: "10.0.0.0/8".into(),
                    ports: vec![pb::EgressPorts {
                        port: 443,
                        end_port: 0,
                    }],
                }],
                allow_metadata: false,
            },
            runtimes: vec![pb::Runtime::Shell, pb::Runtime::Container],
            sandbox_image: Some("debian:bookworm-slim".into()),
            ..args()
        })
        .unwrap();
        let s = &c.spec;
        assert_eq!(s.storage.size.0, "500Mi");
        assert_eq!(s.storage.max_inodes, Some(5000));
        assert_eq!(
            (
                s.runtimes.shell,
                s.runtimes.javascript,
                s.runtimes.container
            ),
            (true, false, true)
        );
        assert_eq!(s.sandbox.as_ref().unwrap().image, "debian:bookworm-slim");
        assert_eq!(s.egress.mode, EgressMode::AllowList);
        assert_eq!(s.egress.cidrs[0].ports[0].port, 443);
        assert_eq!(s.egress.cidrs[0].ports[0].end_port, None);

        let plain = resource(&args()).unwrap();
        assert_eq!(plain.spec.storage.size.0, "10Gi");
        assert_eq!(plain.spec.runtimes, RuntimesSpec::default());
        assert_eq!(plain.spec.egress, EgressSpec::default());
    }

    #[test]
    fn names_the_condition_that_is_not_ready() {
        let mut c = resource(&args()).unwrap();
        assert_eq!(
            not_ready_reason(&c),
            "no status yet (is the operator running?)"
        );
        c.status = Some(AgentComputerStatus {
            phase: Some(ComputerPhase::Pending),
            conditions: vec![
                condition("Ready", "False", "NotPlaced", ""),
                condition(
                    "Placed",
                    "False",
                    "NoEligibleNode",
                    "0/2 nodes are eligible: 2 no published capacity",
                ),
            ],
            ..AgentComputerStatus::default()
        });
        assert_eq!(
            not_ready_reason(&c),
            "Pending: Placed=False NoEligibleNode: 0/2 nodes are eligible: 2 no published capacity"
        );
        assert!(!is_ready(&c));
        // Waiting may help: no node fits now.
        assert!(final_placement_failure(&c).is_none());
        c.status.as_mut().unwrap().conditions = vec![
            condition("Ready", "False", "NotPlaced", ""),
            condition("Placed", "False", "InvalidSize", "spec.storage.size: bad"),
        ];
        // Waiting cannot help: the wait ends at once, naming the reason.
        assert_eq!(
            final_placement_failure(&c).map(|k| k.reason.as_str()),
            Some("InvalidSize")
        );
        assert_eq!(
            not_ready_reason(&c),
            "Pending: Placed=False InvalidSize: spec.storage.size: bad"
        );
        assert!(placement_needs_a_node(&c).is_none());
        c.status.as_mut().unwrap().conditions = vec![
            condition("Ready", "False", "NotPlaced", ""),
            condition(
                "Placed",
                "False",
                "NoNodeHasRoom",
                "0/2 nodes are eligible: 2 no room for 1Ti (90Gi free)",
            ),
        ];
        // No node has room: not final (a node may come), but the wait ends.
        assert!(final_placement_failure(&c).is_none());
        assert_eq!(
            placement_needs_a_node(&c).map(|k| k.reason.as_str()),
            Some("NoNodeHasRoom")
        );
        c.status.as_mut().unwrap().conditions = vec![condition("Ready", "True", "Ready", "")];
        assert!(is_ready(&c));
        assert!(final_placement_failure(&c).is_none());
        assert!(placement_needs_a_node(&c).is_none());
    }

    #[test]
    fn names_the_failed_reconcile_first() {
        let mut c = resource(&args()).unwrap();
        // What a computer whose first reconcile failed shows: the status
        // the operator could write, with the step and the API server's reason.
        c.status = Some(AgentComputerStatus {
            conditions: vec![condition(
                "Reconciled",
                "False",
                "Invalid",
                "step egress: NetworkPolicy.networking.k8s.io \"demo-egress\" is invalid",
            )],
            ..AgentComputerStatus::default()
        });
        assert_eq!(
            not_ready_reason(&c),
            "no phase: Reconciled=False Invalid: step egress: NetworkPolicy.networking.k8s.io \"demo-egress\" is invalid"
        );
        c.status = Some(AgentComputerStatus {
            phase: Some(ComputerPhase::Unavailable),
            conditions: vec![
                condition(
                    "VolumeReady",
                    "False",
                    "Forbidden",
                    "step volume: exceeded quota",
                ),
                condition(
                    "Ready",
                    "False",
                    "ReconcileFailed",
                    "step volume: exceeded quota",
                ),
                condition(
                    "Reconciled",
                    "False",
                    "Forbidden",
                    "step volume: exceeded quota",
                ),
            ],
            ..AgentComputerStatus::default()
        });
        assert_eq!(
            not_ready_reason(&c),
            "Unavailable: Reconciled=False Forbidden: step volume: exceeded quota"
        );
    }

    #[test]
    fn default_inode_limit() {
        assert_eq!(default_inodes(10 << 30), 2_621_440);
        assert_eq!(default_inodes(1 << 20), 1024);
    }
}
