//! Who a connection to cluster mode's egress proxy belongs to.
//!
//! A computer whose `spec.egress.mode` is `allow-list` reaches the outside
//! from its sandbox pod only through the node agent's proxy (`--proxy-listen`):
//! its NetworkPolicy admits the agent's proxy port and DNS, nothing else, and
//! the operator sets `HTTP_PROXY`/`HTTPS_PROXY` to
//! `http://computer:TOKEN@AGENT_IP:PORT` with the computer's own token. The
//! proxy (crate `agentcomputer-proxy`) takes a connection as the computer's
//! whose token it presents as `Proxy-Authorization: Basic
//! base64(USER:TOKEN)` (RFC 7617; the user part is ignored): the token's
//! SHA-256 is compared in constant time with every `status.credentialHash`
//! on this node, as the API's [`super::credentials::ClusterAuthorizer`]
//! does. No other source is trusted (a pod IP could be reused), and a
//! connection without a known token gets `407`, so the proxy is open to
//! nobody else on the pod network. The decision is then the computer's
//! egress policy from its current spec, the one the in-process runtimes use.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use agentcomputer_egress::{EgressConfig, Policy};
use agentcomputer_proxy::{Caller, Identify};
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::warn;

use super::index::Index;

/// The proxy's callers: the node's computers, by token, with the egress
/// policy of each one's current spec.
pub struct ProxyCallers {
    index: Arc<Index>,
    policies: RwLock<HashMap<String, Arc<Policy>>>,
}

impl ProxyCallers {
    /// Callers over the computers of `index`; none has a policy yet (and
    /// is refused) until [`ProxyCallers::set_policy`].
    pub fn new(index: Arc<Index>) -> ProxyCallers {
        ProxyCallers {
            index,
            policies: RwLock::new(HashMap::new()),
        }
    }

    /// Sets the egress policy of computer `uid` from its spec. An egress
    /// configuration the engine refuses denies everything.
    pub fn set_policy(&self, uid: &str, egress: &EgressConfig) {
        let policy = Policy::new(egress.clone()).unwrap_or_else(|e| {
            warn!(%uid, error = %e, "invalid egress policy; the proxy denies this computer everything");
            Policy::default()
        });
        self.policies
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string(), Arc::new(policy));
    }

    /// Forgets computer `uid`.
    pub fn remove(&self, uid: &str) {
        self.policies
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }
}

/// The token of `Proxy-Authorization: Basic base64(USER:TOKEN)`.
fn basic_token(header: &[u8]) -> Option<String> {
    let value = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, token) = text.split_once(':')?;
    Some(token.to_string())
}

impl Identify for ProxyCallers {
    fn identify(&self, _peer: SocketAddr, proxy_authorization: Option<&[u8]>) -> Option<Caller> {
        let token = basic_token(proxy_authorization?)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every fingerprint is compared, without stopping at a match.
        let found = self.index.with_entries(|all| {
            all.fold(None, |found, e| {
                let matches = e.credential.is_some_and(|c| bool::from(c.ct_eq(&digest)));
                if matches { Some(e.clone()) } else { found }
            })
        })?;
        let policy = self
            .policies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&found.uid)
            .cloned()?;
        Some(Caller {
            computer: found.shown(),
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::index::Entry;
    use agentcomputer_egress::Mode;

    fn header(token: &str) -> Vec<u8> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("computer:{token}"));
        format!("Basic {encoded}").into_bytes()
    }

    #[test]
    fn a_computer_is_known_by_its_token_only() {
        let index = Arc::new(Index::default());
        for (uid, name, token) in [("u1", "a", "t1"), ("u2", "b", "t2")] {
            index.upsert(Entry {
                uid: uid.into(),
                namespace: "ns".into(),
                name: name.into(),
                credential: Some(Sha256::digest(token.as_bytes()).into()),
            });
        }
        let callers = ProxyCallers::new(index);
        let peer: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        // Known token, but no policy applied yet: refused.
        assert!(callers.identify(peer, Some(&header("t1"))).is_none());
        let allow = EgressConfig {
            mode: Mode::AllowList,
            hosts: vec!["example.test".into()],
            ..EgressConfig::default()
        };
        callers.set_policy("u1", &allow);
        callers.set_policy("u2", &EgressConfig::default());
        let a = callers.identify(peer, Some(&header("t1"))).unwrap();
        assert_eq!(a.computer, "ns/a");
        assert_eq!(a.policy.config().mode, Mode::AllowList);
        let b = callers.identify(peer, Some(&header("t2"))).unwrap();
        assert_eq!(b.computer, "ns/b");
        for bad in [
            None,
            Some(header("wrong")),
            Some(b"Bearer t1".to_vec()),
            Some(b"Basic !!!".to_vec()),
        ] {
            assert!(callers.identify(peer, bad.as_deref()).is_none());
        }
        callers.remove("u1");
        assert!(callers.identify(peer, Some(&header("t1"))).is_none());
    }
}
