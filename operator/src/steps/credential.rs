//! The credential step: the computer's Secret `NAME-credential`, whose
//! token's SHA-256 becomes `status.credentialHash` (the node agent checks
//! tokens against it and never reads the Secret).

use agentcomputer_crds::{AgentComputer, AgentComputerStatus};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use crate::FIELD_MANAGER;
use crate::context::AgentTls;
use crate::error::Result;
use crate::resources::secret;
use crate::writes::apply_obj;

/// What the credential step found in the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A well-formed token; its hash, `sha256:` and 64 lowercase hex digits.
    Usable(String),
    /// The token is malformed (no `token`, wrong length, not hex): why, and
    /// what to do. Nothing was written.
    Invalid(String),
}

/// Makes sure the credential Secret `name` exists and returns what its
/// token is.
///
/// - No Secret (first reconcile, or deleted: a rotation): created with a new
///   random token. A create, not an apply, so that a Secret someone else
///   creates meanwhile is never overwritten (the 409 is retried).
/// - A Secret with a well-formed token, ours or written by the user (a
///   rotation): the token is kept; labels and owner are applied with the
///   resourceVersion read as precondition, so an edit made between the read
///   and the apply fails it (409, retried) instead of being undone.
/// - A token that is not 64 hex characters: nothing is written (the user's
///   value is not lost), [`Credential::Invalid`].
///
/// Errors: the API server's refusal of the read, create or apply.
pub async fn reconcile(
    c: &AgentComputer,
    secrets: &Api<Secret>,
    name: &str,
    tls: Option<&AgentTls>,
) -> Result<Credential> {
    match secrets.get_opt(name).await? {
        None => {
            let token = secret::new_token();
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            secrets.create(&pp, &secret::build(c, &token, tls)).await?;
            Ok(Credential::Usable(secret::credential_hash(&token)))
        }
        Some(existing) => match secret::read_token(&existing) {
            Ok(token) => {
                let mut desired = secret::build(c, &token, tls);
                desired.metadata.resource_version = existing.metadata.resource_version.clone();
                apply_obj(secrets, name, &desired).await?;
                Ok(Credential::Usable(secret::credential_hash(&token)))
            }
            Err(why) => Ok(Credential::Invalid(why)),
        },
    }
}

/// The `status.credentialHash` after the credential step: the new token's
/// hash; none for a malformed token (every token is refused); and when the
/// step failed (`None`: the Secret could not be read), the hash the node
/// agent checks now, kept from `old`.
pub fn hash_after(credential: Option<&Credential>, old: &AgentComputerStatus) -> Option<String> {
    match credential {
        Some(Credential::Usable(hash)) => Some(hash.clone()),
        Some(Credential::Invalid(_)) => None,
        None => old.credential_hash.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_keeps_the_hash_and_a_bad_token_drops_it() {
        let old = AgentComputerStatus {
            credential_hash: Some("sha256:old".into()),
            ..Default::default()
        };
        let new = Credential::Usable("sha256:new".into());
        assert_eq!(hash_after(Some(&new), &old).as_deref(), Some("sha256:new"));
        assert_eq!(hash_after(None, &old).as_deref(), Some("sha256:old"));
        let bad = Credential::Invalid("token must be 64 hex characters".into());
        assert_eq!(hash_after(Some(&bad), &old), None);
    }
}
