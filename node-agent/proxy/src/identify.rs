//! Which computer a proxied connection belongs to.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use subtle::ConstantTimeEq;

use agentcomputer_egress::Policy;
use base64::Engine;

/// A known caller: the computer and the policy its connections obey.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The computer as logs show it (its name; `NAMESPACE/NAME` in a
    /// cluster).
    pub computer: String,
    /// Its registry key (its name locally, its uid in a cluster): what
    /// [`crate::Denials`] are recorded under.
    pub key: String,
    /// Its egress policy.
    pub policy: Arc<Policy>,
}

/// Maps a connection to its computer without trusting the client: only
/// what the agent itself set up (listener, source address, issued
/// credential) may decide.
pub trait Identify: Send + Sync + 'static {
    /// The caller of a connection from `peer` whose request carried
    /// `proxy_authorization` (the header's value, if any); `None` refuses
    /// the connection with `407`.
    fn identify(&self, peer: SocketAddr, proxy_authorization: Option<&[u8]>) -> Option<Caller>;
}

/// Every connection is one computer's: for a listener only that computer
/// can reach (the local sandbox's network namespace).
pub struct Fixed(pub Caller);

impl Identify for Fixed {
    fn identify(&self, _: SocketAddr, _: Option<&[u8]>) -> Option<Caller> {
        Some(self.0.clone())
    }
}

/// Connections are mapped by their source address, e.g. a sandbox pod's
/// IP to its computer (the cluster's hook: the agent keeps the map from
/// the pods of its node).
pub struct BySource<F>(pub F);

impl<F> Identify for BySource<F>
where
    F: Fn(IpAddr) -> Option<Caller> + Send + Sync + 'static,
{
    fn identify(&self, peer: SocketAddr, _: Option<&[u8]>) -> Option<Caller> {
        (self.0)(peer.ip().to_canonical())
    }
}

/// Credentials the agent issued: `Proxy-Authorization: Basic
/// base64(USER:TOKEN)` (the user part is ignored; the token alone
/// identifies). A token is valid while its [`CredentialGuard`] lives.
#[derive(Clone, Default)]
pub struct Credentials {
    tokens: Arc<Mutex<HashMap<String, Caller>>>,
}

/// Keeps one credential valid; dropping it revokes the credential.
pub struct CredentialGuard {
    tokens: Arc<Mutex<HashMap<String, Caller>>>,
    token: String,
}

impl Drop for CredentialGuard {
    fn drop(&mut self) {
        self.tokens.lock().remove(&self.token);
    }
}

impl Credentials {
    /// An empty set.
    pub fn new() -> Credentials {
        Credentials::default()
    }

    /// Makes `token` (at least 32 characters, from a CSPRNG) identify
    /// `caller` until the guard is dropped. Panics on a shorter token: a
    /// guessable credential is a programming error.
    pub fn issue(&self, token: String, caller: Caller) -> CredentialGuard {
        assert!(
            token.len() >= 32,
            "proxy credentials must be at least 32 characters"
        );
        self.tokens.lock().insert(token.clone(), caller);
        CredentialGuard {
            tokens: Arc::clone(&self.tokens),
            token,
        }
    }
}

impl Identify for Credentials {
    fn identify(&self, _: SocketAddr, proxy_authorization: Option<&[u8]>) -> Option<Caller> {
        let token = basic_password(proxy_authorization?)?;
        let tokens = self.tokens.lock();
        // Constant-time over the candidates: compare against every token.
        let mut found = None;
        for (known, caller) in tokens.iter() {
            if bool::from(known.as_bytes().ct_eq(token.as_bytes())) {
                found = Some(caller.clone());
            }
        }
        found
    }
}

/// The password of a `Proxy-Authorization: Basic` header value (RFC 7617:
/// base64 of `user:password`; the scheme name is case-insensitive), or
/// `None` for any other scheme or a malformed value.
pub fn basic_password(header: &[u8]) -> Option<String> {
    let value = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> Caller {
        Caller {
            computer: name.into(),
            key: name.into(),
            policy: Arc::new(Policy::default()),
        }
    }

    #[test]
    fn credentials_identify_while_issued() {
        let creds = Credentials::new();
        let token = "a".repeat(40);
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("x:{token}"))
        );
        let guard = creds.issue(token.clone(), caller("demo"));
        let who = creds.identify(peer, Some(header.as_bytes())).unwrap();
        assert_eq!(who.computer, "demo");
        assert!(creds.identify(peer, None).is_none());
        let wrong = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("x:{}", "b".repeat(40)))
        );
        assert!(creds.identify(peer, Some(wrong.as_bytes())).is_none());
        assert!(creds.identify(peer, Some(b"Bearer abc")).is_none());
        drop(guard);
        assert!(creds.identify(peer, Some(header.as_bytes())).is_none());
    }

    #[test]
    fn sources_map_through_the_hook() {
        let hook = BySource(|ip: IpAddr| {
            (ip == "10.1.2.3".parse::<IpAddr>().unwrap()).then(|| caller("pod"))
        });
        assert!(
            hook.identify("10.1.2.3:5000".parse().unwrap(), None)
                .is_some()
        );
        assert!(
            hook.identify("[::ffff:10.1.2.3]:5000".parse().unwrap(), None)
                .is_some()
        );
        assert!(
            hook.identify("10.1.2.4:5000".parse().unwrap(), None)
                .is_none()
        );
    }
}
