//! Caches of Nodes and node-agent pods, and the trigger that re-reconciles
//! every computer when placement inputs change (an agent becomes ready or
//! goes away, a node's labels, taints, cordon or readiness change). Node
//! heartbeats that change none of these do not trigger.

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
    .touched_objects()
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
    .touched_objects()
    .filter_map(changed_by(agent_key));
    (
        nodes,
        agents,
        futures::stream::select(node_events, agent_events),
    )
}

/// Passes an event on only when `key` of that object differs from the last
/// one seen (or the object was deleted).
fn changed_by<K: kube::Resource, F: Fn(&K) -> u64>(
    key: F,
) -> impl FnMut(Result<K, watcher::Error>) -> future::Ready<Option<()>> {
    let mut seen: HashMap<String, u64> = HashMap::new();
    move |ev| {
        let out = match ev {
            Ok(obj) => {
                let k = if obj.meta().deletion_timestamp.is_some() {
                    0
                } else {
                    key(&obj)
                };
                let name = obj.name_any();
                (seen.insert(name, k) != Some(k)).then_some(())
            }
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
