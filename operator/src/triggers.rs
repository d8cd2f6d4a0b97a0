//! Caches of Nodes and node-agent pods, and the trigger that re-reconciles
//! every computer when placement inputs change (an agent becomes ready or
//! goes away, a node's labels, taints, cordon or readiness change, a node or
//! agent pod is deleted). Node heartbeats that change none of these do not
//! trigger.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::context::Config;
use crate::placement;

/// Starts the node and agent-pod reflectors. The returned stream must be
/// polled (the controller does, through `reconcile_all_on`) for the caches
/// to fill.
pub fn watch_placement_inputs(
    client: &Client,
    cfg: &Config,
) -> (
    Store<Node>,
    Store<Pod>,
    impl Stream<Item = ()> + Send + 'static,
) {
    let (nodes, node_writer) = reflector::store();
    let (agents, agent_writer) = reflector::store();
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
        nodes,
        agents,
        futures::stream::select(node_events, agent_events),
    )
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
