//! What every reconcile shares: the client, caches of nodes, node agents and
//! their published capacity, configuration, metrics, the event recorder and
//! the placements decided but not yet visible elsewhere.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;

use crate::metrics::Metrics;
use crate::placement::{self, Agent};

/// Operator settings (command-line flags of `operator`).
#[derive(Clone, Debug)]
pub struct Config {
    /// Namespace of the node-agent DaemonSet's pods.
    pub agent_namespace: String,
    /// Label selector of node-agent pods, e.g.
    /// `app.kubernetes.io/name=agentcomputer-node-agent`.
    pub agent_selector: String,
    /// The labels of that selector as key/value pairs (for NetworkPolicy peers).
    pub agent_labels: std::collections::BTreeMap<String, String>,
    /// Storage class name put on computers' PVs and PVCs, so that no dynamic
    /// provisioner ever claims them.
    pub storage_class: String,
    /// Seconds between periodic reconciles of a healthy computer.
    pub resync_seconds: u64,
    /// Image holding `agentcomputer-runner` (the node agent's image), which
    /// sandbox pods install from an init container and run as their main
    /// process (see [`crate::resources::pod`]). `None`: sandbox pods run
    /// `spec.sandbox.command` and container execs cannot reach them.
    pub runner_image: Option<String>,
    /// How clients in sandbox pods and the CLI check a node agent that
    /// serves its API over TLS (the chart's `nodeAgent.tls`). `None`: the
    /// agents serve plaintext.
    pub agent_tls: Option<AgentTls>,
    /// Name of a Service in the agent namespace that routes to the node
    /// agent of the caller's own node (`internalTrafficPolicy: Local`, the
    /// chart's `<release>-node-agent`). Sandbox pods dial its cluster IP,
    /// which outlives every node-agent pod, so a restarted or upgraded
    /// agent does not change their spec and running sandboxes are kept.
    /// `None`: they dial the serving agent pod's IP, and are replaced
    /// whenever that pod is.
    pub agent_service: Option<String>,
    /// Most bytes the quotas of one namespace's computers may add up to
    /// ([`crate::namespace_storage`]); `None`: no limit.
    pub namespace_storage_limit: Option<u64>,
    /// The node agents have a backup store: computers move and fail over
    /// (docs/moves.md). Off: they stay on their node.
    pub moves: bool,
    /// How long a node agent may be not ready before its computers fail
    /// over (with `moves`).
    pub failover_after: std::time::Duration,
}

/// Trust for node agents' TLS certificates, handed to each computer's
/// sandbox pod (environment) and credential Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTls {
    /// PEM certificates that sign the agents' serving certificate.
    pub ca_pem: String,
    /// The DNS name in the agents' certificate, checked in place of the
    /// pod IP that clients dial.
    pub server_name: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            agent_namespace: "agentcomputer-system".into(),
            agent_selector: "app.kubernetes.io/name=agentcomputer-node-agent".into(),
            agent_labels: [(
                "app.kubernetes.io/name".to_string(),
                "agentcomputer-node-agent".to_string(),
            )]
            .into(),
            storage_class: "agentcomputer".into(),
            resync_seconds: 300,
            runner_image: None,
            agent_tls: None,
            agent_service: None,
            moves: false,
            failover_after: std::time::Duration::from_secs(300),
            namespace_storage_limit: None,
        }
    }
}

impl Config {
    /// Parses `k=v,k2=v2` into the agent label map. Errors on set-based or
    /// inequality selectors, which a NetworkPolicy peer could not express.
    pub fn parse_selector(
        selector: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, String> {
        let mut out = std::collections::BTreeMap::new();
        for part in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .filter(|(k, v)| !k.ends_with('!') && !v.starts_with('='))
                .ok_or_else(|| format!("agent selector must be k=v pairs, got {part:?}"))?;
            out.insert(k.trim().to_string(), v.trim().to_string());
        }
        if out.is_empty() {
            return Err("agent selector is empty".into());
        }
        Ok(out)
    }
}

