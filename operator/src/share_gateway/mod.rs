//! The share-link gateway: one stable HTTP address for the share links of
//! every node agent in a cluster (docs/share.md, "In a cluster").
//!
//! A link names its computer by the AgentComputer's `metadata.uid`:
//! `BASE/share/v1/UID/PATH?expires=..&sig=..`. The gateway keeps two watch
//! caches, every AgentComputer (all namespaces) and the node-agent pods
//! (`--agent-namespace`, `--agent-selector`), and for each request
//! 1. finds the computer with that uid and its node (the
//!    `agentcomputer.dev/node` label the operator puts on placed computers,
//!    else `status.node`),
//! 2. finds the Ready node-agent pod bound to that node
//!    ([`crate::placement::ready_agents`]),
//! 3. proxies the request to `http://POD_IP:SHARE_PORT` with the same path
//!    and query ([`proxy`]).
//!
//! It checks nothing of the link itself: the node agent verifies signature
//! and expiry, so a gateway can serve no file it was not given a link to.
//! An unknown uid gets the agent's own `403 invalid or revoked link`, so
//! links reveal nothing about which computers exist.

pub mod proxy;

use std::collections::HashMap;
use std::net::IpAddr;

use agentcomputer_crds::{AgentComputer, labels};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;

use crate::placement;

/// First segments of a link's path below the base URL (the node agent's
/// `share::ROUTE`).
pub const ROUTE: &str = "share/v1/";

/// Where a request for a computer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The Ready node agent of the computer's node, at this pod IP.
    Agent(IpAddr),
    /// No AgentComputer has this uid (or it is not placed yet): answered
    /// like a link with a bad signature.
    UnknownComputer,
    /// The computer is on `node` but no Ready node-agent pod with an IP
    /// runs there now (restarting, upgrading, the node down).
    NoAgent {
        /// The computer's node.
        node: String,
    },
}

/// The uid in `path` when it is a link path below `base_path`:
/// `Some(Some(uid))` for `BASE/share/v1/UID/REST` with a non-empty UID and
/// REST, `Some(None)` for a path below `BASE/share/v1/` not of that form
/// (a malformed link), `None` for any other path.
///
/// `base_path` is the path of the agents' `--share-url` (`/` or
/// `/prefix/`; a missing trailing slash is added).
pub fn link_uid<'a>(base_path: &str, path: &'a str) -> Option<Option<&'a str>> {
    let base = base_path.trim_end_matches('/');
    let rest = path.strip_prefix(base)?.strip_prefix('/')?;
    let rest = rest.strip_prefix(ROUTE)?;
    Some(match rest.split_once('/') {
        Some((uid, file)) if !uid.is_empty() && !file.is_empty() => Some(uid),
        _ => None,
    })
}

/// The node `computer` is placed on: its `agentcomputer.dev/node` label,
/// else `status.node`; `None` while unplaced.
pub fn computer_node(computer: &AgentComputer) -> Option<String> {
    computer
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODE))
        .filter(|n| !n.is_empty())
        .cloned()
        .or_else(|| {
            computer
                .status
                .as_ref()
                .and_then(|s| s.node.clone())
                .filter(|n| !n.is_empty())
        })
}

/// Routes the computer with `uid` given the cached computers and agent
/// pods (see [`Route`]). A computer being deleted is still routed: its
/// agent answers for its links until its data is gone.
pub fn route<'a>(
    uid: &str,
    computers: impl IntoIterator<Item = &'a AgentComputer>,
    agents: impl IntoIterator<Item = &'a Pod>,
) -> Route {
    let Some(node) = computers
        .into_iter()
        .find(|c| c.metadata.uid.as_deref() == Some(uid))
        .and_then(computer_node)
    else {
        return Route::UnknownComputer;
    };
    let ready: HashMap<String, placement::Agent> = placement::ready_agents(agents);
    match ready
        .get(&node)
        .and_then(|a| a.ip.as_deref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    {
        Some(ip) => Route::Agent(ip),
        None => Route::NoAgent { node },
    }
}

/// The watch caches the gateway routes by.
#[derive(Clone)]
pub struct Caches {
    /// Every AgentComputer, all namespaces.
    pub computers: Store<AgentComputer>,
    /// The node-agent pods.
    pub agents: Store<Pod>,
}

impl Caches {
    /// [`route`] over the caches' current content. Scans the computers
    /// (a few microseconds per thousand).
    pub fn route(&self, uid: &str) -> Route {
        let computer = self
            .computers
            .find(|c| c.metadata.uid.as_deref() == Some(uid));
        let agents = self.agents.state();
        route(uid, computer.as_deref(), agents.iter().map(|p| p.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn computer(uid: &str, label: Option<&str>, status_node: Option<&str>) -> AgentComputer {
        let mut v = serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid},
            "spec": {"storage": {"size": "1Gi"}},
        });
        if let Some(n) = label {
            v["metadata"]["labels"] = serde_json::json!({"agentcomputer.dev/node": n});
        }
        if let Some(n) = status_node {
            v["status"] = serde_json::json!({"node": n});
        }
        serde_json::from_value(v).unwrap()
    }

    fn agent(node: &str, ip: Option<&str>, ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("agent-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn link_paths() {
        assert_eq!(link_uid("/", "/share/v1/u-1/a/b.txt"), Some(Some("u-1")));
        assert_eq!(link_uid("", "/share/v1/u-1/a"), Some(Some("u-1")));
        assert_eq!(link_uid("/files/", "/files/share/v1/u/x"), Some(Some("u")));
        assert_eq!(link_uid("/files", "/files/share/v1/u/x"), Some(Some("u")));
        // Malformed links below the route.
        assert_eq!(link_uid("/", "/share/v1/"), Some(None));
        assert_eq!(link_uid("/", "/share/v1/u"), Some(None));
        assert_eq!(link_uid("/", "/share/v1/u/"), Some(None));
        assert_eq!(link_uid("/", "/share/v1//x"), Some(None));
        // Not links.
        assert_eq!(link_uid("/", "/"), None);
        assert_eq!(link_uid("/", "/share/v2/u/x"), None);
        assert_eq!(link_uid("/", "/share/v1"), None);
        assert_eq!(link_uid("/files/", "/share/v1/u/x"), None);
        assert_eq!(link_uid("/files/", "/filesshare/v1/u/x"), None);
    }

    #[test]
    fn routes_by_label_then_status() {
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let agents = [agent("n1", Some("10.0.0.7"), true)];
        let by_label = computer("u1", Some("n1"), Some("n2"));
        assert_eq!(route("u1", [&by_label], &agents), Route::Agent(ip));
        let by_status = computer("u1", None, Some("n1"));
        assert_eq!(route("u1", [&by_status], &agents), Route::Agent(ip));
        let unplaced = computer("u1", None, None);
        assert_eq!(route("u1", [&unplaced], &agents), Route::UnknownComputer);
        assert_eq!(route("u2", [&by_label], &agents), Route::UnknownComputer);
    }

    #[test]
    fn needs_a_ready_agent_with_an_ip() {
        let c = computer("u1", Some("n1"), None);
        let no_agent = Route::NoAgent { node: "n1".into() };
        for agents in [
            vec![],
            vec![agent("n1", Some("10.0.0.7"), false)],
            vec![agent("n1", None, true)],
            vec![agent("n2", Some("10.0.0.8"), true)],
        ] {
            assert_eq!(route("u1", [&c], &agents), no_agent);
        }
        let v6 = [agent("n1", Some("fd00::7"), true)];
        assert_eq!(
            route("u1", [&c], &v6),
            Route::Agent("fd00::7".parse().unwrap())
        );
    }
}
