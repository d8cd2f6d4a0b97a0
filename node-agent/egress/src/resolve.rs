//! Resolve a destination once and keep only the addresses the policy allows.
//!
//! The caller connects to exactly the addresses returned here: there is no
//! second lookup between the check and the connection, so a name that
//! answers differently the second time (DNS rebinding) gains nothing.

use std::net::{IpAddr, SocketAddr};

use crate::policy::{Denial, Policy};

/// Why no address may be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The policy refused the destination (every address it resolved to).
    #[error("egress denied by policy: {0}")]
    Denied(Denial),
    /// The name did not resolve (curl exit code 6).
    #[error("Could not resolve host: {0}")]
    Lookup(String),
}

/// The host part of a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A DNS name, looked up with the system resolver (getaddrinfo).
    Name(&'a str),
    /// An IP literal, used as it is.
    Ip(IpAddr),
}

/// Resolves `target:port` once and returns the allowed addresses in the
/// resolver's order (duplicates removed). Errors: [`ResolveError::Denied`]
/// with the first refusal when no address is allowed (a name the policy
/// can never allow is refused before any lookup), [`ResolveError::Lookup`]
/// when the name has no address.
pub async fn resolve(
    policy: &Policy,
    target: Target<'_>,
    port: u16,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let name = match target {
        Target::Ip(ip) => {
            policy.check(None, ip, port).map_err(ResolveError::Denied)?;
            return Ok(vec![SocketAddr::new(ip.to_canonical(), port)]);
        }
        Target::Name(name) => name,
    };
    policy
        .precheck_name(name, port)
        .map_err(ResolveError::Denied)?;
    let found = tokio::net::lookup_host((name, port))
        .await
        .map_err(|_| ResolveError::Lookup(name.to_string()))?;
    let mut allowed: Vec<SocketAddr> = Vec::new();
    let mut first_denial = None;
    for addr in found {
        let addr = SocketAddr::new(addr.ip().to_canonical(), port);
        match policy.check(Some(name), addr.ip(), port) {
            Ok(()) if !allowed.contains(&addr) => allowed.push(addr),
            Ok(()) => {}
            Err(denial) => {
                first_denial.get_or_insert(denial);
            }
        }
    }
    match (allowed.is_empty(), first_denial) {
        (false, _) => Ok(allowed),
        (true, Some(denial)) => Err(ResolveError::Denied(denial)),
        (true, None) => Err(ResolveError::Lookup(name.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CidrConfig, EgressConfig, Mode};

    fn loopback_only() -> Policy {
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag("127.0.0.1").unwrap()],
            ..EgressConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn names_resolve_to_allowed_addresses_only() {
        // localhost may also answer ::1, which this policy refuses.
        let addrs = resolve(&loopback_only(), Target::Name("localhost"), 8080)
            .await
            .unwrap();
        assert_eq!(addrs, vec!["127.0.0.1:8080".parse().unwrap()]);
    }

    #[tokio::test]
    async fn literals_are_checked_without_lookup() {
        let p = loopback_only();
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let err = resolve(&p, Target::Ip(ip), 80).await.unwrap_err();
        assert!(matches!(err, ResolveError::Denied(_)), "{err}");
        let ok: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            resolve(&p, Target::Ip(ok), 80).await.unwrap(),
            vec!["127.0.0.1:80".parse().unwrap()]
        );
    }

    #[tokio::test]
    async fn deny_all_refuses_before_looking_up() {
        // ".invalid" never resolves (RFC 6761): a lookup would say Lookup.
        let err = resolve(&Policy::default(), Target::Name("x.invalid"), 80)
            .await
            .unwrap_err();
        assert!(matches!(err, ResolveError::Denied(_)), "{err}");
    }

    #[tokio::test]
    async fn a_listed_name_resolving_to_loopback_is_refused() {
        let p = Policy::new(EgressConfig {
            mode: Mode::AllowList,
            hosts: vec!["localhost".into()],
            ..EgressConfig::default()
        })
        .unwrap();
        let err = resolve(&p, Target::Name("localhost"), 80)
            .await
            .unwrap_err();
        assert!(matches!(err, ResolveError::Denied(_)), "{err}");
    }
}
