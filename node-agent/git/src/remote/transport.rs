//! The one thing this crate needs from the network: a blocking HTTP
//! exchange. The runtime that embeds git implements it (the shell does,
//! over its egress-checked client, so every connection is decided by the
//! computer's policy exactly as `curl`'s are); this crate never opens a
//! socket itself and depends on no network crate.

/// One HTTP request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// Absolute `http://` or `https://` URL, without credentials.
    pub url: String,
    /// Header fields in order (`Content-Type`, `Authorization`, …).
    pub headers: Vec<(String, String)>,
    /// Body; empty for none.
    pub body: Vec<u8>,
}

/// The whole response to an [`HttpRequest`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code (after redirects, if the transport follows them).
    pub status: u16,
    /// The `Content-Type` field, empty when absent.
    pub content_type: String,
    /// The body, complete.
    pub body: Vec<u8>,
}

/// Why an exchange did not happen or did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    /// No connection was made or it broke: the reason in words, as git
    /// shows curl's (`Failed to connect to …`, or the egress policy's
    /// refusal). Reported as `fatal: unable to access 'URL/': REASON`.
    Failed(String),
    /// The exec was cancelled or ran out of time while waiting.
    Stopped,
}

/// A blocking HTTP client. Implementations must return within about a
/// second of the exec being stopped ([`TransportError::Stopped`]).
pub trait Transport {
    /// Sends `req` and returns the complete response.
    fn send(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError>;
}
