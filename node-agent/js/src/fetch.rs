//! The egress hook behind the global `fetch`.
//!
//! The JavaScript side builds a [`FetchRequest`] from `fetch(input, init)`
//! (WHATWG Fetch: method, headers, body) and hands it to the exec's
//! [`Fetcher`]; the answer becomes a `Response`. The default fetcher denies
//! everything, so code can reach no network unless the node agent supplies a
//! fetcher that applies the computer's egress policy.

use std::time::Instant;

/// The message of every fetch the default policy refuses.
pub const EGRESS_DENIED: &str = "fetch: egress denied by the computer's policy";

/// One HTTP request made by JavaScript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Absolute URL, already parsed and serialized by the WHATWG URL rules.
    pub url: String,
    /// Upper-case method (`GET`, `POST`, ...).
    pub method: String,
    /// Header names lower-cased, in the order given.
    pub headers: Vec<(String, String)>,
    /// Request body (empty for none).
    pub body: Vec<u8>,
    /// When the exec's timeout ends: a fetcher must give up by then, since
    /// the exec cannot be interrupted while it waits.
    pub deadline: Instant,
}

/// The answer to a [`FetchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchResponse {
    /// HTTP status code (200, 404, ...).
    pub status: u16,
    /// Reason phrase (`OK`); may be empty (HTTP/2 has none).
    pub status_text: String,
    /// Response headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The whole response body.
    pub body: Vec<u8>,
    /// The final URL after redirects.
    pub url: String,
}

/// Why a fetch failed; `fetch` rejects with a `TypeError` carrying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The egress policy refused the destination (message for the user).
    Denied(String),
    /// The request failed on the way (DNS, connect, TLS, timeout, ...).
    Failed(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Denied(m) | FetchError::Failed(m) => f.write_str(m),
        }
    }
}

/// Performs `fetch` for an exec. Called on the exec's own thread, so a
/// blocking implementation is fine; it must honour
/// [`FetchRequest::deadline`].
pub trait Fetcher: Send + Sync {
    /// Sends `request` and returns the whole response. Errors:
    /// [`FetchError::Denied`] when the egress policy refuses the target,
    /// [`FetchError::Failed`] for anything else (DNS, connect, TLS, the
    /// deadline); either becomes a `TypeError` in the script.
    fn fetch(&self, request: FetchRequest) -> Result<FetchResponse, FetchError>;
}

/// The default policy: no egress at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAllEgress;

impl Fetcher for DenyAllEgress {
    fn fetch(&self, _request: FetchRequest) -> Result<FetchResponse, FetchError> {
        Err(FetchError::Denied(EGRESS_DENIED.to_string()))
    }
}

impl<F> Fetcher for F
where
    F: Fn(FetchRequest) -> Result<FetchResponse, FetchError> + Send + Sync,
{
    fn fetch(&self, request: FetchRequest) -> Result<FetchResponse, FetchError> {
        self(request)
    }
}
