//! The page and the calls it makes: a run in one runtime, streamed as
//! NDJSON; one directory of the file tree; a file's first MiB for its
//! preview.

use std::sync::Arc;

use agentcomputer_proto::v1 as pb;
use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tokio_stream::wrappers::ReceiverStream;

use super::Ui;

/// The page: HTML, styles and script in one file, no outside resource.
const PAGE: &str = include_str!("page.html");

/// Most bytes of a file shown in its preview.
const PREVIEW_BYTES: u64 = 1 << 20;

/// Most entries of one directory listed in the tree.
const TREE_ENTRIES: usize = 2000;

pub(super) fn router(ui: Arc<Ui>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/config", get(config))
        .route("/api/run", post(run))
        .route("/api/tree", get(tree))
        .route("/api/file", get(file))
        .layer(middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Refuses a request under a foreign `Host` (421) and, but for the page
/// itself, one without the token (401).
async fn guard(State(ui): State<Arc<Ui>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !ui.hosts.iter().any(|h| h == host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this page is served under its own address only",
        );
    }
    if req.uri().path() != "/" && !holds_token(&ui, req.headers(), req.uri().query()) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: open the URL `kubectl computer ui` printed",
        );
    }
    next.run(req).await
}

fn holds_token(ui: &Ui, headers: &HeaderMap, query: Option<&str>) -> bool {
    let given = headers
        .get("x-ui-token")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| query_param(query.unwrap_or(""), "token"));
    given.is_some_and(|t| bool::from(t.as_bytes().ct_eq(ui.token.as_bytes())))
}

/// The value of `name` in a query string, as given (the token is hex:
/// nothing to decode).
fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

fn status_response(s: &tonic::Status) -> Response {
    let code = match s.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => StatusCode::FORBIDDEN,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::BAD_GATEWAY,
    };
    refuse(code, s.message())
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self'; connect-src 'self'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
        .into_response()
}

async fn config(State(ui): State<Arc<Ui>>) -> Response {
    axum::Json(serde_json::json!({ "computer": ui.computer })).into_response()
}

/// `POST /api/run`: `{"computer", "runtime", "script"}`.
#[derive(Deserialize)]
struct RunRequest {
    computer: String,
    runtime: String,
    script: String,
}

/// One line of a run's NDJSON answer.
#[derive(Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum RunEvent {
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Exit {
        code: i32,
        error: String,
        duration_ms: u64,
        runtime: String,
        /// JavaScript: the JSON of the module's returned value.
        result_json: String,
    },
    Error {
        message: String,
    },
}

fn runtime(name: &str) -> Option<pb::Runtime> {
    Some(match name {
        "shell" => pb::Runtime::Shell,
        "javascript" => pb::Runtime::Javascript,
        "container" => pb::Runtime::Container,
        _ => return None,
    })
}

