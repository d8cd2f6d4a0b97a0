//! Which computer a credential opens, and where that computer is served.
//!
//! A caller proves itself with its computer's own token (`authorization:
//! Bearer TOKEN`). The operator publishes each token's fingerprint in
//! `status.credentialHash` ("sha256:" and the lowercase hex SHA-256 of the
//! token, FIPS 180-4) and the serving node agent's address in
//! `status.endpoint`; the gateway reads both from its watch cache of
//! AgentComputers and never reads a Secret. Every published fingerprint is
//! compared in constant time, as the node agents do, so the time of a
//! refusal says nothing about which fingerprints exist.
//!
//! The agent behind checks the token again and that the call names the
//! token's own computer: the gateway decides only where a call goes.

use std::sync::Arc;

use agentcomputer_crds::AgentComputer;
use agentcomputer_runtime_contract::Runtime;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::deleted::Deleted;

/// Where a call with a given credential goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The computer's namespace.
    pub namespace: String,
    /// The computer's name.
    pub name: String,
    /// `host:port` of the node agent serving it (`status.endpoint`).
    pub endpoint: String,
    /// Runtimes the computer's spec enables, in the order MCP offers them.
    pub runtimes: Vec<Runtime>,
}

impl Route {
    /// `NAMESPACE/NAME`, as calls and logs name the computer.
    pub fn computer(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why no route was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoRoute {
    /// No token in the call.
    #[error("missing credential: send the computer's token as 'authorization: Bearer <token>'")]
    Missing,
    /// The token is no computer's current token.
    #[error("invalid credential: the token is not a computer's current token")]
    Unknown,
    /// The computer exists and is not served by a node agent now (not yet
    /// placed, or between two nodes).
    #[error("computer {computer} is not served by any node agent right now; retry shortly")]
    NotServed {
        /// `NAMESPACE/NAME`.
        computer: String,
    },
    /// The token was the last credential of a computer since deleted
    /// ([`crate::deleted`]).
    #[error("computer {computer} was deleted")]
    Deleted {
        /// `NAMESPACE/NAME`.
        computer: String,
    },
}

/// The credential fingerprint as the operator publishes it.
pub fn fingerprint(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// The route for `token` among `computers`: the computer whose published
/// fingerprint is the token's, if it has an endpoint. Errors: [`NoRoute`].
pub fn route_in<'a>(
    computers: impl IntoIterator<Item = &'a AgentComputer>,
    token: Option<&str>,
) -> Result<Route, NoRoute> {
    let token = token.ok_or(NoRoute::Missing)?;
    let wanted = fingerprint(token);
    let mut found: Option<&AgentComputer> = None;
    // Every fingerprint is compared, without stopping at a match.
    for c in computers {
        let published = c
            .status
            .as_ref()
            .and_then(|s| s.credential_hash.as_deref())
            .unwrap_or("");
        // Constant time (`subtle`), as the node agents compare.
        let same = bool::from(published.as_bytes().ct_eq(wanted.as_bytes()));
        if same && found.is_none() {
            found = Some(c);
        }
    }
    let c = found.ok_or(NoRoute::Unknown)?;
    let namespace = c.namespace().unwrap_or_default();
    let name = c.name_any();
    let endpoint = c
        .status
        .as_ref()
        .and_then(|s| s.endpoint.clone())
        .filter(|e| !e.is_empty());
    match endpoint {
        Some(endpoint) => Ok(Route {
            runtimes: [
                (c.spec.runtimes.shell, Runtime::Shell),
                (c.spec.runtimes.javascript, Runtime::JavaScript),
                (c.spec.runtimes.container, Runtime::Container),
            ]
            .into_iter()
            .filter_map(|(on, r)| on.then_some(r))
            .collect(),
            namespace,
            name,
            endpoint,
        }),
        None => Err(NoRoute::NotServed {
            computer: format!("{namespace}/{name}"),
        }),
    }
}

/// Longest wait of [`Routes::route_settled`] for an unknown token.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
/// How often it looks again meanwhile.
const SETTLE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Routes over the gateway's watch cache of AgentComputers (every
/// namespace) and its record of deleted computers.
#[derive(Clone)]
pub struct Routes {
    store: Store<AgentComputer>,
    deleted: Arc<Deleted>,
}

impl Routes {
    /// Routes over `store`; `deleted` is fed by the same watch.
    pub fn new(store: Store<AgentComputer>, deleted: Arc<Deleted>) -> Routes {
        Routes { store, deleted }
    }

    /// [`Routes::route`], but a token no computer has yet gets up to
    /// [`SETTLE`] for the watch to bring it: the operator publishes a new
    /// computer's (or a rotated) credential in the same status update that
    /// tells its client to go, and the client may come before the event.
    pub async fn route_settled(&self, token: Option<&str>) -> Result<Route, NoRoute> {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            match self.route(token) {
                Err(NoRoute::Unknown) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(SETTLE_POLL).await;
                }
                other => return other,
            }
        }
    }

    /// The route of `token` now ([`route_in`]); a deleted computer's last
    /// token gets [`NoRoute::Deleted`] rather than [`NoRoute::Unknown`].
    pub fn route(&self, token: Option<&str>) -> Result<Route, NoRoute> {
        let all = self.store.state();
        match route_in(all.iter().map(|c| c.as_ref()), token) {
            Err(NoRoute::Unknown) => {
                let fp = fingerprint(token.unwrap_or(""));
                Err(match self.deleted.computer(&fp) {
                    Some(computer) => NoRoute::Deleted { computer },
                    None => NoRoute::Unknown,
                })
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::AgentComputerStatus;

    fn computer(ns: &str, name: &str, token: &str, endpoint: Option<&str>) -> AgentComputer {
        let mut c: AgentComputer = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"storage": {"size": "1Gi"}},
        }))
        .unwrap();
        c.status = Some(AgentComputerStatus {
            credential_hash: Some(fingerprint(token)),
            endpoint: endpoint.map(str::to_string),
            ..Default::default()
        });
        c
    }

    #[test]
    fn a_token_opens_its_own_computer_only() {
        let all = [
            computer("a", "one", "t1", Some("10.0.0.1:7433")),
            computer("b", "two", "t2", Some("10.0.0.2:7433")),
            computer("b", "three", "t3", None),
        ];
        let r = route_in(&all, Some("t2")).unwrap();
        assert_eq!(r.computer(), "b/two");
        assert_eq!(r.endpoint, "10.0.0.2:7433");
        assert_eq!(route_in(&all, Some("t9")), Err(NoRoute::Unknown));
        assert_eq!(route_in(&all, None), Err(NoRoute::Missing));
        assert_eq!(
            route_in(&all, Some("t3")),
            Err(NoRoute::NotServed {
                computer: "b/three".into()
            })
        );
    }

    #[test]
    fn the_fingerprint_is_the_operators_form() {
        // SHA-256("abc"), FIPS 180-4 appendix B.1.
        assert_eq!(
            fingerprint("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
