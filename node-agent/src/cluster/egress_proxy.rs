//! Who a connection to cluster mode's egress proxy belongs to.
//!
//! A computer whose `spec.egress.mode` is `allow-list` reaches the outside
//! from its sandbox pod only through the node agent's proxy (`--proxy-listen`):
//! its NetworkPolicy admits the agent's proxy port and DNS, nothing else, and
//! the operator sets `HTTP_PROXY`/`HTTPS_PROXY` to
//! `http://computer:FINGERPRINT@AGENT_IP:PORT`, FINGERPRINT being the
//! lowercase hex of the computer's `status.credentialHash` (the SHA-256 of
//! its token). The proxy (crate `agentcomputer-proxy`) takes a connection as
//! the computer whose fingerprint it presents as `Proxy-Authorization:
//! Basic base64(USER:FINGERPRINT)` (RFC 7617; the user part is ignored),
//! compared in constant time with every fingerprint on this node.
//!
//! Why the fingerprint and not the token: the sandbox's processes see
//! their proxy URL, and the token opens the computer's whole API. The
//! fingerprint opens only this proxy, under the computer's own egress
//! policy: the API hashes what it is given, so a fingerprint presented
//! there matches nothing. Whoever may read the AgentComputer's status can
//! read the fingerprint too, and can then use the proxy as that computer
//! from where NetworkPolicy admits them to the proxy port (sandbox pods),
//! with that computer's allow-list and no more. No other source is trusted
//! (a pod IP can be reused), and a connection without a known fingerprint
//! gets `407`, so the proxy is open to nobody else on the pod network.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use agentcomputer_egress::{EgressConfig, Policy};
use agentcomputer_proxy::{Caller, Identify};
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
            .insert(uid.to_string(), Arc::new(policy));
    }

    /// Keeps the policies of the computers `keep` accepts.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.policies.write().retain(|uid, _| keep(uid));
    }

    /// Forgets computer `uid`.
    pub fn remove(&self, uid: &str) {
        self.policies.write().remove(uid);
    }
}

impl Identify for ProxyCallers {
    fn identify(&self, _peer: SocketAddr, proxy_authorization: Option<&[u8]>) -> Option<Caller> {
        let password = agentcomputer_proxy::basic_password(proxy_authorization?)?;
        let mut digest = [0u8; 32];
        hex::decode_to_slice(password.trim(), &mut digest).ok()?;
        // Every fingerprint is compared, without stopping at a match.
        let found = self.index.with_entries(|all| {
            all.fold(None, |found, e| {
                let matches = e.credential.is_some_and(|c| bool::from(c.ct_eq(&digest)));
                if matches { Some(e.clone()) } else { found }
            })
        })?;
        let policy = self.policies.read().get(&found.uid).cloned()?;
        Some(Caller {
            computer: found.shown(),
            key: found.uid.clone(),
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::index::Entry;
    use agentcomputer_egress::Mode;
    use base64::Engine;
    use sha2::{Digest, Sha256};

    /// The proxy credential of the computer whose token is `token`.
    fn header(token: &str) -> Vec<u8> {
        let fingerprint = hex::encode(Sha256::digest(token.as_bytes()));
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("computer:{fingerprint}"));
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
                sandbox: Default::default(),
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
        // The token itself is not the proxy credential.
        let token_itself = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("computer:t1")
        );
        for bad in [
            None,
            Some(header("wrong")),
            Some(token_itself.into_bytes()),
            Some(b"Bearer t1".to_vec()),
            Some(b"Basic !!!".to_vec()),
        ] {
            assert!(callers.identify(peer, bad.as_deref()).is_none());
        }
        callers.remove("u1");
        assert!(callers.identify(peer, Some(&header("t1"))).is_none());
    }
}