/// Runs the script and streams its events as they come. The browser
/// closing the request drops the stream, which cancels the run.
async fn run(State(ui): State<Arc<Ui>>, axum::Json(req): axum::Json<RunRequest>) -> Response {
    let Some(rt) = runtime(&req.runtime) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "runtime must be shell, javascript or container",
        );
    };
    let (mut client, computer) = match ui.backend.client(req.computer).await {
        Ok(c) => c,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let call = pb::ExecRequest {
        computer,
        runtime: rt as i32,
        script: req.script,
        ..Default::default()
    };
    let mut stream = match client.exec(call).await {
        Ok(s) => s.into_inner(),
        Err(s) => return status_response(&s),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    tokio::spawn(async move {
        loop {
            // The browser going away ends the call (and so the run) even
            // while the run prints nothing.
            let next = tokio::select! {
                next = stream.message() => next,
                () = tx.closed() => break,
            };
            let event = match next {
                Ok(Some(ev)) => match ev.event {
                    Some(pb::exec_event::Event::Stdout(b)) => RunEvent::Stdout {
                        data: String::from_utf8_lossy(&b).into_owned(),
                    },
                    Some(pb::exec_event::Event::Stderr(b)) => RunEvent::Stderr {
                        data: String::from_utf8_lossy(&b).into_owned(),
                    },
                    Some(pb::exec_event::Event::Exit(e)) => RunEvent::Exit {
                        code: e.code,
                        error: e.error,
                        duration_ms: e.duration_ms,
                        runtime: e.runtime,
                        result_json: e.result_json,
                    },
                    None => continue,
                },
                Ok(None) => break,
                Err(s) => RunEvent::Error {
                    message: s.message().to_string(),
                },
            };
            let end = matches!(event, RunEvent::Exit { .. } | RunEvent::Error { .. });
            let mut line = serde_json::to_string(&event).expect("events serialize");
            line.push('\n');
            if tx.send(Ok(line)).await.is_err() || end {
                break;
            }
        }
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response()
}

#[derive(Deserialize)]
struct PathQuery {
    computer: String,
    #[serde(default)]
    path: String,
}

#[derive(Serialize)]
struct TreeEntry {
    name: String,
    kind: &'static str,
    size: u64,
}

fn kind_name(kind: i32) -> &'static str {
    match pb::FileKind::try_from(kind) {
        Ok(pb::FileKind::Directory) => "dir",
        Ok(pb::FileKind::Symlink) => "symlink",
        Ok(pb::FileKind::Regular) => "file",
        _ => "other",
    }
}

/// `GET /api/tree?computer=C&path=P`: the entries of one directory,
/// directories first, then by name.
async fn tree(State(ui): State<Arc<Ui>>, Query(q): Query<PathQuery>) -> Response {
    let (mut client, computer) = match ui.backend.client(q.computer).await {
        Ok(c) => c,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let path = if q.path.is_empty() {
        ".".to_string()
    } else {
        q.path
    };
    let listed =
        agentcomputer_mcp::calls::files::list_dir(&mut client, computer, path, true, TREE_ENTRIES)
            .await;
    let (entries, truncated) = match listed {
        Ok(l) => l,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let mut out: Vec<TreeEntry> = entries
        .into_iter()
        .map(|e| TreeEntry {
            kind: kind_name(e.kind),
            size: e.info.map(|i| i.size).unwrap_or(0),
            name: e.name,
        })
        .collect();
    out.sort_by(|a, b| (a.kind != "dir", &a.name).cmp(&(b.kind != "dir", &b.name)));
    axum::Json(serde_json::json!({ "entries": out, "truncated": truncated })).into_response()
}

/// The type a preview is served as: images as themselves, everything else
/// as plain text (never HTML, which would run in the page's origin).
fn preview_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("svg") => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    }
}

/// `GET /api/file?computer=C&path=P`: the file's first MiB.
async fn file(State(ui): State<Arc<Ui>>, Query(q): Query<PathQuery>) -> Response {
    let (mut client, computer) = match ui.backend.client(q.computer).await {
        Ok(c) => c,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let mut stream = match client
        .read(pb::ReadRequest {
            computer,
            path: q.path.clone(),
            offset: 0,
            length: PREVIEW_BYTES,
        })
        .await
    {
        Ok(s) => s.into_inner(),
        Err(s) => return status_response(&s),
    };
    let mut data = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(chunk)) => data.extend_from_slice(&chunk.data),
            Ok(None) => break,
            Err(s) => return status_response(&s),
        }
    }
    (
        [
            (header::CONTENT_TYPE, preview_type(&q.path)),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // Opened on its own, an SVG's scripts must not run here.
            (
                header::CONTENT_SECURITY_POLICY,
                "sandbox; default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        data,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_images_or_text() {
        assert_eq!(preview_type("a/chart.PNG"), "image/png");
        assert_eq!(preview_type("index.html"), "text/plain; charset=utf-8");
        assert_eq!(preview_type("noext"), "text/plain; charset=utf-8");
    }

    #[test]
    fn only_known_runtimes() {
        assert_eq!(runtime("container"), Some(pb::Runtime::Container));
        assert_eq!(runtime("auto"), None);
    }
}
