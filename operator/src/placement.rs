//! Placement: which node serves a computer.
//!
//! A node is eligible when
//! - a node-agent pod (the DaemonSet's pod, found by label in the agent
//!   namespace) is bound to it, Running, Ready and not being deleted,
//! - the Node's `Ready` condition is `True` and it is not cordoned
//!   (`spec.unschedulable`),
//! - its labels contain the computer's `spec.nodeSelector`, and
//! - every `NoSchedule`/`NoExecute` taint is tolerated by `spec.tolerations`
//!   (matching rules of the Kubernetes scheduler, see the Toleration API
//!   reference: empty effect matches every effect, `Exists` ignores the value,
//!   an empty key with `Exists` matches every taint), and
//! - its node agent published a CSIStorageCapacity (storage.k8s.io/v1) whose
//!   room, less the sizes of placements decided here that it does not reflect
//!   yet ([`crate::context::Context::place`]), is at least
//!   `spec.storage.size`. A node without one is not eligible.
//!
//! Among eligible nodes the one serving the fewest computers wins (ties: node
//! name), which spreads computers by count. Placement is sticky: once chosen,
//! the node is kept in status and in the PersistentVolume's node affinity,
//! because the SQLite database lives on that node's disk.

use std::collections::{BTreeMap, HashMap};

use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_crds::{AgentComputerSpec, labels};
use agentcomputer_runtime_contract::human_quantity;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;

/// A ready node agent on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    /// Name of the node-agent pod.
    pub pod: String,
    /// Its pod IP (the gRPC endpoint and the egress proxy listen there), if
    /// known yet.
    pub ip: Option<String>,
}

/// Ready node agents by node name, from the node-agent pods.
pub fn ready_agents<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> HashMap<String, Agent> {
    let mut out = HashMap::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() || !pod_ready(pod) {
            continue;
        }
        let (Some(node), Some(name)) = (
            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            pod.metadata.name.clone(),
        ) else {
            continue;
        };
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        out.insert(node, Agent { pod: name, ip });
    }
    out
}

/// Room a node agent published for its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Bytes a new computer's quota may take on the node: the smaller of
    /// `capacity` and `maximumVolumeSize` (equal by the node agent's contract).
    pub bytes: u64,
    /// `metadata.resourceVersion` of the object: a placement decided at one
    /// version is reflected in the room once the object has changed.
    pub version: String,
}

/// Room by node name, from the CSIStorageCapacity objects of `storage_class`
/// labelled `agentcomputer.dev/node` (objects being deleted, of other classes
/// or with neither quantity readable are skipped; a node with several keeps
/// the smallest room).
pub fn published_capacity<'a>(
    objects: impl IntoIterator<Item = &'a CSIStorageCapacity>,
    storage_class: &str,
) -> HashMap<String, Published> {
    let mut out: HashMap<String, Published> = HashMap::new();
    for o in objects {
        if o.storage_class_name != storage_class || o.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(node) = o.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE)) else {
            continue;
        };
        let bytes = [o.capacity.as_ref(), o.maximum_volume_size.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|q| match quantity_bytes(q) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(node = %node, error = %e, "unreadable published capacity");
                    None
                }
            })
            .min();
        let Some(bytes) = bytes else { continue };
        let p = Published {
            bytes,
            version: o.metadata.resource_version.clone().unwrap_or_default(),
        };
        match out.get(node) {
            Some(old) if old.bytes <= p.bytes => {}
            _ => {
                out.insert(node.clone(), p);
            }
        }
    }
    out
}

/// True when the pod is Running and its `Ready` condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Why a pod that is not ready cannot run, as the scheduler or the kubelet
/// put it in its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTrouble {
    /// A CamelCase reason (`Unschedulable`, `ErrImagePull`,
    /// `ImagePullBackOff`, `CrashLoopBackOff`, `InitContainerFailed`…).
    pub reason: String,
    /// The scheduler's or kubelet's message, naming the container.
    pub message: String,
}

