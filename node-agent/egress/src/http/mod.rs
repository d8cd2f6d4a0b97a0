//! An HTTP/1.1 client (http and https) that only talks to destinations the
//! egress policy allows, for the runtimes' network commands and `fetch`.

mod client;
mod error;
mod raw_head;
mod redirect;
mod tls;

pub use client::{Limits, Request, Response, send};
pub use error::HttpError;
pub use redirect::follow;

use crate::policy::Policy;

/// Sends `req` and follows up to `max_redirects` redirects, each hop
/// checked against `policy` before it connects. Returns the final
/// response and how many redirects were followed. Errors: those of
/// [`send`], and [`HttpError::TooManyRedirects`].
pub async fn send_following(
    policy: &Policy,
    req: Request,
    limits: Limits,
    max_redirects: usize,
) -> Result<(Response, usize), HttpError> {
    let mut req = req;
    let mut hops = 0;
    loop {
        let resp = send(policy, &req, limits).await?;
        let Some(next) = follow(&req, &resp) else {
            return Ok((resp, hops));
        };
        if hops == max_redirects {
            return Err(HttpError::TooManyRedirects(max_redirects));
        }
        drop(resp);
        req = next?;
        hops += 1;
    }
}
