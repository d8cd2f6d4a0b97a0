//! Connecting to an S3-compatible object store.
//!
//! The backup needs conditional writes from the store: `PutObject` with
//! `If-None-Match: *` (object_store's [`PutMode::Create`], failing with
//! [`object_store::Error::AlreadyExists`] when the key exists) and
//! `If-Match: <etag>` ([`PutMode::Update`], failing with
//! [`object_store::Error::Precondition`]). AWS S3, Cloudflare R2 and
//! versitygw (the store the tests run against) implement both.
//!
//! [`PutMode::Create`]: object_store::PutMode::Create
//! [`PutMode::Update`]: object_store::PutMode::Update

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};

/// Where and as whom to reach an S3-compatible store.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Endpoint URL, e.g. `http://127.0.0.1:7070` or `https://s3.us-east-1.amazonaws.com`.
    pub endpoint: String,
    /// Bucket name; it must exist.
    pub bucket: String,
    /// Region used for request signing (`us-east-1` for most S3-compatible stores).
    pub region: String,
    /// The access key id of the credentials requests are signed with.
    pub access_key_id: String,
    /// The secret of that access key.
    pub secret_access_key: String,
    /// Allow a plain `http://` endpoint (loopback test stores); refused otherwise.
    pub allow_http: bool,
}

/// Installs rustls's `ring` provider as the process default, which the
/// store's HTTPS client needs (it is built without a provider of its own so
/// the process keeps one crypto stack). Does nothing if a default is set.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds a client for the bucket in `config`, with path-style requests,
/// conditional puts through `If-None-Match`/`If-Match`, and unsigned
/// payloads (headers are signed; TLS and the objects' own digests guard
/// the bytes).
///
/// Errors: an invalid endpoint URL or a missing field, as object_store reports it.
pub fn s3_store(config: &S3Config) -> object_store::Result<Arc<dyn ObjectStore>> {
    install_tls_provider();
    let store = AmazonS3Builder::new()
        .with_endpoint(&config.endpoint)
        .with_bucket_name(&config.bucket)
        .with_region(&config.region)
        .with_access_key_id(&config.access_key_id)
        .with_secret_access_key(&config.secret_access_key)
        .with_allow_http(config.allow_http)
        .with_virtual_hosted_style_request(false)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        // Objects carry their own SHA-256 (docs/backup.md); hashing each
        // payload again to sign it would double the shipper's CPU per byte.
        .with_unsigned_payload(true)
        .build()?;
    Ok(Arc::new(store))
}