/// Waiting reasons of a container that are normal steps of a start, not
/// trouble (kubelet: `pkg/kubelet/kuberuntime`, `ContainerCreating` and
/// `PodInitializing`).
const STARTING_REASONS: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The scheduler's message for a pod whose claims are not bound yet
/// (kube-scheduler's VolumeBinding plugin, `ErrReasonUnboundImmediatePVC`).
const UNBOUND_CLAIMS: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The first trouble found in `pod`'s status: the scheduler's
/// `PodScheduled=False`, then an init container that failed or waits for a
/// reason other than a normal start, then such a main container. `None`
/// for a pod that is merely on its way (or ready).
pub fn pod_trouble(pod: &Pod) -> Option<PodTrouble> {
    let status = pod.status.as_ref()?;
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False");
    if let Some(c) = unschedulable {
        // The claim made just before the pod is still binding: the
        // scheduler tries again once it is bound, so this is a step of the
        // start, not trouble.
        if c.message
            .as_deref()
            .is_some_and(|m| m.contains(UNBOUND_CLAIMS))
        {
            return None;
        }
        return Some(PodTrouble {
            reason: condition_reason(c.reason.as_deref(), "Unschedulable"),
            message: c.message.clone().unwrap_or_default(),
        });
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in containers {
        let Some(state) = &cs.state else { continue };
        if let Some(w) = &state.waiting {
            let reason = w.reason.as_deref().unwrap_or_default();
            if !reason.is_empty() && !STARTING_REASONS.contains(&reason) {
                return Some(PodTrouble {
                    reason: condition_reason(Some(reason), "ContainerWaiting"),
                    message: format!(
                        "container {}: {}",
                        cs.name,
                        w.message.as_deref().unwrap_or(reason)
                    ),
                });
            }
        }
        let is_init = status
            .init_container_statuses
            .iter()
            .flatten()
            .any(|i| i.name == cs.name);
        if let Some(t) = state
            .terminated
            .as_ref()
            .filter(|t| is_init && t.exit_code != 0)
        {
            return Some(PodTrouble {
                reason: "InitContainerFailed".into(),
                message: format!(
                    "init container {} exited with {}: {}",
                    cs.name,
                    t.exit_code,
                    t.message
                        .as_deref()
                        .or(t.reason.as_deref())
                        .unwrap_or("no message")
                ),
            });
        }
    }
    None
}

/// `reason` when it is a valid metav1.Condition reason
/// (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024 characters),
/// else `fallback`.
fn condition_reason(reason: Option<&str>, fallback: &str) -> String {
    let valid = |r: &str| {
        let b = r.as_bytes();
        !b.is_empty()
            && b.len() <= 1024
            && b[0].is_ascii_alphabetic()
            && b.iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
            && !matches!(b[b.len() - 1], b',' | b':')
    };
    match reason {
        Some(r) if valid(r) => r.to_string(),
        _ => fallback.to_string(),
    }
}

/// True when the Node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Why a node cannot serve a computer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unfit {
    /// No ready node-agent pod on the node.
    NoAgent,
    /// The Node is not Ready.
    NotReady,
    /// The Node is cordoned.
    Unschedulable,
    /// A nodeSelector label is missing or differs.
    Selector(String),
    /// A taint is not tolerated.
    Taint(String),
    /// The node agent published no CSIStorageCapacity.
    NoCapacity,
    /// Less room than the computer's size: bytes free.
    NoRoom(u64),
}

/// What placement needs besides the computer's spec: ready agents, free room
/// by node (published capacity less placements it does not reflect yet), and
/// the computer's size in bytes.
pub struct Candidates<'a> {
    /// Ready node agents by node name.
    pub agents: &'a HashMap<String, Agent>,
    /// Free bytes by node name; a node absent here published no capacity.
    pub room: &'a HashMap<String, u64>,
    /// `spec.storage.size` in bytes.
    pub size: u64,
}

impl Candidates<'_> {
    /// Why `node` cannot serve a computer of `spec`, if it cannot.
    pub fn unfit(&self, node: &Node, spec: &AgentComputerSpec) -> Option<Unfit> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if !self.agents.contains_key(name) {
            return Some(Unfit::NoAgent);
        }
        if let Err(u) = node_fits(node, spec) {
            return Some(u);
        }
        match self.room.get(name) {
            None => Some(Unfit::NoCapacity),
            Some(&free) if free < self.size => Some(Unfit::NoRoom(free)),
            Some(_) => None,
        }
    }
}

