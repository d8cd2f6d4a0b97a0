//! The computer's access credential: a Secret whose `token` key holds 32
//! random bytes, hex-encoded (64 characters). The node agent accepts a
//! request for the computer only with that token.

use agentcomputer_crds::AgentComputer;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use rand::RngCore;

use super::{child_labels, owner, secret_name};

/// Key of the token in the Secret's data.
pub const TOKEN_KEY: &str = "token";

/// A new random token: 32 bytes from the OS-seeded CSPRNG, hex-encoded.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Builds the Secret carrying `token`.
pub fn build(c: &AgentComputer, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(c)),
            namespace: c.namespace(),
            labels: Some(child_labels(c, "credential")),
            owner_references: Some(owner(c)),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some([(TOKEN_KEY.to_string(), ByteString(token.as_bytes().to_vec()))].into()),
        ..Default::default()
    }
}

/// The token of an existing Secret, if it holds a well-formed one.
pub fn token_of(s: &Secret) -> Option<String> {
    let raw = s.data.as_ref()?.get(TOKEN_KEY)?;
    let t = String::from_utf8(raw.0.clone()).ok()?;
    (t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit())).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        let s = Secret {
            data: Some([(TOKEN_KEY.to_string(), ByteString(a.clone().into_bytes()))].into()),
            ..Default::default()
        };
        assert_eq!(token_of(&s), Some(a));
        let bad = Secret {
            data: Some([(TOKEN_KEY.to_string(), ByteString(b"short".to_vec()))].into()),
            ..Default::default()
        };
        assert_eq!(token_of(&bad), None);
    }
}
