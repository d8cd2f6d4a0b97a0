//! Signing and checking share links: HMAC-SHA256 (RFC 2104, FIPS 180-4)
//! over what a link grants, with a key derived from the computer's secret.
//!
//! A computer's link key is `HMAC-SHA256(secret, "agentcomputer share key v1\0" ‖ binding)`,
//! where `secret` is the computer's stored key
//! ([`crate::registry::Registry::share_key`]) and `binding` what the mode
//! ties links to ([`super::KeyBinding`]: in a cluster the fingerprint of the
//! computer's current credential, so rotating the credential changes the
//! key). A link's signature is `HMAC-SHA256(link key, "v1|COMPUTER|EXPIRES|PATH")`
//! in unpadded base64url (RFC 4648 section 5), 43 characters. The computer
//! name has no `|` and the expiry is digits, so the message is unambiguous
//! whatever the path holds.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation of the key derivation.
const KEY_LABEL: &[u8] = b"agentcomputer share key v1\0";

/// A computer's link key: never shown, only used to sign and check.
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(<redacted>)")
    }
}

impl LinkKey {
    /// The link key of a computer with stored secret `secret` and mode
    /// binding `binding` (empty in local mode).
    pub fn derive(secret: &[u8], binding: &[u8]) -> LinkKey {
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length");
        mac.update(KEY_LABEL);
        mac.update(binding);
        LinkKey(mac.finalize().into_bytes().into())
    }

    fn mac(&self, computer: &str, expires: i64, path: &str) -> HmacSha256 {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(format!("v1|{computer}|{expires}|").as_bytes());
        mac.update(path.as_bytes());
        mac
    }

    /// The signature of a link to `path` (normalised, relative to
    /// `/workspace`) of `computer` (its registry key), working until
    /// `expires` (seconds since the Unix epoch): 43 base64url characters.
    pub fn sign(&self, computer: &str, expires: i64, path: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(computer, expires, path).finalize().into_bytes())
    }

    /// Whether `signature` is the signature of that link. The comparison
    /// takes the same time wherever the bytes differ (`hmac`'s
    /// `verify_slice`, which compares with `subtle`); a signature that is
    /// not base64url of 32 bytes is simply wrong.
    pub fn verify(&self, computer: &str, expires: i64, path: &str, signature: &str) -> bool {
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        bytes.len() == 32
            && self
                .mac(computer, expires, path)
                .verify_slice(&bytes)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let key = LinkKey::derive(&[7; 32], b"");
        let sig = key.sign("demo", 1_900_000_000, "dir/a b.txt");
        assert_eq!(sig.len(), 43);
        assert!(key.verify("demo", 1_900_000_000, "dir/a b.txt", &sig));
        // Every part of the link is covered.
        assert!(!key.verify("demo2", 1_900_000_000, "dir/a b.txt", &sig));
        assert!(!key.verify("demo", 1_900_000_001, "dir/a b.txt", &sig));
        assert!(!key.verify("demo", 1_900_000_000, "dir/a b.txt2", &sig));
        // Another secret or binding signs differently.
        assert!(!LinkKey::derive(&[8; 32], b"").verify("demo", 1_900_000_000, "dir/a b.txt", &sig));
        assert!(!LinkKey::derive(&[7; 32], b"x").verify(
            "demo",
            1_900_000_000,
            "dir/a b.txt",
            &sig
        ));
        // Not a signature at all.
        assert!(!key.verify("demo", 1_900_000_000, "dir/a b.txt", "!!"));
        assert!(!key.verify("demo", 1_900_000_000, "dir/a b.txt", &sig[..40]));
        let mut flipped = sig.into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(!key.verify("demo", 1_900_000_000, "dir/a b.txt", &flipped));
    }

    /// RFC 4231 test case 2 checks that the crate pairing is HMAC-SHA256.
    #[test]
    fn hmac_sha256_rfc4231_case2() {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