/// Checks everything but the agent (see the module docs).
pub fn node_fits(node: &Node, spec: &AgentComputerSpec) -> Result<(), Unfit> {
    if !node_ready(node) {
        return Err(Unfit::NotReady);
    }
    let nspec = node.spec.as_ref();
    if nspec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return Err(Unfit::Unschedulable);
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    for (k, v) in spec.node_selector.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Err(Unfit::Selector(k.clone()));
        }
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    for taint in nspec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]) {
        if taint.effect == "PreferNoSchedule" {
            continue;
        }
        if !tolerations.iter().any(|t| tolerates(t, taint)) {
            return Err(Unfit::Taint(taint.key.clone()));
        }
    }
    Ok(())
}

/// Whether `tol` tolerates `taint` (semantics of core/v1 Toleration).
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" => {
            key == taint.key
                && tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Picks the eligible node serving the fewest computers (`load`: computers per
/// node name), ties broken by name. None when no node is eligible.
pub fn choose<'a>(
    spec: &AgentComputerSpec,
    nodes: impl IntoIterator<Item = &'a Node>,
    cands: &Candidates<'_>,
    load: &HashMap<String, usize>,
) -> Option<String> {
    nodes
        .into_iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
        .filter(|(_, n)| cands.unfit(n, spec).is_none())
        .min_by(|(a, _), (b, _)| {
            let la = load.get(*a).copied().unwrap_or(0);
            let lb = load.get(*b).copied().unwrap_or(0);
            la.cmp(&lb).then_with(|| a.cmp(b))
        })
        .map(|(name, _)| name.to_string())
}

/// Human-readable summary of why no node fits, for the Placed condition:
/// nodes counted per reason, e.g. `0/3 nodes are eligible: 1 no room for 5Gi
/// (2Gi free), 2 no published capacity` (for several nodes without room, the
/// largest free room is shown).
pub fn explain<'a>(
    spec: &AgentComputerSpec,
    nodes: impl IntoIterator<Item = &'a Node>,
    cands: &Candidates<'_>,
) -> String {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut no_room: Option<(usize, u64)> = None;
    let mut total = 0;
    for n in nodes {
        total += 1;
        let Some(why) = cands.unfit(n, spec) else {
            continue;
        };
        let key = match why {
            Unfit::NoAgent => "no ready node agent",
            Unfit::NotReady => "node not Ready",
            Unfit::Unschedulable => "node cordoned",
            Unfit::Selector(_) => "nodeSelector mismatch",
            Unfit::Taint(_) => "untolerated taint",
            Unfit::NoCapacity => "no published capacity",
            Unfit::NoRoom(free) => {
                let (count, most) = no_room.get_or_insert((0, 0));
                *count += 1;
                *most = (*most).max(free);
                continue;
            }
        };
        *counts.entry(key).or_default() += 1;
    }
    let mut parts: Vec<String> = Vec::new();
    if let Some((count, most)) = no_room {
        parts.push(format!(
            "{count} no room for {} ({} free)",
            spec.storage.size.0,
            human_quantity(most)
        ));
    }
    parts.extend(counts.iter().map(|(k, v)| format!("{v} {k}")));
    format!(
        "0/{total} nodes are eligible: {}",
        if parts.is_empty() {
            "no nodes".into()
        } else {
            parts.join(", ")
        }
    )
}

/// Whether room is all that keeps the computer off the cluster's nodes: at
/// least one node lacks room for its size ([`Unfit::NoRoom`]) and every
/// other node is excluded by the computer's own nodeSelector or
/// tolerations, which no wait changes. False when some node is unfit for
/// a passing cause (no ready agent, not Ready, cordoned, no published
/// capacity yet), or fits, or there are no nodes.
pub fn only_room_lacks<'a>(
    spec: &AgentComputerSpec,
    nodes: impl IntoIterator<Item = &'a Node>,
    cands: &Candidates<'_>,
) -> bool {
    let mut no_room = false;
    for n in nodes {
        match cands.unfit(n, spec) {
            Some(Unfit::NoRoom(_)) => no_room = true,
            Some(Unfit::Selector(_) | Unfit::Taint(_)) => {}
            _ => return false,
        }
    }
    no_room
}

