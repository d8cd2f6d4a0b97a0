//! Why an HTTP exchange failed, with the exit codes curl gives each case.

use std::time::Duration;

use crate::policy::Denial;
use crate::resolve::ResolveError;

/// A failed request. The `Display` text is curl's wording where curl has
/// one (`Could not resolve host: x`), so the shell builtins can print
/// `curl: (CODE) TEXT` with [`HttpError::curl_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The URL does not parse or has no host.
    #[error("URL rejected: {0}")]
    BadUrl(String),
    /// A header name or value that cannot be sent.
    #[error("bad header: {0:?}")]
    BadHeader(String),
    /// A scheme other than http and https.
    #[error("Protocol \"{0}\" not supported")]
    UnsupportedScheme(String),
    /// The egress policy refused every address of the destination.
    #[error("egress denied by policy: {0}")]
    Denied(Denial),
    /// The host name did not resolve.
    #[error("Could not resolve host: {0}")]
    Resolve(String),
    /// No allowed address accepted the connection.
    #[error("Failed to connect to {host} port {port}: {reason}")]
    Connect {
        /// The host as the request named it.
        host: String,
        /// The TCP port tried.
        port: u16,
        /// The last address's connect error, in words.
        reason: String,
    },
    /// The TLS handshake failed for a reason other than the certificate.
    #[error("TLS connect error: {0}")]
    Tls(String),
    /// The server's certificate did not verify (webpki roots).
    #[error("SSL certificate problem: {0}")]
    Certificate(String),
    /// The connect or total timeout ran out.
    #[error("Operation timed out after {} milliseconds", .0.as_millis())]
    Timeout(Duration),
    /// The response body is larger than the cap (bytes).
    #[error("Maximum file size exceeded: the response is larger than {0} bytes")]
    TooLarge(u64),
    /// The server closed the connection without any response.
    #[error("Empty reply from server")]
    EmptyReply,
    /// The connection failed while the response was being received.
    #[error("Failure when receiving data from the peer: {0}")]
    Receive(String),
    /// The server's answer is not valid HTTP/1.
    #[error("Weird server reply: {0}")]
    Protocol(String),
    /// More redirects than allowed.
    #[error("Maximum ({0}) redirects followed")]
    TooManyRedirects(usize),
}

impl HttpError {
    /// curl's exit code for this failure (curl(1), "EXIT CODES"): 1
    /// unsupported protocol, 3 bad URL, 6 resolve, 7 connect (and policy
    /// refusals), 8 weird reply, 28 timeout, 35 TLS, 47 redirects, 52 empty
    /// reply, 56 receive, 60 certificate, 63 maximum file size, 43 bad
    /// header.
    pub fn curl_code(&self) -> i32 {
        match self {
            HttpError::UnsupportedScheme(_) => 1,
            HttpError::BadUrl(_) => 3,
            HttpError::Resolve(_) => 6,
            HttpError::Denied(_) | HttpError::Connect { .. } => 7,
            HttpError::Protocol(_) => 8,
            HttpError::Timeout(_) => 28,
            HttpError::Tls(_) => 35,
            HttpError::BadHeader(_) => 43,
            HttpError::TooManyRedirects(_) => 47,
            HttpError::EmptyReply => 52,
            HttpError::Receive(_) => 56,
            HttpError::Certificate(_) => 60,
            HttpError::TooLarge(_) => 63,
        }
    }

    /// GNU Wget's exit status for this failure (wget(1), "EXIT STATUS"):
    /// 1 generic (size cap), 2 bad URL, 4 network (resolve, connect, policy,
    /// timeout, receive), 5 TLS, 7 protocol (bad reply, redirects).
    pub fn wget_code(&self) -> i32 {
        match self {
            HttpError::TooLarge(_) => 1,
            HttpError::BadUrl(_) | HttpError::UnsupportedScheme(_) | HttpError::BadHeader(_) => 2,
            HttpError::Denied(_)
            | HttpError::Resolve(_)
            | HttpError::Connect { .. }
            | HttpError::Timeout(_)
            | HttpError::Receive(_)
            | HttpError::EmptyReply => 4,
            HttpError::Tls(_) | HttpError::Certificate(_) => 5,
            HttpError::Protocol(_) | HttpError::TooManyRedirects(_) => 7,
        }
    }
}

impl From<ResolveError> for HttpError {
    fn from(e: ResolveError) -> HttpError {
        match e {
            ResolveError::Denied(d) => HttpError::Denied(d),
            ResolveError::Lookup(name) => HttpError::Resolve(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DenyReason;

    #[test]
    fn curl_codes_and_wording() {
        let denied = HttpError::Denied(Denial {
            target: "10.0.0.5:80".into(),
            reason: DenyReason::NotListed,
        });
        assert_eq!(denied.curl_code(), 7);
        assert_eq!(
            denied.to_string(),
            "egress denied by policy: 10.0.0.5:80 is not in the allow-list"
        );
        assert_eq!(HttpError::Resolve("x".into()).curl_code(), 6);
        assert_eq!(
            HttpError::Timeout(Duration::from_millis(1500)).curl_code(),
            28
        );
        assert_eq!(
            HttpError::Timeout(Duration::from_millis(1500)).to_string(),
            "Operation timed out after 1500 milliseconds"
        );
        assert_eq!(HttpError::TooManyRedirects(5).curl_code(), 47);
        assert_eq!(HttpError::TooLarge(10).curl_code(), 63);
        assert_eq!(HttpError::Certificate("x".into()).curl_code(), 60);
        assert_eq!(denied.wget_code(), 4);
    }
}
