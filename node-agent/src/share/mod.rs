//! Share links: signed, expiring HTTP URLs that download one file of a
//! computer without a credential (docs/share.md).
//!
//! A link is `BASE/share/v1/COMPUTER/PATH?expires=UNIX_SECONDS&sig=SIGNATURE`:
//! `COMPUTER` is the computer's registry key (its name in local mode, its
//! uid in a cluster), `PATH` the file's normalised path below `/workspace`
//! (each component percent-encoded, RFC 3986 section 3.3), and the
//! signature covers all three ([`sign`]). Nothing about a link is stored:
//! it is valid while its signature checks out with the computer's current
//! key and its expiry has not passed. So deleting the computer (its key
//! goes with its directory) revokes all its links, and in a cluster so does
//! rotating its credential ([`KeyBinding`]).
//!
//! [`Sharer`] makes links (for the `Share` call of [`crate::api`]) and serves
//! them over HTTP ([`http`]). The mode decides where: local mode on its
//! own loopback listener, cluster mode on a listener the chart's gateway
//! reaches.

pub(crate) mod http;
mod keys;
mod pace;
mod range;
mod sign;
mod slots;

use std::sync::Arc;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use url::Url;

use crate::registry::{Registry, RegistryError};
use sign::LinkKey;
use slots::DownloadSlots;

/// First path segments of every link.
pub const ROUTE: [&str; 2] = ["share", "v1"];

/// Bytes percent-encoded in a path segment of a link: all but RFC 3986's
/// `pchar` (section 3.3: unreserved `A-Z a-z 0-9 - . _ ~`, sub-delims
/// `! $ & ' ( ) * + , ; =`, and `:` `@`). So control characters, space,
/// `%`, `/`, `?`, `#` and every non-ASCII byte are encoded. The server
/// decodes each segment back (axum's path extractor).
pub const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// Lifetime of a link when the caller asks for none: one hour.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(3600);

/// Longest lifetime of a link: seven days.
pub const MAX_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default of [`ShareConfig::max_downloads`].
pub const DEFAULT_MAX_DOWNLOADS: usize = 64;

/// Default of [`ShareConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default of [`ShareConfig::min_rate`]: 4 KiB/s (32 kbit/s, below any
/// link a person downloads over).
pub const DEFAULT_MIN_RATE: u64 = 4096;

/// What the mode ties a computer's links to, besides its stored secret.
pub trait KeyBinding: Send + Sync + 'static {
    /// The bytes mixed into computer `computer`'s link key, or `None` when
    /// the computer may have no links now (every link of it is refused and
    /// none can be made). Cluster mode answers with the fingerprint of the
    /// computer's current credential, so rotating the credential revokes
    /// the links signed before.
    fn binding(&self, computer: &str) -> Option<Vec<u8>>;
}

/// The binding of local mode: none (the stored secret alone).
#[derive(Debug, Default, Clone, Copy)]
pub struct Unbound;

impl KeyBinding for Unbound {
    fn binding(&self, _computer: &str) -> Option<Vec<u8>> {
        Some(Vec::new())
    }
}

/// Settings of the share server.
#[derive(Debug, Clone)]
pub struct ShareConfig {
    /// Where links point: the scheme, host and port (and an optional path
    /// prefix) clients reach the share server at, such as
    /// `http://127.0.0.1:7434/` or, in a cluster, the gateway's external
    /// address.
    pub base_url: Url,
    /// Most downloads served at once, all computers together; past it a
    /// download gets `503` with `Retry-After`.
    pub max_downloads: usize,
    /// Most downloads of one computer served at once (`503` past it);
    /// `None`: an eighth of `max_downloads`, at least 1
    /// ([`slots::default_per_computer`]).
    pub max_downloads_per_computer: Option<usize>,
    /// A download whose client takes nothing for this long is ended.
    pub idle_timeout: Duration,
    /// Bytes a second a download's client must take, measured over each
    /// [`pace::WINDOW`]; a slower download is ended. 0: no minimum.
    pub min_rate: u64,
    /// Bounds on the share port's connections: a connection is
    /// authenticated once it asked for a link whose signature checks out
    /// ([`crate::gate`]).
    pub gate: crate::gate::GateConfig,
}

impl ShareConfig {
    /// Settings with links under `base_url` and the default bounds.
    pub fn new(base_url: Url) -> ShareConfig {
        ShareConfig {
            base_url,
            max_downloads: DEFAULT_MAX_DOWNLOADS,
            max_downloads_per_computer: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            min_rate: DEFAULT_MIN_RATE,
            gate: crate::gate::GateConfig::default(),
        }
    }
}

/// Parses the base URL of links: `http` or `https` with a host, no query or
/// fragment. Errors say what is wrong.
pub fn parse_base_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(format!(
            "{text:?}: the base URL of share links must be http:// or https:// with a host"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{text:?}: the base URL of share links cannot have a query or fragment"
        ));
    }
    Ok(url)
}

/// Why a link cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The registry failed (unknown computer, unreadable key).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The mode allows no links for this computer now.
    #[error("computer \"{0}\" has no credential to tie share links to")]
    Unbound(String),
}

/// Makes and serves the share links of one node agent. Cheap to clone.
#[derive(Clone)]
pub struct Sharer {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    binding: Arc<dyn KeyBinding>,
    config: ShareConfig,
    downloads: DownloadSlots,
}

