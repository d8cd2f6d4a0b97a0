//! Caches of Nodes, node-agent pods and the CSIStorageCapacity objects the
//! node agents publish, and the triggers of placement:
//! - every computer is reconciled again when a node or agent changes (an
//!   agent becomes ready or goes away, a node's labels, taints, cordon or
//!   readiness change, a node or agent pod is deleted); node heartbeats that
//!   change none of these do not trigger;
//! - computers waiting for a node are reconciled again when a node agent's
//!   published capacity changes ([`pending_on_capacity_change`]); placed
//!   computers are not, since capacity never moves them.

use parking_lot::Mutex;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use agentcomputer_crds::{AgentComputer, labels};
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::context::{Config, PlacementCaches};
use crate::placement;

/// Watch settings of the node agents' CSIStorageCapacity objects: those
/// labelled `agentcomputer.dev/node` (in the agent namespace, by the Api).
pub fn capacity_watch_config() -> watcher::Config {
    watcher::Config::default()
        .labels(labels::NODE)
        .any_semantic()
}

/// Starts the node, agent-pod and capacity reflectors. The returned stream
/// must be polled (the controller does, through `reconcile_all_on`) for the
/// caches to fill; it yields when nodes or agents change, never for
/// capacities (see [`pending_on_capacity_change`]).
pub fn watch_placement_inputs(
    client: &Client,
    cfg: &Config,
) -> (PlacementCaches, impl Stream<Item = ()> + Send + 'static) {
    let (nodes, node_writer) = reflector::store();
    let (agents, agent_writer) = reflector::store();
    let (capacities, capacity_writer) = reflector::store();
    let capacity_api = Api::<CSIStorageCapacity>::namespaced(client.clone(), &cfg.agent_namespace);
    let capacity_events = reflector::reflector(
        capacity_writer,
        watcher(capacity_api, capacity_watch_config()),
    )
    .default_backoff()
    .filter_map(|ev| {
        if let Err(e) = ev {
            tracing::warn!(error = %e, "watch of published capacity failed; retrying");
        }
        future::ready(None::<()>)
    });
    let node_events = reflector::reflector(
        node_writer,
        watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        ),
    )
    .default_backoff()
    .filter_map(changed_by(node_key));
    let agent_api = Api::<Pod>::namespaced(client.clone(), &cfg.agent_namespace);
    let agent_events = reflector::reflector(
        agent_writer,
        watcher(
            agent_api,
            watcher::Config::default()
                .labels(&cfg.agent_selector)
                .any_semantic(),
        ),
    )
    .default_backoff()
    .filter_map(changed_by(agent_key));
    (
        PlacementCaches {
            nodes,
            agents,
            capacities,
        },
        futures::stream::select(
            futures::stream::select(node_events, agent_events),
            capacity_events,
        ),
    )
}

/// Mapper for the controller's watch of CSIStorageCapacity objects: when an
/// object's `capacity` or `maximumVolumeSize` differs from the last seen (or
/// is seen first), the computers in `computers` that wait for a node (no
/// `status.node`, not being deleted); otherwise none.
pub fn pending_on_capacity_change(
    computers: Store<AgentComputer>,
) -> impl Fn(CSIStorageCapacity) -> Vec<ObjectRef<AgentComputer>> + Send + Sync + 'static {
    let seen: Mutex<HashMap<String, u64>> = Mutex::new(HashMap::new());
    move |cap| {
        let key = hash((
            cap.capacity.as_ref().map(|q| q.0.clone()),
            cap.maximum_volume_size.as_ref().map(|q| q.0.clone()),
            cap.metadata.deletion_timestamp.is_some(),
        ));
        let changed = seen.lock().insert(cap.name_any(), key) != Some(key);
        if !changed {
            return Vec::new();
        }
        computers
            .state()
            .iter()
            .filter(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && c.status.as_ref().and_then(|s| s.node.as_ref()).is_none()
            })
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect()
    }
}

