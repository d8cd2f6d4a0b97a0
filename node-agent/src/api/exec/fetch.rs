//! JavaScript's `fetch` over the computer's egress policy: the same
//! policy-checked client as the shell's `curl`, redirects followed as
//! WHATWG Fetch does ("follow", at most 20), each hop checked again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::Policy;
use agentcomputer_egress::http::{HttpError, Limits, Request, send_following};
use agentcomputer_js::{FetchError, FetchRequest, FetchResponse, Fetcher};

/// Redirects a fetch follows (WHATWG Fetch, "HTTP-redirect fetch").
const MAX_REDIRECTS: usize = 20;

/// A [`Fetcher`] that obeys one computer's policy.
pub struct PolicyFetcher {
    policy: Arc<Policy>,
    max_body_bytes: u64,
}

impl PolicyFetcher {
    /// Bodies are capped like the shell's downloads.
    pub fn new(policy: Arc<Policy>) -> PolicyFetcher {
        PolicyFetcher {
            policy,
            max_body_bytes: agentcomputer_shell::DEFAULT_MAX_DOWNLOAD_BYTES,
        }
    }
}

impl Fetcher for PolicyFetcher {
    /// Runs on the JavaScript exec's own thread, which has no async
    /// runtime: a small one is made for the call.
    fn fetch(&self, request: FetchRequest) -> Result<FetchResponse, FetchError> {
        let failed = |m: String| FetchError::Failed(format!("fetch failed: {m}"));
        let url = url::Url::parse(&request.url).map_err(|e| failed(e.to_string()))?;
        let method = http::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| failed(format!("bad method {}", request.method)))?;
        let mut headers = request.headers;
        if !headers.iter().any(|(n, _)| n == "accept") {
            headers.push(("accept".into(), "*/*".into()));
        }
        let req = Request {
            method,
            url,
            headers,
            body: request.body.into(),
            insecure: false,
        };
        let limits = Limits {
            connect_timeout: request
                .deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
            deadline: request.deadline,
            max_body_bytes: self.max_body_bytes,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let policy = Arc::clone(&self.policy);
        runtime
            .block_on(async move {
                let (resp, _) = send_following(&policy, req, limits, MAX_REDIRECTS).await?;
                let status = resp.status.as_u16();
                let status_text = resp.reason().to_string();
                let url = resp.url.to_string();
                let headers = resp
                    .headers
                    .iter()
                    .map(|(n, v)| {
                        let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                        (n.as_str().to_string(), value)
                    })
                    .collect();
                let body = resp.bytes().await?;
                Ok(FetchResponse {
                    status,
                    status_text,
                    headers,
                    body,
                    url,
                })
            })
            .map_err(|e: HttpError| match e {
                HttpError::Denied(_) => FetchError::Denied(format!("fetch: {e}")),
                other => failed(other.to_string()),
            })
    }
}
