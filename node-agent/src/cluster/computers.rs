//! The watch of this node's AgentComputers: each one placed here gets its
//! database (created when missing) and the settings its spec asks for; its
//! identity and credential fingerprint go to the [`super::index::Index`].
//! A deleted AgentComputer only leaves the index: its data is dealt with by
//! the PersistentVolume protocol ([`super::volumes`]).

use std::collections::HashSet;
use std::sync::Arc;

use agentcomputer_crds::{AgentComputer, SANDBOX_GID, SANDBOX_UID, labels};
use agentcomputer_fs::Owner;
use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Node;
use super::index::{Entry, SandboxInfo, parse_credential_hash};
use super::keys::{NODE_LABEL, volume_name};
use super::spec;
use crate::registry::RegistryError;

/// Watches AgentComputers in all namespaces labelled for this node until
/// `stop`; marks the watch synced after its first complete listing has
/// been applied.
pub async fn run(node: Arc<Node>, stop: CancellationToken) {
    let api: Api<AgentComputer> = Api::all(node.client.clone());
    let selector = format!("{NODE_LABEL}={}", node.config.node_name);
    let mut events = watcher::watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    // uids listed since the last (re)start of the watch.
    let mut listing: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Err(e)) => warn!(error = %e, "AgentComputer watch failed; retrying"),
            Some(Ok(Event::Init)) => listing = Some(HashSet::new()),
            Some(Ok(Event::InitApply(computer))) => {
                if let (Some(seen), Some(uid)) = (&mut listing, computer.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                apply(&node, &computer).await;
            }
            Some(Ok(Event::InitDone)) => {
                if let Some(seen) = listing.take() {
                    // Gone (or moved off this node) while the watch was down.
                    let dropped = node.index.retain(|uid| seen.contains(uid));
                    node.proxy_callers.retain(|uid| seen.contains(uid));
                    if dropped > 0 {
                        info!(dropped, "forgot AgentComputers no longer placed here");
                    }
                }
                node.placement_changed.notify_one();
                node.readiness.set_computers_synced();
            }
            Some(Ok(Event::Apply(computer))) => apply(&node, &computer).await,
            Some(Ok(Event::Delete(computer))) => {
                if let Some(uid) = &computer.metadata.uid {
                    super::moves::on_unplaced(&node, &computer, uid);
                    node.index.remove(uid);
                    node.proxy_callers.remove(uid);
                    node.activity.forget(uid);
                    info!(computer = %spec::display_name(&computer), %uid, "AgentComputer gone; its data stays until its volume is deleted");
                    node.placement_changed.notify_one();
                }
            }
        }
    }
}

/// Brings computer `computer` on this node in line with its spec.
async fn apply(node: &Arc<Node>, computer: &AgentComputer) {
    let shown = spec::display_name(computer);
    let Some(uid) = computer.metadata.uid.clone() else {
        warn!(computer = %shown, "AgentComputer without metadata.uid; ignored");
        return;
    };
    let credential = computer
        .status
        .as_ref()
        .and_then(|s| s.credential_hash.as_deref());
    let parsed = credential.and_then(parse_credential_hash);
    if credential.is_some() && parsed.is_none() {
        warn!(computer = %shown, "status.credentialHash is not sha256:<64 lowercase hex>; refusing every call");
    }
    let new_here = node.index.get(&uid).is_none();
    node.index.upsert(Entry {
        uid: uid.clone(),
        namespace: computer.metadata.namespace.clone().unwrap_or_default(),
        name: computer.metadata.name.clone().unwrap_or_default(),
        credential: parsed,
        sandbox: SandboxInfo {
            configured: computer.spec.runtimes.container && computer.spec.sandbox.is_some(),
            condition: computer.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == agentcomputer_crds::condition_types::SANDBOX_READY)
                    .map(|c| (c.status == "True", c.reason.clone(), c.message.clone()))
            }),
        },
    });
    if computer.metadata.deletion_timestamp.is_some() {
        // Being deleted: never create (or grow) its database now.
        return;
    }
    // Moving away: handed over once the operator says so.
    super::moves::on_placed(node, computer, &uid);
    let config = match spec::config_of(computer) {
        Ok(c) => c,
        Err(e) => {
            warn!(computer = %shown, error = %e, "cannot apply the spec; its egress is deny-all until it can");
            narrow_to_deny_all(node, &uid).await;
            return;
        }
    };
    node.proxy_callers.set_policy(&uid, &config.egress);
    let quota = config.limits.max_bytes;
    let mut changed = new_here;
    match node.registry.update(&uid, config.clone()).await {
        Ok(updated) => changed |= updated,
        Err(RegistryError::NotFound(_)) if node.was_deleted(&uid) => {
            warn!(computer = %shown, %uid, "its volume and data were deleted; not creating a new database");
        }
        Err(RegistryError::NotFound(_)) if source_of(computer).is_some() => {
            changed |= create_from_source(node, computer, &uid, config).await;
        }
        Err(RegistryError::NotFound(_)) => {
            let root = sandbox_owner(node, &uid).await;
            match node.registry.create_with(&uid, config.clone(), root).await {
                Ok(_) => {
                    info!(computer = %shown, %uid, quota, root.uid, root.gid, "created the computer's database");
                    changed = true;
                }
                // Its backup exists (it was served on another node, or
                // this node lost its disk): restore it now, not at the
                // first call, and apply the spec to it.
                Err(RegistryError::AlreadyExists(_)) => match node.registry.acquire(&uid).await {
                    Ok(lease) => {
                        drop(lease);
                        info!(computer = %shown, %uid, "restored the computer from its backup");
                        if let Err(e) = node.registry.update(&uid, config).await {
                            warn!(computer = %shown, error = %e, "cannot apply the spec to the restored computer");
                        }
                        changed = true;
                    }
                    Err(e) => {
                        warn!(computer = %shown, error = %e, "cannot restore the computer from its backup")
                    }
                },
                Err(e) => {
                    warn!(computer = %shown, error = %e, "cannot create the computer's database")
                }
            }
        }
        Err(e) => warn!(computer = %shown, error = %e, "cannot apply the spec"),
    }
    if changed {
        // The capacity depends on the computers here and their quotas.
        node.placement_changed.notify_one();
    }
}

