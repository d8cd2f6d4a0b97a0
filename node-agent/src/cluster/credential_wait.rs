//! A call whose token this node does not know yet waits a moment for it.
//!
//! The node agent learns each computer's credential fingerprint from its
//! watch of AgentComputers (`status.credentialHash`), which the operator
//! writes in the same status update that makes the computer Ready, or that
//! rotates its token. A client that acts on Ready (or on the new token) at
//! once can reach the agent before the watch event does, and would be
//! refused as `UNAUTHENTICATED` by a token that is valid. So a call with a
//! token no computer here has waits, at most [`WAIT`], for a change of the
//! index to bring it, then goes on to the usual check, which decides.
//! A token of a computer that moved away does not wait: its caller is told
//! where it went at once. Calls without a token are not delayed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::credentials::ClusterAuthorizer;
use super::index::Index;

/// Longest wait for an unknown token, well above the watch's usual delay
/// (milliseconds) and short enough that a wrong token is still refused
/// promptly.
pub const WAIT: Duration = Duration::from_secs(1);

/// The layer over the API service.
#[derive(Clone)]
pub struct AwaitCredentialLayer {
    auth: Arc<ClusterAuthorizer>,
    index: Arc<Index>,
    wait: Duration,
}

impl AwaitCredentialLayer {
    /// Waits up to `wait` for unknown tokens, watching `index`.
    pub fn new(auth: Arc<ClusterAuthorizer>, index: Arc<Index>, wait: Duration) -> Self {
        AwaitCredentialLayer { auth, index, wait }
    }
}

impl<S> tower::Layer<S> for AwaitCredentialLayer {
    type Service = AwaitCredential<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AwaitCredential {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`AwaitCredentialLayer`].
#[derive(Clone)]
pub struct AwaitCredential<S> {
    inner: S,
    layer: AwaitCredentialLayer,
}

/// The bearer token of a request's headers (RFC 6750 section 2.1).
fn bearer(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

impl<S, B> tower::Service<http::Request<B>> for AwaitCredential<S>
where
    S: tower::Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The service that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        let token = bearer(req.headers());
        Box::pin(async move {
            if let Some(token) = token
                && !layer.auth.knows(&token)
            {
                let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                if !layer.index.departed(&digest) {
                    layer
                        .index
                        .wait_until(|| layer.auth.knows(&token), layer.wait)
                        .await;
                }
            }
            inner.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::index::{Entry, SandboxInfo};
    use std::time::Instant;
    use tower::{Layer, Service, ServiceExt};

    fn entry(uid: &str, token: &str) -> Entry {
        Entry {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            credential: Some(Sha256::digest(token.as_bytes()).into()),
            sandbox: SandboxInfo::default(),
        }
    }

    fn request(token: &str) -> http::Request<()> {
        http::Request::builder()
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap()
    }

    fn service(
        index: &Arc<Index>,
        wait: Duration,
    ) -> impl Service<http::Request<()>, Response = Instant, Error = std::convert::Infallible> + Clone
    {
        let auth = Arc::new(ClusterAuthorizer::new(index.clone()));
        AwaitCredentialLayer::new(auth, index.clone(), wait).layer(tower::service_fn(
            |_req: http::Request<()>| async { Ok::<_, std::convert::Infallible>(Instant::now()) },
        ))
    }

    #[tokio::test]
    async fn a_token_that_arrives_with_the_watch_is_waited_for() {
        let index = Arc::new(Index::default());
        let svc = service(&index, Duration::from_secs(5));
        let started = Instant::now();
        let (passed_at, ()) = tokio::join!(svc.oneshot(request("new")), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            index.upsert(entry("c1", "new"));
        });
        let passed_at = passed_at.unwrap();
        let waited = passed_at - started;
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn known_and_absent_tokens_do_not_wait_and_unknown_ones_wait_the_limit() {
        let index = Arc::new(Index::default());
        index.upsert(entry("c1", "known"));
        let svc = service(&index, Duration::from_millis(300));
        let t = Instant::now();
        svc.clone().oneshot(request("known")).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(100));
        let t = Instant::now();
        svc.clone().oneshot(http::Request::new(())).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(100));
        let t = Instant::now();
        svc.clone().oneshot(request("wrong")).await.unwrap();
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_computer_that_moved_away_is_answered_at_once() {
        let index = Arc::new(Index::default());
        index.upsert(entry("c1", "gone"));
        index.depart("c1", "node-b");
        let svc = service(&index, Duration::from_secs(5));
        let t = Instant::now();
        svc.oneshot(request("gone")).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(500));
    }
}
