//! What every reconcile shares: the client, caches of nodes and node agents,
//! configuration, metrics and the event recorder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentcomputer_crds::AgentComputer;
use k8s_openapi::api::core::v1::{Node, Pod};
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
    /// Cache of AgentComputers (the controller's own), for spreading.
    pub computers: Store<AgentComputer>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Events on AgentComputers.
    pub recorder: Recorder,
    /// Placements decided but not yet visible in the `computers` cache, by
    /// computer uid. Reconciles of different computers run concurrently and
    /// the cache lags our own status writes, so without these two computers
    /// applied together would both see an empty cluster and pick the same
    /// node (the scheduler's "assume" step, in small).
    assumed: Mutex<HashMap<String, String>>,
}

impl Context {
    /// Builds a context; the recorder reports as `agentcomputer-operator`
    /// with `instance` (the pod name) when given.
    pub fn new(
        client: Client,
        config: Config,
        nodes: Store<Node>,
        agents: Store<Pod>,
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
            nodes,
            agents,
            computers,
            metrics,
            recorder,
            assumed: Mutex::new(HashMap::new()),
        }
    }

    /// Ready node agents by node name.
    pub fn ready_agents(&self) -> HashMap<String, Agent> {
        let pods = self.agents.state();
        placement::ready_agents(pods.iter().map(|p| p.as_ref()))
    }

    /// Computers per node: `status.node` of live computers in the cache, and
    /// for those without one yet, the node assumed for them by [`Self::place`].
    pub fn load(&self) -> HashMap<String, usize> {
        let mut assumed = self.assumed.lock().unwrap_or_else(|e| e.into_inner());
        self.load_locked(&mut assumed)
    }

    /// Chooses a node for computer `uid` with `choose` (given the current
    /// load) and records the choice, so that concurrent placements count it
    /// before our status write reaches the cache. Returns `choose`'s result.
    pub fn place(
        &self,
        uid: &str,
        choose: impl FnOnce(&HashMap<String, usize>) -> Option<String>,
    ) -> Option<String> {
        let mut assumed = self.assumed.lock().unwrap_or_else(|e| e.into_inner());
        assumed.remove(uid);
        let load = self.load_locked(&mut assumed);
        let node = choose(&load)?;
        assumed.insert(uid.to_string(), node.clone());
        Some(node)
    }

    /// Drops the assumed placement of a deleted computer.
    pub fn forget(&self, uid: &str) {
        self.assumed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
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
