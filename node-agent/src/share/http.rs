//! The share server: answers `GET` and `HEAD` of share links over HTTP/1.1
//! (axum), streaming the file from the computer's engine.
//!
//! A request is checked before any file is touched: a link that is not of
//! the link's form, whose signature does not check out with the
//! computer's current key (tampered, or revoked by deleting the computer
//! or rotating its credential; an unknown computer looks the same, so a
//! link reveals nothing about which computers exist) or whose expiry has
//! passed gets `403 Forbidden` with a one-line reason. Then:
//! * `200 OK` with the whole file, or `206 Partial Content` with one byte
//!   range and `Content-Range` (RFC 9110 section 14; several ranges are
//!   answered with the whole file, as section 14.2 allows), or `416 Range
//!   Not Satisfiable` with `Content-Range: bytes */SIZE`;
//! * `Content-Type` guessed from the file name's extension (`mime_guess`,
//!   `application/octet-stream` when unknown), `Content-Disposition:
//!   attachment` with the file's name (RFC 6266, `filename*` in UTF-8 as
//!   RFC 8187 encodes it), `Accept-Ranges: bytes`, `Cache-Control:
//!   no-store` (a link is a credential), `X-Content-Type-Options: nosniff`;
//! * `404 Not Found` when the path no longer names a regular file;
//! * `503 Service Unavailable` with `Retry-After` when
//!   [`super::ShareConfig::max_downloads`] downloads are running, or the
//!   computer's share of them ([`super::slots`]).
//!
//! The body is read from the engine in pieces of [`PIECE`] bytes with at
//! most one piece queued ahead of the client, so a download holds at most
//! a few hundred KiB whatever the file's size. If the file changes while
//! it is sent (its data version moves on), the client takes nothing for
//! [`super::ShareConfig::idle_timeout`], or it receives less than
//! [`super::ShareConfig::min_rate`] over a window ([`super::pace`]), the body ends
//! early with an error: the connection is closed before `Content-Length`
//! bytes, so a client never mistakes a mix of two versions for the file,
//! and the download's slot is free again.

use std::io;

use agentcomputer_fs::{FileKind, ROOT_INO};
use axum::Extension;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::pace::Pace;
use super::range::{self, Plan};
use super::slots::Busy;
use super::{ROUTE, Sharer, now_unix_seconds};
use crate::blocking::blocking;
use crate::gate::{GatedListener, Ticket};
use crate::paths::ApiPath;
use crate::registry::RegistryError;

/// Largest piece read from the engine and sent at once, in bytes.
pub const PIECE: usize = 256 * 1024;

/// Reason of a link that is malformed, tampered with or revoked, or of an
/// unknown computer: one answer for all, so it reveals nothing.
pub const INVALID: &str = "invalid or revoked link";
/// Reason of a genuine link past its expiry.
pub const EXPIRED: &str = "link expired";

/// The routes of `sharer`, under the path of its base URL.
pub fn router(sharer: Sharer) -> Router {
    let prefix = sharer
        .config()
        .base_url
        .path()
        .trim_end_matches('/')
        .to_string();
    let route = format!("{prefix}/{}/{{computer}}/{{*path}}", ROUTE.join("/"));
    Router::new()
        .route(&route, get(download))
        .fallback(|| async { forbidden(INVALID) })
        .with_state(sharer)
}

/// Serves `sharer`'s links on `listener` until `stop`, behind a gate
/// ([`crate::gate`], bounds from [`super::ShareConfig::gate`]): a
/// connection counts as authenticated once a link it asked for checked
/// out.
pub async fn serve(
    listener: TcpListener,
    sharer: Sharer,
    stop: CancellationToken,
) -> io::Result<()> {
    let gated = GatedListener::new(listener, sharer.config().gate, "share");
    let app = router(sharer).into_make_service_with_connect_info::<Ticket>();
    axum::serve(gated, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

#[derive(serde::Deserialize)]
struct LinkQuery {
    expires: Option<String>,
    sig: Option<String>,
}

fn plain(status: StatusCode, reason: &str) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from(format!("{reason}\n")))
        .expect("static headers are valid")
}

fn forbidden(reason: &str) -> Response {
    plain(StatusCode::FORBIDDEN, reason)
}