/// Caches of the placement inputs.
pub struct PlacementCaches {
    /// All Nodes.
    pub nodes: Store<Node>,
    /// Node-agent pods (agent namespace, agent selector).
    pub agents: Store<Pod>,
    /// CSIStorageCapacity objects labelled `agentcomputer.dev/node` in the
    /// agent namespace.
    pub capacities: Store<CSIStorageCapacity>,
}

/// Shared state of the reconciler.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Settings.
    pub config: Config,
    /// Cache of all Nodes.
    pub nodes: Store<Node>,
    /// Cache of node-agent pods.
    pub agents: Store<Pod>,
    /// Cache of the CSIStorageCapacity objects node agents publish in the
    /// agent namespace.
    pub capacities: Store<CSIStorageCapacity>,
    /// Cache of AgentComputers (the controller's own), for spreading.
    pub computers: Store<AgentComputer>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Events on AgentComputers.
    pub recorder: Recorder,
    /// Placements decided here that other inputs do not show yet.
    decided: Mutex<Decided>,
    /// Cluster IP of [`Config::agent_service`], once read (a Service's
    /// cluster IP never changes during its life).
    agent_service_ip: tokio::sync::OnceCell<String>,
}

/// Placements decided here, by computer uid.
#[derive(Default)]
struct Decided {
    /// Node of each placement not yet visible in the `computers` cache.
    /// Reconciles of different computers run concurrently and the cache lags
    /// our own status writes, so without these two computers applied
    /// together would both see an empty cluster and pick the same node (the
    /// scheduler's "assume" step, in small).
    assumed: HashMap<String, String>,
    /// Quota reserved on a node by each placement that its published
    /// capacity does not reflect yet: the node agent recomputes its room only
    /// after it has seen the new volume, so until its CSIStorageCapacity
    /// changes, the room it shows still counts the placed computer as free.
    reserved: HashMap<String, Reservation>,
}

/// Bytes reserved on a node by one placement.
#[derive(Clone, Debug)]
struct Reservation {
    node: String,
    bytes: u64,
    /// resourceVersion of the node's CSIStorageCapacity when placed; the
    /// reservation ends once the object has another.
    version: String,
}