/// The snapshot a computer with `spec.source` starts from: the annotation
/// the operator writes before it places the computer.
fn source_of(computer: &AgentComputer) -> Option<&str> {
    computer
        .metadata
        .annotations
        .as_ref()?
        .get(labels::SOURCE_SNAPSHOT)
        .map(String::as_str)
}

/// Makes computer `uid`'s database from its source snapshot (restored
/// from the backup store, wherever it was taken) and applies its own spec
/// to it. A computer whose backup exists already (served before, on this
/// node or another) is restored from that instead. Nothing is made when
/// the snapshot cannot be read: an empty computer would pass for the
/// copy; the next event of the computer tries again. Returns whether a
/// computer was made.
async fn create_from_source(
    node: &Arc<Node>,
    computer: &AgentComputer,
    uid: &str,
    config: crate::computer::Config,
) -> bool {
    let shown = spec::display_name(computer);
    let Some(snapshot) = source_of(computer) else {
        return false;
    };
    let source = crate::registry::SnapshotSource::Snapshot(snapshot.to_string());
    match node.registry.create_from(uid, &source).await {
        Ok(_) => {
            info!(computer = %shown, %uid, snapshot, "created the computer from its source snapshot")
        }
        // Its own backup exists: it was made before.
        Err(RegistryError::AlreadyExists(_)) => {
            if let Err(e) = node.registry.acquire(uid).await {
                warn!(computer = %shown, error = %e, "cannot restore the computer from its backup");
                return false;
            }
        }
        Err(e) => {
            warn!(computer = %shown, %uid, snapshot, error = %e, "cannot create the computer from its source snapshot; it is not created empty");
            return false;
        }
    }
    if let Err(e) = node.registry.update(uid, config).await {
        warn!(computer = %shown, error = %e, "cannot apply the spec to the computer made from its source");
    }
    true
}

/// Gives computer `uid` deny-all egress at every enforcement point this
/// agent has (the in-process runtimes through its settings, the proxy
/// through its caller table), keeping its other settings: a spec this
/// agent cannot apply must never leave an older, wider policy in force in
/// one place while another says deny-all.
async fn narrow_to_deny_all(node: &Node, uid: &str) {
    let deny = agentcomputer_egress::EgressConfig::default();
    node.proxy_callers.set_policy(uid, &deny);
    let Ok(lease) = node.registry.acquire(uid).await else {
        // Not created here yet: nothing runs with a policy.
        return;
    };
    let s = lease.settings();
    drop(lease);
    let config = crate::computer::Config {
        limits: agentcomputer_fs::Limits {
            max_bytes: s.max_bytes,
            max_inodes: s.max_inodes,
        },
        egress: deny,
        runtimes: s.runtimes,
        exec: s.exec,
        display_name: s.display_name,
        retention: s.retention_secs.map(std::time::Duration::from_secs),
    };
    if let Err(e) = node.registry.update(uid, config).await {
        warn!(%uid, error = %e, "cannot narrow the computer's egress to deny-all");
    }
}

/// The owner of a new computer's root directory: the sandbox user, so that
/// it can write at the root of its volume. Read from the CSI volume
/// attributes `agentcomputer.dev/uid` and `agentcomputer.dev/gid` of the
/// computer's PersistentVolume (written by the operator); where the PV is
/// not there yet, cannot be read, or holds no valid number, the CRD's
/// [`SANDBOX_UID`] / [`SANDBOX_GID`] (what the operator writes today).
async fn sandbox_owner(node: &Node, uid: &str) -> Owner {
    let fallback = Owner {
        uid: SANDBOX_UID,
        gid: SANDBOX_GID,
    };
    let api: Api<PersistentVolume> = Api::all(node.client.clone());
    let pv = match api.get_opt(&volume_name(uid)).await {
        Ok(pv) => pv,
        Err(e) => {
            warn!(%uid, error = %e, "cannot read the computer's PersistentVolume; its root directory gets the default sandbox owner");
            None
        }
    };
    let attributes = pv
        .and_then(|pv| pv.spec)
        .and_then(|spec| spec.csi)
        .and_then(|csi| csi.volume_attributes)
        .unwrap_or_default();
    let id = |key: &str, default: u32| -> u32 {
        match attributes.get(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                warn!(%uid, key, value = %v, "volume attribute is not a decimal id; using the default");
                default
            }),
        }
    };
    Owner {
        uid: id(labels::ATTR_UID, fallback.uid),
        gid: id(labels::ATTR_GID, fallback.gid),
    }
}
