//! Who may use which computer.
//!
//! Every API call carries a bearer token in the `authorization` metadata
//! (`Bearer <token>`, RFC 6750 section 2.1) and, except for the calls that
//! manage computers, names one computer. An [`Authorizer`] turns the name a
//! client gave into the registry key of the computer it may use, or refuses
//! the call before anything is touched. The mode decides the rule: local mode
//! checks one agent token, cluster mode each computer's own token.

use std::sync::Arc;

use tonic::Status;
use tonic::metadata::MetadataMap;

/// Metadata key carrying the credential.
pub const AUTHORIZATION: &str = "authorization";

/// The rule deciding which calls a credential may make.
pub trait Authorizer: Send + Sync + 'static {
    /// Checks that `token` may use the computer the client named
    /// `requested`, and returns that computer's registry key (the name
    /// the [`crate::registry::Registry`] knows it by).
    ///
    /// Errors: `UNAUTHENTICATED` for a missing or unknown token,
    /// `PERMISSION_DENIED` for a valid token of another computer,
    /// `NOT_FOUND` or `INVALID_ARGUMENT` as the rule defines.
    fn computer(&self, requested: &str, token: Option<&str>) -> Result<String, Status>;

    /// Checks that `token` may create, delete and list computers.
    /// Errors: `UNAUTHENTICATED`, or `FAILED_PRECONDITION` where computers
    /// are managed elsewhere (as Kubernetes resources in a cluster).
    fn manage(&self, token: Option<&str>) -> Result<(), Status>;

    /// Checks that this agent may make mounts on its own host (`Mount`,
    /// `Unmount`), asked after the credential was accepted. The default
    /// allows them (local mode). Errors: `FAILED_PRECONDITION` where
    /// volumes are mounted by someone else (the CSI driver in a cluster).
    fn host_mounts(&self) -> Result<(), Status> {
        Ok(())
    }
}

/// Lets every call through with the requested name unchanged: the API
/// before credentials existed. Only for tests of other parts.
#[cfg(test)]
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

#[cfg(test)]
impl Authorizer for AllowAll {
    fn computer(&self, requested: &str, _token: Option<&str>) -> Result<String, Status> {
        Ok(requested.to_string())
    }

    fn manage(&self, _token: Option<&str>) -> Result<(), Status> {
        Ok(())
    }
}

/// The token of a call: the value after `Bearer ` in its `authorization`
/// metadata. `None` when absent or not of that form (the scheme is
/// case-insensitive, RFC 7235 section 2.1).
pub fn bearer_token(metadata: &MetadataMap) -> Option<&str> {
    let value = metadata.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// One call's credential, checked against the agent's rule.
#[derive(Clone)]
pub struct Caller {
    token: Option<String>,
    rule: Arc<dyn Authorizer>,
}

impl Caller {
    /// The caller of a request with `metadata`, judged by `rule`.
    pub fn new(metadata: &MetadataMap, rule: Arc<dyn Authorizer>) -> Caller {
        Caller {
            token: bearer_token(metadata).map(str::to_string),
            rule,
        }
    }

    /// See [`Authorizer::computer`].
    pub fn computer(&self, requested: &str) -> Result<String, Status> {
        self.rule.computer(requested, self.token.as_deref())
    }

    /// See [`Authorizer::manage`].
    pub fn manage(&self) -> Result<(), Status> {
        self.rule.manage(self.token.as_deref())
    }

    /// See [`Authorizer::host_mounts`].
    pub fn host_mounts(&self) -> Result<(), Status> {
        self.rule.host_mounts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataValue;

    fn with(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert(AUTHORIZATION, MetadataValue::try_from(value).unwrap());
        m
    }

    #[test]
    fn bearer_token_forms() {
        assert_eq!(bearer_token(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&with("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&with("Basic abc")), None);
        assert_eq!(bearer_token(&with("Bearer ")), None);
        assert_eq!(bearer_token(&with("abc")), None);
        assert_eq!(bearer_token(&MetadataMap::new()), None);
    }
}