impl Context {
    /// Builds a context; the recorder reports as `agentcomputer-operator`
    /// with `instance` (the pod name) when given.
    pub fn new(
        client: Client,
        config: Config,
        caches: PlacementCaches,
        computers: Store<AgentComputer>,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::MANAGED_BY.into(),
                instance,
            },
        );
        Self {
            client,
            config,
            nodes: caches.nodes,
            agents: caches.agents,
            capacities: caches.capacities,
            computers,
            metrics,
            recorder,
            decided: Mutex::new(Decided::default()),
            agent_service_ip: tokio::sync::OnceCell::new(),
        }
    }

    /// The cluster IP of [`Config::agent_service`], read from the API
    /// server once; `Ok(None)` when no Service is configured. Errors: the
    /// Service cannot be read, or it is headless (no cluster IP to dial).
    pub async fn agent_service_ip(&self) -> crate::error::Result<Option<String>> {
        let Some(name) = &self.config.agent_service else {
            return Ok(None);
        };
        let ip = self
            .agent_service_ip
            .get_or_try_init(|| async {
                let services: kube::Api<k8s_openapi::api::core::v1::Service> =
                    kube::Api::namespaced(self.client.clone(), &self.config.agent_namespace);
                let svc = services.get(name).await?;
                svc.spec
                    .and_then(|s| s.cluster_ip)
                    .filter(|ip| !ip.is_empty() && ip != "None")
                    .ok_or_else(|| {
                        crate::error::Error::Config(format!(
                            "Service {}/{name} has no cluster IP: the node agents' Service must not be headless",
                            self.config.agent_namespace
                        ))
                    })
            })
            .await?;
        Ok(Some(ip.clone()))
    }

    /// Ready node agents by node name.
    pub fn ready_agents(&self) -> HashMap<String, Agent> {
        let pods = self.agents.state();
        placement::ready_agents(pods.iter().map(|p| p.as_ref()))
    }

    /// Computers per node: `status.node` of live computers in the cache, and
    /// for those without one yet, the node assumed for them by [`Self::place`].
    pub fn load(&self) -> HashMap<String, usize> {
        let mut d = self.decided.lock();
        self.load_locked(&mut d.assumed)
    }

    /// Free bytes by node: each node agent's published room less the quotas
    /// of placements it does not reflect yet. Nodes without a published
    /// capacity are absent.
    pub fn room(&self) -> HashMap<String, u64> {
        let mut d = self.decided.lock();
        let published = self.published();
        self.room_locked(&mut d.reserved, &published)
    }

    fn published(&self) -> HashMap<String, placement::Published> {
        let caps = self.capacities.state();
        placement::published_capacity(caps.iter().map(|c| c.as_ref()), &self.config.storage_class)
    }

    /// Chooses a node for computer `uid` of `bytes` with `choose` (given the
    /// current load and free room by node) and records the choice, so that
    /// concurrent placements count it before our status write reaches the
    /// cache and before the node agent's capacity reflects it. Returns
    /// `choose`'s result.
    pub fn place(
        &self,
        uid: &str,
        bytes: u64,
        choose: impl FnOnce(&HashMap<String, usize>, &HashMap<String, u64>) -> Option<String>,
    ) -> Option<String> {
        let mut d = self.decided.lock();
        d.assumed.remove(uid);
        d.reserved.remove(uid);
        let load = self.load_locked(&mut d.assumed);
        let published = self.published();
        let room = self.room_locked(&mut d.reserved, &published);
        let node = choose(&load, &room)?;
        d.assumed.insert(uid.to_string(), node.clone());
        if let Some(p) = published.get(&node) {
            d.reserved.insert(
                uid.to_string(),
                Reservation {
                    node: node.clone(),
                    bytes,
                    version: p.version.clone(),
                },
            );
        }
        Some(node)
    }

    /// Drops what was recorded for the placement of a deleted computer.
    pub fn forget(&self, uid: &str) {
        let mut d = self.decided.lock();
        d.assumed.remove(uid);
        d.reserved.remove(uid);
    }

    /// Room by node, after dropping reservations the published capacity now
    /// reflects (its object changed) or whose computer is gone or deleting.
    fn room_locked(
        &self,
        reserved: &mut HashMap<String, Reservation>,
        published: &HashMap<String, placement::Published>,
    ) -> HashMap<String, u64> {
        let live: HashMap<String, ()> = self
            .computers
            .state()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.metadata.uid.clone().map(|u| (u, ())))
            .collect();
        reserved.retain(|uid, r| {
            live.contains_key(uid)
                && published
                    .get(&r.node)
                    .is_some_and(|p| p.version == r.version)
        });
        let mut room: HashMap<String, u64> = published
            .iter()
            .map(|(n, p)| (n.clone(), p.bytes))
            .collect();
        for r in reserved.values() {
            if let Some(free) = room.get_mut(&r.node) {
                *free = free.saturating_sub(r.bytes);
            }
        }
        room
    }

    /// Counts computers per node and prunes assumptions the cache has caught
    /// up with (status.node now set) or that name computers no longer cached.
    fn load_locked(&self, assumed: &mut HashMap<String, String>) -> HashMap<String, usize> {
        let mut load = HashMap::new();
        let mut pending = HashMap::new();
        for c in self.computers.state() {
            let uid = c.metadata.uid.clone().unwrap_or_default();
            if c.metadata.deletion_timestamp.is_some() {
                assumed.remove(&uid);
                continue;
            }
            match c.status.as_ref().and_then(|s| s.node.clone()) {
                Some(node) => {
                    assumed.remove(&uid);
                    *load.entry(node).or_default() += 1;
                }
                None => {
                    pending.insert(uid, ());
                }
            }
        }
        assumed.retain(|uid, _| pending.contains_key(uid));
        for node in assumed.values() {
            *load.entry(node.clone()).or_default() += 1;
        }
        load
    }
}