impl Sharer {
    /// Links to the computers of `registry`, keyed with `binding`.
    pub fn new(registry: Registry, binding: Arc<dyn KeyBinding>, config: ShareConfig) -> Sharer {
        let total = config.max_downloads.max(1);
        let downloads = DownloadSlots::new(
            total,
            config
                .max_downloads_per_computer
                .unwrap_or_else(|| slots::default_per_computer(total)),
        );
        Sharer {
            inner: Arc::new(Inner {
                registry,
                binding,
                config,
                downloads,
            }),
        }
    }

    /// The settings the sharer was made with.
    pub fn config(&self) -> &ShareConfig {
        &self.inner.config
    }

    /// Computer `computer`'s link key now: `Ok(None)` when it has no
    /// secret (and `create` is off), or the mode binds it to nothing.
    async fn key(&self, computer: &str, create: bool) -> Result<Option<LinkKey>, RegistryError> {
        let Some(secret) = keys::share_key(&self.inner.registry, computer, create).await? else {
            return Ok(None);
        };
        Ok(self
            .inner
            .binding
            .binding(computer)
            .map(|b| LinkKey::derive(&secret, &b)))
    }

    /// The URL of a link to `path` (normalised, relative to `/workspace`,
    /// not empty) of computer `computer` (registry key) that works until
    /// `expires` (seconds since the Unix epoch). The caller has checked
    /// that the caller may use the computer and that the path names a
    /// regular file. Errors: [`ShareError`].
    pub async fn link(&self, computer: &str, path: &str, expires: i64) -> Result<Url, ShareError> {
        let key = self
            .key(computer, true)
            .await?
            .ok_or_else(|| ShareError::Unbound(computer.to_string()))?;
        let signature = key.sign(computer, expires, path);
        let mut url = self.inner.config.base_url.clone();
        // Encoded here, not by `Url`'s segment setters: those follow the
        // WHATWG URL parser, which drops tabs and line breaks instead of
        // encoding them, and the link would name another file.
        let mut route = url.path().trim_end_matches('/').to_string();
        for segment in ROUTE {
            route.push('/');
            route.push_str(segment);
        }
        for segment in std::iter::once(computer).chain(path.split('/')) {
            route.push('/');
            route.extend(utf8_percent_encode(segment, SEGMENT));
        }
        url.set_path(&route);
        url.query_pairs_mut()
            .append_pair("expires", &expires.to_string())
            .append_pair("sig", &signature);
        Ok(url)
    }
}

/// The expiry of a link asked to last `seconds` (0: [`DEFAULT_EXPIRY`])
/// from `now` (seconds since the Unix epoch). Errors: more than
/// [`MAX_EXPIRY`].
pub fn expiry(seconds: u64, now: i64) -> Result<i64, String> {
    let lifetime = match seconds {
        0 => DEFAULT_EXPIRY.as_secs(),
        s if s > MAX_EXPIRY.as_secs() => {
            return Err(format!(
                "a share link lasts at most {} seconds (7 days), not {s}",
                MAX_EXPIRY.as_secs()
            ));
        }
        s => s,
    };
    Ok(now.saturating_add(lifetime as i64))
}

/// Seconds since the Unix epoch, now.
pub fn now_unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_bounds() {
        assert_eq!(expiry(0, 100), Ok(3700));
        assert_eq!(expiry(1, 100), Ok(101));
        assert_eq!(expiry(604_800, 0), Ok(604_800));
        assert!(expiry(604_801, 0).unwrap_err().contains("at most 604800"));
    }

    #[test]
    fn base_urls() {
        assert!(parse_base_url("http://127.0.0.1:7434").is_ok());
        assert!(parse_base_url("https://files.example.com/prefix/").is_ok());
        assert!(parse_base_url("ftp://x").is_err());
        assert!(parse_base_url("http://x/?a=b").is_err());
        assert!(parse_base_url("not a url").is_err());
    }

    #[tokio::test]
    async fn link_shape() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(dir.path(), Duration::from_secs(60)).unwrap();
        registry
            .create(
                "demo",
                agentcomputer_fs::Limits::default(),
                Default::default(),
            )
            .await
            .unwrap();
        let sharer = Sharer::new(
            registry.clone(),
            Arc::new(Unbound),
            ShareConfig::new(parse_base_url("http://127.0.0.1:7434/pre").unwrap()),
        );
        let url = sharer.link("demo", "a dir/r%port.txt", 1234).await.unwrap();
        let text = url.as_str();
        assert!(
            text.starts_with(
                "http://127.0.0.1:7434/pre/share/v1/demo/a%20dir/r%25port.txt?expires=1234&sig="
            ),
            "{text}"
        );
        // Control characters are encoded, never dropped; sub-delims stay.
        let odd = sharer
            .link("demo", "d/a\tb\r\nc\u{7f}#?.txt", 1)
            .await
            .unwrap();
        assert!(
            odd.as_str()
                .contains("/share/v1/demo/d/a%09b%0D%0Ac%7F%23%3F.txt?expires=1&"),
            "{odd}"
        );
        let subs = sharer.link("demo", "x+y=(1);@:!'$&*,~", 1).await.unwrap();
        assert!(
            subs.as_str().contains("/demo/x+y=(1);@:!'$&*,~?expires"),
            "{subs}"
        );
        // The key is kept: a second link signs the same way.
        let again = sharer.link("demo", "a dir/r%port.txt", 1234).await.unwrap();
        assert_eq!(url, again);
        assert!(matches!(
            sharer.link("nope", "a", 1).await,
            Err(ShareError::Registry(RegistryError::NotFound(_)))
        ));
    }
}