async fn download(
    State(sharer): State<Sharer>,
    ticket: Option<Extension<ConnectInfo<Ticket>>>,
    Path((computer, path)): Path<(String, String)>,
    Query(query): Query<LinkQuery>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let (Some(expires), Some(sig)) = (query.expires, query.sig) else {
        return forbidden(INVALID);
    };
    // Digits only: `+5` or `05` would sign differently from what was made.
    let Some(expires) = expires
        .parse::<i64>()
        .ok()
        .filter(|e| *e >= 0 && e.to_string() == expires)
    else {
        return forbidden(INVALID);
    };
    let key = match sharer.key(&computer, false).await {
        Ok(Some(key)) => key,
        Ok(None) | Err(RegistryError::InvalidName(_) | RegistryError::NotFound(_)) => {
            return forbidden(INVALID);
        }
        Err(e) => {
            warn!(error = %e, "cannot read a share key");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "cannot check the link");
        }
    };
    if !key.verify(&computer, expires, &path, &sig) {
        return forbidden(INVALID);
    }
    // A genuine link, even an expired one: its holder is no stranger.
    if let Some(Extension(ConnectInfo(ticket))) = &ticket {
        ticket.authenticated();
    }
    if now_unix_seconds() >= expires {
        return forbidden(EXPIRED);
    }
    let Ok(api_path) = ApiPath::parse(&path) else {
        return forbidden(INVALID);
    };
    let permit = match sharer.inner.downloads.take(&computer) {
        Ok(slot) => slot,
        Err(busy) => {
            let why = match busy {
                Busy::Computer => "too many downloads of this computer's links; retry later",
                Busy::Agent => "too many downloads; retry later",
            };
            let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, why);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
    };
    let lease = match sharer.inner.registry.acquire(&computer).await {
        Ok(lease) => lease,
        // Deleted since the key was read.
        Err(RegistryError::NotFound(_)) => return forbidden(INVALID),
        Err(e) => {
            warn!(error = %e, "cannot open a shared computer");
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot open the computer",
            );
        }
    };
    let fs = lease.fs().clone();
    let engine_path = api_path.engine_path();
    let opened = blocking(move || fs.open_path(ROOT_INO, &engine_path, true)).await;
    let (attr, handle) = match opened {
        Ok((attr, handle)) if attr.kind == FileKind::RegularFile => (attr, handle),
        Ok(_) => return plain(StatusCode::NOT_FOUND, "not a regular file"),
        Err(e) if e.errno() == nix::errno::Errno::ENOENT => {
            return plain(StatusCode::NOT_FOUND, "file not found");
        }
        Err(e) => {
            return plain(
                StatusCode::NOT_FOUND,
                &format!("cannot open the file: {}", e.errno_name()),
            );
        }
    };
    let size = attr.size;
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("\u{0}invalid"))
    };
    let plan = range::plan(
        text(header::RANGE),
        headers.contains_key(header::IF_RANGE),
        size,
    );
    let name = api_path.components().last().cloned().unwrap_or_default();
    let mut response = Response::builder()
        .header(
            header::CONTENT_TYPE,
            mime_guess::from_path(&name)
                .first_or_octet_stream()
                .as_ref(),
        )
        .header(header::CONTENT_DISPOSITION, content_disposition(&name))
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CACHE_CONTROL, "private, no-store")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer");
    let (start, len) = match plan {
        Plan::Full => {
            response = response.status(StatusCode::OK);
            (0, size)
        }
        Plan::Part { start, end } => {
            response = response
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"));
            (start, end - start + 1)
        }
        Plan::Unsatisfiable => {
            let mut r = plain(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("digits"),
            );
            return r;
        }
    };
    response = response.header(header::CONTENT_LENGTH, len);
    if method == Method::HEAD || len == 0 {
        return response.body(Body::empty()).expect("headers are valid");
    }
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(1);
    let pace = Pace {
        min_rate: sharer.inner.config.min_rate,
        window: super::pace::WINDOW,
    };
    let idle = sharer.inner.config.idle_timeout;
    let ticket = ticket.map(|Extension(ConnectInfo(t))| t);
    debug!(computer = %computer, path = %path, start, len, "share download");
    tokio::spawn(async move {
        // Held until the body is sent: the computer stays open, the inode
        // alive, and the download counted.
        let _keep = (permit, handle);
        let send = async {
            let end = start + len;
            let mut offset = start;
            let mut version = None;
            while offset < end {
                let want = (end - offset).min(PIECE as u64) as usize;
                let fs = lease.fs().clone();
                let read = blocking(move || fs.read_versioned(attr.ino, offset, want)).await;
                let item = match read {
                    Ok((_, now)) if version.is_some_and(|v| v != now) => {
                        Err(io::Error::other("the file changed while it was sent"))
                    }
                    Ok((data, _)) if data.len() < want => {
                        Err(io::Error::other("the file shrank while it was sent"))
                    }
                    Ok((data, now)) => {
                        version = Some(now);
                        offset += data.len() as u64;
                        Ok(Bytes::from(data))
                    }
                    Err(e) => Err(io::Error::other(e.to_string())),
                };
                let failed = item.is_err();
                if failed {
                    warn!(computer = %computer, path = %path, offset, error = ?item.as_ref().err(), "share download ended early");
                }
                match tokio::time::timeout(idle, tx.send(item)).await {
                    Ok(Ok(())) if !failed => {}
                    _ => return, // ended, client gone, or idle
                }
            }
        };
        let behind = pace.fallen_behind(|| ticket.as_ref().and_then(Ticket::bytes_acked));
        tokio::select! {
            () = send => {}
            () = behind => {
                // Reset, not closed: what the buffers hold would otherwise
                // trickle out to the slow reader for minutes.
                if let Some(t) = &ticket {
                    t.reset();
                }
                debug!(computer = %computer, path = %path, min_rate = pace.min_rate, "share download ended: the client took less than the minimum rate");
            }
        }
    });
    response
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .expect("headers are valid")
}

/// RFC 8187 `attr-char`: what `filename*` may carry unencoded.
const ATTR_CHAR_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// `attachment; filename="ASCII"; filename*=UTF-8''ENCODED` for `name`
/// (RFC 6266 section 4.3: the plain `filename` for old clients, with
/// everything but printable ASCII other than `"` and `\` replaced by `_`,
/// and the exact name in `filename*`).
pub fn content_disposition(name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let exact = utf8_percent_encode(name, ATTR_CHAR_ESCAPED);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispositions() {
        assert_eq!(
            content_disposition("report.pdf"),
            "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
        );
        assert_eq!(
            content_disposition("naïve \"q\".txt"),
            "attachment; filename=\"na_ve _q_.txt\"; filename*=UTF-8''na%C3%AFve%20%22q%22.txt"
        );
    }
}
