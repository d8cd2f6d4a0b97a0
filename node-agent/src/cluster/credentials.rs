//! Cluster mode's credential rule: each computer accepts only its own
//! token, checked against the fingerprint the operator publishes in
//! `status.credentialHash` (the agent never reads Secrets).

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;

use super::index::{Index, Lookup};
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
/// 3. `requested` (uid, `NAMESPACE/NAME`, or a `NAME` unique on this node)
///    names no computer → `NOT_FOUND`; several → `FAILED_PRECONDITION`
///    asking for `NAMESPACE/NAME`;
/// 4. the token is not that computer's → `PERMISSION_DENIED`.
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
        // Every fingerprint is compared, without stopping at a match.
        let known = self
            .index
            .with_entries(|all| all.fold(false, |any, e| any | matches(&e.credential)));
        if !known {
            return Err(Status::unauthenticated(
                "invalid credential: the token is not the current token of any computer on this node",
            ));
        }
        let target = self.index.resolve(requested).map_err(|err| match err {
            Lookup::NotFound => {
                Status::not_found(format!("computer \"{requested}\" not found on this node"))
            }
            Lookup::Ambiguous(all) => Status::failed_precondition(format!(
                "computer name \"{requested}\" is ambiguous on this node ({}): use NAMESPACE/NAME",
                all.join(", ")
            )),
        })?;
        if !matches(&target.credential) {
            return Err(Status::permission_denied(format!(
                "the token is not the credential of computer {}",
                target.shown()
            )));
        }
        Ok(target.uid)
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
        assert_eq!(r.computer("u1", Some("t1")).unwrap(), "u1");
        assert_eq!(r.computer("a/demo", Some("t1")).unwrap(), "u1");
        assert_eq!(r.computer("solo", Some("t3")).unwrap(), "u3");
        assert_eq!(code(r.computer("u1", None)), Code::Unauthenticated);
        assert_eq!(code(r.computer("u1", Some("wrong"))), Code::Unauthenticated);
        assert_eq!(code(r.computer("u1", Some("t2"))), Code::PermissionDenied);
        assert_eq!(
            code(r.computer("nohash", Some("t1"))),
            Code::PermissionDenied
        );
        assert_eq!(code(r.computer("missing", Some("t1"))), Code::NotFound);
        // An unknown computer with a bad token reveals nothing.
        assert_eq!(
            code(r.computer("missing", Some("x"))),
            Code::Unauthenticated
        );
        let ambiguous = r.computer("demo", Some("t1")).unwrap_err();
        assert_eq!(ambiguous.code(), Code::FailedPrecondition);
        assert!(ambiguous.message().contains("NAMESPACE/NAME"));
        let manage = r.manage(Some("t1")).unwrap_err();
        assert_eq!(manage.code(), Code::FailedPrecondition);
        assert_eq!(manage.message(), MANAGE_REFUSED);
        let mount = r.host_mounts().unwrap_err();
        assert_eq!(mount.code(), Code::FailedPrecondition);
        assert_eq!(mount.message(), MOUNT_REFUSED);
        assert!(crate::auth::AllowAll.host_mounts().is_ok());
    }
}
