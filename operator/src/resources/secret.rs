//! The computer's access credential: a Secret whose `token` key holds 32
//! random bytes, hex-encoded (64 characters). The node agent never reads the
//! Secret: it accepts a request for the computer only with a token whose
//! SHA-256 matches `status.credentialHash` ([`credential_hash`]).
//!
//! The operator creates the Secret once. A token the user writes (rotation)
//! is kept as long as it is 64 hex characters; a deleted Secret is created
//! again with a new token, which is a rotation too.

use agentcomputer_crds::AgentComputer;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::{child_labels, owner, secret_name};

/// Key of the token in the Secret's data.
pub const TOKEN_KEY: &str = "token";

/// A new random token: 32 bytes from the OS-seeded CSPRNG, hex-encoded.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Key of the agents' CA certificates (PEM) in a credential Secret, when
/// the agents serve TLS.
pub const CA_KEY: &str = "ca.crt";
/// Key of the DNS name in the agents' certificate.
pub const TLS_SERVER_NAME_KEY: &str = "tls-server-name";

/// Builds the Secret carrying `token` and, when the agents serve TLS,
/// what a client needs to check them ([`CA_KEY`],
/// [`TLS_SERVER_NAME_KEY`]).
pub fn build(c: &AgentComputer, token: &str, tls: Option<&crate::context::AgentTls>) -> Secret {
    let mut data: std::collections::BTreeMap<String, ByteString> =
        [(TOKEN_KEY.to_string(), ByteString(token.as_bytes().to_vec()))].into();
    if let Some(tls) = tls {
        data.insert(CA_KEY.into(), ByteString(tls.ca_pem.as_bytes().to_vec()));
        data.insert(
            TLS_SERVER_NAME_KEY.into(),
            ByteString(tls.server_name.as_bytes().to_vec()),
        );
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(c)),
            namespace: c.namespace(),
            labels: Some(child_labels(c, "credential")),
            owner_references: Some(owner(c)),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The token of an existing Secret, if it holds a well-formed one.
pub fn token_of(s: &Secret) -> Option<String> {
    read_token(s).ok()
}

/// The token of an existing Secret, or why it is unusable (the message
/// names the Secret and what a token must be).
pub fn read_token(s: &Secret) -> Result<String, String> {
    let name = s.metadata.name.as_deref().unwrap_or_default();
    let Some(raw) = s.data.as_ref().and_then(|d| d.get(TOKEN_KEY)) else {
        return Err(format!(
            "secret {name} has no {TOKEN_KEY:?} key; delete the secret to get a new token"
        ));
    };
    match std::str::from_utf8(&raw.0) {
        Ok(t) if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(t.to_string()),
        _ => Err(format!(
            "the {TOKEN_KEY:?} of secret {name} must be 64 hexadecimal characters (32 random \
             bytes, e.g. `openssl rand -hex 32`), got {} bytes; requests are refused until it \
             is fixed or the secret is deleted (which makes a new token)",
            raw.0.len()
        )),
    }
}

/// `"sha256:"` and the lowercase hex SHA-256 (FIPS 180-4) of the token's
/// bytes: the value of `status.credentialHash`.
pub fn credential_hash(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
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
        assert!(read_token(&bad).unwrap_err().contains("64 hexadecimal"));
        assert!(
            read_token(&Secret::default())
                .unwrap_err()
                .contains("no \"token\" key")
        );
    }

    #[test]
    fn hash_is_sha256_of_the_token_bytes() {
        // SHA-256("abc") from FIPS 180-2, appendix B.1.
        assert_eq!(
            credential_hash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
