//! TLS for the gRPC API (rustls through tonic, `ring` as the crypto provider).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The server side of TLS from two PEM files: `cert`, the server's
/// certificate chain (leaf first, then any intermediates), and `key`, its
/// private key (PKCS#8, PKCS#1 RSA or SEC1 EC). Both are read and checked
/// now, so a bad file stops the agent at start rather than failing every
/// handshake: the chain must hold at least one certificate, the key must
/// parse, and it must be the key of the leaf certificate. Clients need no
/// certificate of their own (authentication is the bearer token).
///
/// With `client_ca` (PEM certificates), clients are asked for a
/// certificate as well: one that does not chain to `client_ca` ends the
/// handshake, and a client without one is served as before (sandbox
/// runners and port-forwarded CLIs present none). That is how the API
/// gateway and the agents authenticate each other (docs/gateway.md).
///
/// Errors name the file: unreadable, no certificate / no private key in it,
/// or a key that does not match the certificate.
pub fn server_tls(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> anyhow::Result<ServerTlsConfig> {
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("cannot read TLS certificate {}", cert.display()))?;
    let key_pem =
        std::fs::read(key).with_context(|| format!("cannot read TLS key {}", key.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad PEM in TLS certificate {}", cert.display()))?;
    if chain.is_empty() {
        bail!(
            "no certificate (-----BEGIN CERTIFICATE-----) in TLS certificate file {}",
            cert.display()
        );
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => anyhow::anyhow!(
            "no private key (-----BEGIN PRIVATE KEY-----) in TLS key file {}",
            key.display()
        ),
        e => anyhow::anyhow!("bad PEM in TLS key file {}: {e}", key.display()),
    })?;
    // Building a rustls configuration checks that the key parses and
    // belongs to the leaf certificate, as tonic's own build would later.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .with_context(|| {
            format!(
                "TLS key {} does not fit certificate {}",
                key.display(),
                cert.display()
            )
        })?;
    let config = ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem));
    let Some(ca) = client_ca else {
        return Ok(config);
    };
    let ca_pem =
        std::fs::read(ca).with_context(|| format!("cannot read client CA {}", ca.display()))?;
    let roots = CertificateDer::pem_slice_iter(&ca_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad PEM in client CA {}", ca.display()))?;
    if roots.is_empty() {
        bail!(
            "no certificate (-----BEGIN CERTIFICATE-----) in client CA file {}",
            ca.display()
        );
    }
    Ok(config
        .client_ca_root(Certificate::from_pem(ca_pem))
        .client_auth_optional(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, c.cert.pem()).unwrap();
        std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
        (cert, key)
    }

    #[test]
    fn accepts_a_pair_and_names_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path(), "a");
        server_tls(&cert, &key, None).unwrap();
        server_tls(&cert, &key, Some(&cert)).unwrap();
        let err = format!("{:#}", server_tls(&cert, &key, Some(&key)).unwrap_err());
        assert!(
            err.contains("no certificate") && err.contains("client CA"),
            "{err}"
        );

        let (_, other_key) = pair(dir.path(), "b");
        let err = format!("{:#}", server_tls(&cert, &other_key, None).unwrap_err());
        assert!(err.contains("does not fit certificate"), "{err}");

        let err = format!("{:#}", server_tls(&key, &key, None).unwrap_err());
        assert!(err.contains("no certificate"), "{err}");
        assert!(err.contains("a.key"), "{err}");

        let err = format!("{:#}", server_tls(&cert, &cert, None).unwrap_err());
        assert!(err.contains("no private key"), "{err}");

        let missing = dir.path().join("missing.crt");
        let err = format!("{:#}", server_tls(&missing, &key, None).unwrap_err());
        assert!(err.contains("cannot read TLS certificate"), "{err}");
        assert!(err.contains("missing.crt"), "{err}");
    }
}
