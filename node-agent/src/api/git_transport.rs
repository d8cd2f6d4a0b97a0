//! git's HTTP exchanges for calls the node agent makes on a computer's
//! behalf (Publish): the computer's egress policy decides every
//! connection, as it does for the shell's `git` and `curl`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::Policy;
use agentcomputer_egress::http::{HttpError, Limits, Request, send_following};
use agentcomputer_git::remote::transport::{HttpRequest, HttpResponse, Transport, TransportError};

/// Redirects followed per request (git follows them too).
const MAX_REDIRECTS: usize = 5;

/// A [`Transport`] obeying one computer's policy, with a deadline for the
/// whole call. Runs on a blocking thread: each request gets a small
/// current-thread runtime.
pub struct PolicyTransport {
    policy: Arc<Policy>,
    deadline: Instant,
    max_body_bytes: u64,
}

impl PolicyTransport {
    /// Requests end at `deadline`; bodies are capped like the shell's downloads.
    pub fn new(policy: Arc<Policy>, deadline: Instant) -> Self {
        Self {
            policy,
            deadline,
            max_body_bytes: agentcomputer_shell::DEFAULT_MAX_DOWNLOAD_BYTES,
        }
    }
}

impl Transport for PolicyTransport {
    fn send(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let failed = |m: String| TransportError::Failed(m);
        let url = url::Url::parse(&req.url).map_err(|e| failed(format!("URL rejected: {e}")))?;
        let method =
            http::Method::from_bytes(req.method.as_bytes()).map_err(|e| failed(e.to_string()))?;
        let request = Request {
            method,
            url,
            headers: req.headers.clone(),
            body: req.body.clone().into(),
            insecure: false,
        };
        let limits = Limits {
            connect_timeout: self
                .deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), Duration::from_secs(30)),
            deadline: self.deadline,
            max_body_bytes: self.max_body_bytes,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let policy = Arc::clone(&self.policy);
        runtime
            .block_on(async move {
                let (resp, _) = send_following(&policy, request, limits, MAX_REDIRECTS).await?;
                let status = resp.status.as_u16();
                let content_type = resp
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let body = resp.bytes().await?;
                Ok(HttpResponse {
                    status,
                    content_type,
                    body,
                })
            })
            .map_err(|e: HttpError| failed(e.to_string()))
    }
}
