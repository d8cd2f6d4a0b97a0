//! Cluster mode's credential rule: each computer accepts only its own
//! token, checked against the fingerprint the operator publishes in
//! `status.credentialHash` (the agent never reads Secrets).

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;

use super::index::{Entry, Index};
use crate::auth::Authorizer;

/// Message of `manage` calls in a cluster.
pub const MANAGE_REFUSED: &str = "in a cluster, computers are AgentComputer resources: use kubectl computer create / kubectl apply";

/// Message of `Mount` and `Unmount` calls in a cluster.
pub const MOUNT_REFUSED: &str =
    "in a cluster, sandbox pods mount a computer's volume through the CSI driver";

/// The [`Authorizer`] of cluster mode over the node's [`Index`].
///
/// For a call naming `requested` with bearer `token`:
/// 1. no token → `UNAUTHENTICATED`;
/// 2. the token's SHA-256 (FIPS 180-4) is compared in constant time
///    (`subtle`) with every published fingerprint on this node; no match →
///    `UNAUTHENTICATED` (a computer without a published fingerprint matches
///    nothing, so it refuses everything);
/// 3. `requested` (uid, `NAMESPACE/NAME`, or `NAME`) must name a computer
///    whose fingerprint the token matched; anything else → `NOT_FOUND`,
///    with the same message whether the computer is another tenant's or
///    does not exist, so a token learns no other computer's name or
///    namespace. A `NAME` two namespaces share means the token's own.
///
/// Only then does the call go on, with the computer's uid as registry key.
pub struct ClusterAuthorizer {
    index: Arc<Index>,
}

impl ClusterAuthorizer {
    /// The rule over `index`.
    pub fn new(index: Arc<Index>) -> ClusterAuthorizer {
        ClusterAuthorizer { index }
    }

    /// Whether `token` is the current token of some computer on this node
    /// (compared like [`Authorizer::computer`]: SHA-256, constant time,
    /// every fingerprint).
    pub fn knows(&self, token: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.index.with_entries(|all| {
            all.fold(false, |found, e| {
                let same = e.credential.is_some_and(|p| bool::from(p.ct_eq(&digest)));
                found | same
            })
        })
    }
}

impl Authorizer for ClusterAuthorizer {
    fn computer(&self, requested: &str, token: Option<&str>) -> Result<String, Status> {
        let Some(token) = token else {
            return Err(Status::unauthenticated(
                "missing credential: send the computer's token as 'authorization: Bearer <token>'",
            ));
        };
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let matches = |published: &Option<[u8; 32]>| -> bool {
            published.is_some_and(|p| bool::from(p.ct_eq(&digest)))
        };
        // Every fingerprint is compared, without stopping at a match; the
        // computers the token opens are the only ones it may learn of.
        let own: Vec<Entry> = self.index.with_entries(|all| {
            all.filter(|e| matches(&e.credential))
                .cloned()
                .collect::<Vec<_>>()
        });
        if own.is_empty() {
            // Moved to another node: the caller is told which.
            if let Some((uid, node)) = self.index.moved_to(&digest, requested) {
                return Err(crate::registry::RegistryError::Moved { name: uid, node }.into());
            }
            return Err(Status::unauthenticated(
                "invalid credential: the token is not the current token of any computer on this node",
            ));
        }
        // A computer the token does not open is answered like one that
        // does not exist, so that a tenant learns no other tenant's names
        // or namespaces.
        own.into_iter()
            .find(|e| e.uid == requested || e.shown() == requested || e.name == requested)
            .map(|e| e.uid)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "computer \"{requested}\" not found on this node for this credential"
                ))
            })
    }

    fn manage(&self, _token: Option<&str>) -> Result<(), Status> {
        Err(Status::failed_precondition(MANAGE_REFUSED))
    }

    /// Host mounts would put a computer's files on the node outside any
    /// pod, from the unprivileged agent: refused with [`MOUNT_REFUSED`].
    fn host_mounts(&self) -> Result<(), Status> {
        Err(Status::failed_precondition(MOUNT_REFUSED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::index::Entry;
    use tonic::Code;

    fn fingerprint(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    fn rule() -> ClusterAuthorizer {
        let index = Arc::new(Index::default());
        for (uid, ns, name, token) in [
            ("u1", "a", "demo", Some("t1")),
            ("u2", "b", "demo", Some("t2")),
            ("u3", "b", "solo", Some("t3")),
            ("u4", "b", "nohash", None),
        ] {
            index.upsert(Entry {
                uid: uid.into(),
                namespace: ns.into(),
                name: name.into(),
                credential: token.map(fingerprint),
                sandbox: Default::default(),
            });
        }
        ClusterAuthorizer::new(index)
    }

    fn code(r: Result<String, Status>) -> Code {
        r.unwrap_err().code()
    }

    #[test]
    fn codes() {
        let r = rule();
        assert!(r.knows("t1") && r.knows("t3") && !r.knows("wrong"));
        assert_eq!(r.computer("u1", Some("t1")).unwrap(), "u1");
        assert_eq!(r.computer("a/demo", Some("t1")).unwrap(), "u1");
        assert_eq!(r.computer("solo", Some("t3")).unwrap(), "u3");
        assert_eq!(code(r.computer("u1", None)), Code::Unauthenticated);
        assert_eq!(code(r.computer("u1", Some("wrong"))), Code::Unauthenticated);
        // Another tenant's computer, one without a credential and one that
        // does not exist get the same answer.
        let answers: Vec<Status> = ["u2", "b/demo", "solo", "nohash", "missing"]
            .iter()
            .map(|n| r.computer(n, Some("t1")).unwrap_err())
            .collect();
        for (a, name) in answers
            .iter()
            .zip(["u2", "b/demo", "solo", "nohash", "missing"])
        {
            assert_eq!(a.code(), Code::NotFound, "{a:?}");
            assert_eq!(
                a.message(),
                format!("computer \"{name}\" not found on this node for this credential")
            );
        }
        // An unknown computer with a bad token reveals nothing.
        assert_eq!(
            code(r.computer("missing", Some("x"))),
            Code::Unauthenticated
        );
        // A name two namespaces share means the token's own computer.
        assert_eq!(r.computer("demo", Some("t1")).unwrap(), "u1");
        assert_eq!(r.computer("demo", Some("t2")).unwrap(), "u2");
        let manage = r.manage(Some("t1")).unwrap_err();
        assert_eq!(manage.code(), Code::FailedPrecondition);
        assert_eq!(manage.message(), MANAGE_REFUSED);
        let mount = r.host_mounts().unwrap_err();
        assert_eq!(mount.code(), Code::FailedPrecondition);
        assert_eq!(mount.message(), MOUNT_REFUSED);
        assert!(crate::auth::AllowAll.host_mounts().is_ok());
    }
}