/// Passes an event on when `key` of an object differs from the last one
/// seen, when an object is deleted, and when a relist completes (it may have
/// hidden deletions).
fn changed_by<K: kube::Resource, F: Fn(&K) -> u64>(
    key: F,
) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) -> future::Ready<Option<()>> {
    let mut seen: HashMap<String, u64> = HashMap::new();
    move |ev| {
        let out = match ev {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let k = if obj.meta().deletion_timestamp.is_some() {
                    0
                } else {
                    key(&obj)
                };
                (seen.insert(obj.name_any(), k) != Some(k)).then_some(())
            }
            Ok(watcher::Event::Delete(obj)) => {
                seen.remove(&obj.name_any());
                Some(())
            }
            Ok(watcher::Event::InitDone) => Some(()),
            Ok(watcher::Event::Init) => None,
            Err(e) => {
                tracing::warn!(error = %e, "watch of placement inputs failed; retrying");
                None
            }
        };
        future::ready(out)
    }
}

fn hash<T: Hash>(t: T) -> u64 {
    let mut h = DefaultHasher::new();
    t.hash(&mut h);
    h.finish().max(1)
}

fn node_key(n: &Node) -> u64 {
    let taints: Vec<(String, Option<String>, String)> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect();
    let labels: BTreeMap<String, String> = n.labels().clone();
    let cordoned = n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    hash((labels, taints, cordoned, placement::node_ready(n)))
}

fn agent_key(p: &Pod) -> u64 {
    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
    let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
    hash((node, ip, placement::pod_ready(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn node(name: &str, ready: bool, label: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pool": label}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn capacity_changes_wake_only_computers_waiting_for_a_node() {
        let (store, mut w) = reflector::store::<AgentComputer>();
        let computer = |name: &str, node: Option<&str>| -> AgentComputer {
            let mut v = serde_json::json!({
                "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
                "metadata": {"name": name, "namespace": "team", "uid": name},
                "spec": {"storage": {"size": "1Gi"}}
            });
            if let Some(n) = node {
                v["status"] = serde_json::json!({"node": n});
            }
            serde_json::from_value(v).unwrap()
        };
        w.apply_watcher_event(&watcher::Event::Apply(computer("waiting", None)));
        w.apply_watcher_event(&watcher::Event::Apply(computer("placed", Some("a"))));
        let cap = |bytes: &str, rv: &str| -> CSIStorageCapacity {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "agentcomputer-a", "resourceVersion": rv},
                "storageClassName": "agentcomputer", "capacity": bytes
            }))
            .unwrap()
        };
        let map = pending_on_capacity_change(store);
        let names = |v: Vec<ObjectRef<AgentComputer>>| -> Vec<String> {
            v.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(names(map(cap("1Gi", "1"))), ["waiting"], "first sight");
        assert!(map(cap("1Gi", "2")).is_empty(), "same room: nothing to do");
        assert_eq!(names(map(cap("2Gi", "3"))), ["waiting"], "room changed");
    }

    #[test]
    fn only_placement_relevant_changes_and_deletions_trigger() {
        let mut f = changed_by(node_key);
        let mut fire = |ev: watcher::Event<Node>| f(Ok(ev)).now_or_never().unwrap().is_some();
        assert!(!fire(watcher::Event::Init));
        assert!(fire(watcher::Event::InitApply(node("a", true, "x"))));
        assert!(fire(watcher::Event::InitDone));
        // A heartbeat: same labels, taints, readiness.
        assert!(!fire(watcher::Event::Apply(node("a", true, "x"))));
        assert!(
            fire(watcher::Event::Apply(node("a", false, "x"))),
            "readiness changed"
        );
        assert!(
            fire(watcher::Event::Apply(node("a", false, "y"))),
            "labels changed"
        );
        assert!(
            fire(watcher::Event::Delete(node("a", false, "y"))),
            "deleted"
        );
        assert!(
            fire(watcher::Event::Apply(node("a", false, "y"))),
            "recreated"
        );
    }
}