/// The value of the node's `kubernetes.io/hostname` label, which the
/// PersistentVolume's node affinity selects; falls back to the node name.
pub fn hostname_label(node: Option<&Node>, node_name: &str) -> String {
    node.and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get("kubernetes.io/hostname").cloned())
        .unwrap_or_else(|| node_name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::StorageSpec;
    use k8s_openapi::api::core::v1::{
        NodeCondition, NodeSpec, NodeStatus, PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn pod_with(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "demo-sandbox"},
            "status": status,
        }))
        .expect("valid pod")
    }

    #[test]
    fn a_missing_image_is_the_kubelets_reason() {
        let pod = pod_with(serde_json::json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "install-runner", "image": "r", "imageID": "",
                "ready": true, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"name": "sandbox", "image": "nope:1", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff",
                    "message": "Back-off pulling image \"nope:1\""}}}],
        }));
        let t = pod_trouble(&pod).expect("trouble");
        assert_eq!(t.reason, "ImagePullBackOff");
        assert_eq!(
            t.message,
            "container sandbox: Back-off pulling image \"nope:1\""
        );
    }

    #[test]
    fn a_normal_start_is_no_trouble_and_odd_reasons_are_made_valid() {
        let starting = pod_with(serde_json::json!({
            "phase": "Pending",
            "containerStatuses": [{"name": "sandbox", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}}],
        }));
        assert_eq!(pod_trouble(&starting), None);
        let odd = pod_with(serde_json::json!({
            "phase": "Pending",
            "containerStatuses": [{"name": "sandbox", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "not a reason!", "message": "m"}}}],
        }));
        assert_eq!(
            pod_trouble(&odd).expect("trouble").reason,
            "ContainerWaiting"
        );
    }

    #[test]
    fn unschedulable_and_failed_init_containers_are_reported() {
        let pod = pod_with(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/1 nodes are available"}],
        }));
        let t = pod_trouble(&pod).expect("trouble");
        assert_eq!(
            (t.reason.as_str(), t.message.as_str()),
            ("Unschedulable", "0/1 nodes are available")
        );
        // A claim still binding is a step of the start.
        let binding = pod_with(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"}],
        }));
        assert_eq!(pod_trouble(&binding), None);
        let pod = pod_with(serde_json::json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "install-runner", "image": "r", "imageID": "",
                "ready": false, "restartCount": 1,
                "state": {"terminated": {"exitCode": 2, "reason": "Error", "message": "no space"}}}],
        }));
        let t = pod_trouble(&pod).expect("trouble");
        assert_eq!(t.reason, "InitContainerFailed");
        assert_eq!(
            t.message,
            "init container install-runner exited with 2: no space"
        );
    }

    fn spec() -> AgentComputerSpec {
        AgentComputerSpec {
            storage: StorageSpec {
                size: Quantity("1Gi".into()),
                reclaim_policy: Default::default(),
                max_inodes: None,
            },
            runtimes: Default::default(),
            sandbox: None,
            egress: Default::default(),
            limits: Default::default(),
            node_selector: None,
            tolerations: None,
            source: None,
            retention: None,
        }
    }

    fn node(name: &str, ready: bool) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn agent_pod(name: &str, node: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.0.0.7".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    const GI: u64 = 1 << 30;

    fn room(nodes: &[(&str, u64)]) -> HashMap<String, u64> {
        nodes.iter().map(|(n, b)| (n.to_string(), *b)).collect()
    }

    fn cands<'a>(
        agents: &'a HashMap<String, Agent>,
        room: &'a HashMap<String, u64>,
    ) -> Candidates<'a> {
        Candidates {
            agents,
            room,
            size: GI,
        }
    }

    #[test]
    fn only_nodes_with_ready_agents_are_chosen() {
        let nodes = [node("a", true), node("b", true)];
        let agents = ready_agents(&[
            agent_pod("agent-a", "a", false),
            agent_pod("agent-b", "b", true),
        ]);
        assert_eq!(agents.len(), 1);
        let r = room(&[("a", 10 * GI), ("b", 10 * GI)]);
        assert_eq!(
            choose(&spec(), &nodes, &cands(&agents, &r), &HashMap::new()).as_deref(),
            Some("b")
        );
        let none = ready_agents(&[agent_pod("agent-a", "a", false)]);
        assert_eq!(
            choose(&spec(), &nodes, &cands(&none, &r), &HashMap::new()),
            None
        );
        assert_eq!(
            explain(&spec(), &nodes, &cands(&none, &r)),
            "0/2 nodes are eligible: 2 no ready node agent"
        );
    }

    #[test]
    fn room_and_published_capacity_decide() {
        let nodes = [node("a", true), node("b", true), node("c", true)];
        let agents = ready_agents(&[
            agent_pod("x", "a", true),
            agent_pod("y", "b", true),
            agent_pod("z", "c", true),
        ]);
        let mut s = spec();
        s.storage.size = Quantity("5Gi".into());
        // a has 2Gi, b exactly 5Gi, c published nothing.
        let r = room(&[("a", 2 * GI), ("b", 5 * GI)]);
        let c = Candidates {
            agents: &agents,
            room: &r,
            size: 5 * GI,
        };
        assert_eq!(
            choose(&s, &nodes, &c, &HashMap::new()).as_deref(),
            Some("b")
        );
        let r = room(&[("a", 2 * GI), ("b", 3 * GI + GI / 2)]);
        let c = Candidates {
            agents: &agents,
            room: &r,
            size: 5 * GI,
        };
        assert_eq!(choose(&s, &nodes, &c, &HashMap::new()), None);
        assert_eq!(
            explain(&s, &nodes, &c),
            "0/3 nodes are eligible: 2 no room for 5Gi (3.5Gi free), 1 no published capacity"
        );
    }

    #[test]
    fn room_alone_is_told_from_passing_causes() {
        let nodes = [node("a", true), node("b", true), node("c", true)];
        let agents = ready_agents(&[
            agent_pod("x", "a", true),
            agent_pod("y", "b", true),
            agent_pod("z", "c", true),
        ]);
        let mut s = spec();
        s.storage.size = Quantity("500Gi".into());
        let size = 500 * GI;
        let all_small = room(&[("a", 2 * GI), ("b", 100 * GI), ("c", 50 * GI)]);
        let c = Candidates {
            agents: &agents,
            room: &all_small,
            size,
        };
        assert!(only_room_lacks(&s, &nodes, &c));
        // A node the nodeSelector excludes changes nothing by waiting.
        let mut labelled = node("a", true);
        labelled.metadata.labels = Some([("disk".to_string(), "ssd".to_string())].into());
        let mut picky = s.clone();
        picky.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        let two = [labelled.clone(), node("b", true)];
        assert!(only_room_lacks(&picky, &two, &c));
        // A node that has not published its room yet may have it.
        let unpublished = room(&[("a", 2 * GI), ("b", 100 * GI)]);
        let c2 = Candidates {
            agents: &agents,
            room: &unpublished,
            size,
        };
        assert!(!only_room_lacks(&s, &nodes, &c2));
        // Nor does a node whose agent is not ready, or that is not Ready.
        let two_agents = ready_agents(&[agent_pod("x", "a", true), agent_pod("y", "b", true)]);
        let c3 = Candidates {
            agents: &two_agents,
            room: &all_small,
            size,
        };
        assert!(!only_room_lacks(&s, &nodes, &c3));
        assert!(!only_room_lacks(
            &s,
            &[node("a", true), node("b", false)],
            &c
        ));
        // A node that fits, and no node at all, are not "no room".
        let roomy = room(&[("a", 2 * GI), ("b", 600 * GI), ("c", 50 * GI)]);
        let c4 = Candidates {
            agents: &agents,
            room: &roomy,
            size,
        };
        assert!(!only_room_lacks(&s, &nodes, &c4));
        assert!(!only_room_lacks(&s, &[], &c));
    }

    #[test]
    fn published_capacity_is_read_per_node() {
        let cap = |name: &str, node: Option<&str>, class: &str, cap: &str, max: Option<&str>| {
            let mut v = serde_json::json!({
                "metadata": {"name": name, "resourceVersion": "7"},
                "storageClassName": class,
                "capacity": cap,
            });
            if let Some(n) = node {
                v["metadata"]["labels"] = serde_json::json!({"agentcomputer.dev/node": n});
            }
            if let Some(m) = max {
                v["maximumVolumeSize"] = m.into();
            }
            serde_json::from_value::<CSIStorageCapacity>(v).unwrap()
        };
        let objs = [
            cap(
                "agentcomputer-a",
                Some("a"),
                "agentcomputer",
                "10Gi",
                Some("8Gi"),
            ),
            cap("agentcomputer-b", Some("b"), "agentcomputer", "3Gi", None),
            cap("other-class", Some("c"), "fast", "100Gi", None),
            cap("unlabelled", None, "agentcomputer", "100Gi", None),
            cap("unreadable", Some("d"), "agentcomputer", "lots", None),
        ];
        let p = published_capacity(&objs, "agentcomputer");
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p["a"].bytes, 8 * GI, "the smaller of the two quantities");
        assert_eq!(p["b"].bytes, 3 * GI);
        assert_eq!(p["b"].version, "7");
    }

    #[test]
    fn least_loaded_node_wins_ties_by_name() {
        let nodes = [node("c", true), node("a", true), node("b", true)];
        let agents = ready_agents(&[
            agent_pod("x", "a", true),
            agent_pod("y", "b", true),
            agent_pod("z", "c", true),
        ]);
        let mut load = HashMap::new();
        let r = room(&[("a", GI), ("b", GI), ("c", GI)]);
        let c = cands(&agents, &r);
        assert_eq!(choose(&spec(), &nodes, &c, &load).as_deref(), Some("a"));
        load.insert("a".to_string(), 2);
        load.insert("b".to_string(), 1);
        load.insert("c".to_string(), 1);
        assert_eq!(choose(&spec(), &nodes, &c, &load).as_deref(), Some("b"));
    }

    #[test]
    fn not_ready_cordoned_selector_and_taints_exclude() {
        let mut s = spec();
        let mut n = node("a", false);
        assert_eq!(node_fits(&n, &s), Err(Unfit::NotReady));
        n = node("a", true);
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(node_fits(&n, &s), Err(Unfit::Unschedulable));
        n = node("a", true);
        s.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        assert_eq!(node_fits(&n, &s), Err(Unfit::Selector("disk".into())));
        n.metadata.labels = Some([("disk".to_string(), "ssd".to_string())].into());
        assert_eq!(node_fits(&n, &s), Ok(()));
        n.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("agents".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }]);
        assert_eq!(node_fits(&n, &s), Err(Unfit::Taint("dedicated".into())));
        s.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("agents".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
        assert_eq!(node_fits(&n, &s), Ok(()));
    }

    #[test]
    fn toleration_semantics() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoExecute".into(),
            time_added: None,
        };
        let t =
            |key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>| Toleration {
                key: key.map(Into::into),
                operator: Some(op.into()),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                ..Default::default()
            };
        assert!(tolerates(&t(None, "Exists", None, None), &taint));
        assert!(tolerates(
            &t(Some("k"), "Exists", None, Some("NoExecute")),
            &taint
        ));
        assert!(!tolerates(
            &t(Some("k"), "Exists", None, Some("NoSchedule")),
            &taint
        ));
        assert!(tolerates(&t(Some("k"), "Equal", Some("v"), None), &taint));
        assert!(!tolerates(&t(Some("k"), "Equal", Some("w"), None), &taint));
        assert!(!tolerates(&t(Some("other"), "Exists", None, None), &taint));
        // PreferNoSchedule never blocks placement.
        let mut n = node("a", true);
        n.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: "soft".into(),
            value: None,
            effect: "PreferNoSchedule".into(),
            time_added: None,
        }]);
        assert_eq!(node_fits(&n, &spec()), Ok(()));
    }
}
