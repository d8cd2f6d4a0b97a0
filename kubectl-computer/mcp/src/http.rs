//! `mcp --listen ADDR`: the MCP streamable-HTTP transport (the `rmcp`
//! SDK's server) at `http://ADDR/mcp`, behind a bearer token.
//!
//! Every request must carry `Authorization: Bearer TOKEN` (RFC 6750); one
//! without it, or with another token, gets 401 with `WWW-Authenticate:
//! Bearer` before reaching the protocol. The token is read from
//! `--mcp-token-file`, or made here (32 random bytes, hex) and printed once
//! on stderr. The listener binds loopback unless `--allow-remote` is given;
//! the SDK's own `Host` check (against DNS rebinding) stays on for loopback.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq;

use crate::agent::Agent;
use crate::error::{Error, Result};
use crate::tools::Tools;

/// Path of the MCP endpoint on the listener.
pub const ENDPOINT_PATH: &str = "/mcp";

/// What `--listen` and its companions say.
pub struct Options {
    /// `PORT`, `HOST:PORT` or `[V6]:PORT`; `localhost` is 127.0.0.1.
    pub listen: String,
    /// File holding the token; `None` makes one.
    pub token_file: Option<PathBuf>,
    /// Whether an address other than loopback may be bound.
    pub allow_remote: bool,
}

/// The socket address `--listen` names: a bare port is on 127.0.0.1.
/// Errors: not a port or an address with a port; an address that is not
/// loopback without `allow_remote`.
pub fn listen_address(text: &str, allow_remote: bool) -> Result<SocketAddr> {
    let addr = if let Ok(port) = text.parse::<u16>() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    } else if let Some(port) = text.strip_prefix("localhost:") {
        let port = port
            .parse::<u16>()
            .map_err(|_| Error::new(format!("--listen {text:?}: bad port")))?;
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    } else {
        text.parse::<SocketAddr>().map_err(|_| {
            Error::new(format!(
                "--listen {text:?}: expected PORT, HOST:PORT or [IPV6]:PORT with an IP address or localhost"
            ))
        })?
    };
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(Error::new(format!(
            "--listen {addr}: not a loopback address; anyone who can reach it and has the token controls the computer. Add --allow-remote to serve it anyway (plain HTTP: put TLS in front)"
        )));
    }
    Ok(addr)
}

/// The `Host` names a loopback server answers to: `localhost`, the usual
/// loopback addresses and the one it is bound to.
fn allowed_hosts(bound: IpAddr) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
    let ip = bound.to_string();
    if !hosts.contains(&ip) {
        hosts.push(ip);
    }
    hosts
}

/// The bearer token: the file's text without surrounding whitespace, or a
/// new random one (`generated` true). Errors: the file cannot be read, is
/// empty, or holds characters a header cannot carry.
pub fn token(file: Option<&std::path::Path>) -> Result<(String, bool)> {
    let Some(file) = file else {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        return Ok((hex, true));
    };
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::new(format!(
            "cannot read the MCP token file {}: {e}",
            file.display()
        ))
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::new(format!(
            "the MCP token file {} is empty",
            file.display()
        )));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::new(format!(
            "the MCP token file {} holds characters a header cannot carry (spaces, control or non-ASCII)",
            file.display()
        )));
    }
    for warning in token_file_warnings(file, token) {
        errln(format_args!("warning: {warning}"));
    }
    Ok((token.to_string(), false))
}

/// The shortest token that is not flagged as guessable: 128 bits as hex.
const SHORT_TOKEN: usize = 32;

/// What is weak about a token file (served anyway; the operator chose it):
/// a file that other users may read, or a token shorter than
/// [`SHORT_TOKEN`] characters.
fn token_file_warnings(file: &std::path::Path, token: &str) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut warnings = Vec::new();
    if let Ok(meta) = std::fs::metadata(file)
        && meta.permissions().mode() & 0o077 != 0
    {
        warnings.push(format!(
            "the MCP token file {} is readable by other users (mode {:o}); chmod 600 it",
            file.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    if token.len() < SHORT_TOKEN {
        warnings.push(format!(
            "the MCP token in {} has {} characters; use at least {SHORT_TOKEN} random ones (openssl rand -hex 16)",
            file.display(),
            token.len()
        ));
    }
    warnings
}

/// Whether `request` carries `Authorization: Bearer <expected>`; the
/// comparison takes the same time wherever the tokens differ.
fn authorized(request: &Request, expected: &str) -> bool {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let Some((scheme, given)) = value.split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && bool::from(given.trim().as_bytes().ct_eq(expected.as_bytes()))
}

/// The token check in front of the MCP service.
async fn require_token(
    State(expected): State<Arc<String>>,
    request: Request,
    next: Next,
) -> Response {
    if authorized(&request, &expected) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "missing or wrong bearer token\n",
    )
        .into_response()
}

/// The streamable-HTTP MCP service over `agent`'s tools, each session
/// its own [`Tools`], without authentication (the caller's router checks
/// the bearer token in front of it). `allowed_hosts`: the `Host` names it
/// answers to (DNS-rebinding guard of a loopback server), or `None` for a
/// server reached under names it cannot know, guarded by its token. Its
/// sessions end when `stop` is cancelled.
pub fn service(
    agent: Arc<Agent>,
    allowed_hosts: Option<Vec<String>>,
    stop: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<Tools, LocalSessionManager> {
    // The same largest message as over stdio (16 MiB, not the SDK's 4 MiB
    // for HTTP), so a large `write` works on both, and an `exec` over the
    // agent's limit reaches the tool and gets its E2BIG with advice.
    let mut config =
        StreamableHttpServerConfig::default().with_max_request_body_bytes(crate::stdio::MAX_LINE);
    config.cancellation_token = stop;
    config = match allowed_hosts {
        Some(hosts) => config.with_allowed_hosts(hosts),
        None => config.disable_allowed_hosts(),
    };
    StreamableHttpService::new(
        move || Ok(Tools::new(agent.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Serves until `shutdown` completes (the CLI's: SIGINT, SIGTERM or
/// SIGHUP), then ends the sessions and returns. Prints on stderr the
/// endpoint URL and, when it made the token, the token (once). Errors,
/// before serving: the listen address is refused or taken, the token file
/// cannot be read.
pub async fn serve(
    agent: Agent,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = listen_address(&options.listen, options.allow_remote)?;
    let (token, generated) = token(options.token_file.as_deref())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::new(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::new(format!("cannot listen on {addr}: {e}")))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let hosts = if options.allow_remote {
        // Clients name this host however they reach it; the token guards it.
        None
    } else {
        // The `Host` check guards a loopback server against DNS rebinding;
        // it must also accept the loopback address the server was told to
        // use (any of 127.0.0.0/8), which is how its clients name it.
        Some(allowed_hosts(bound.ip()))
    };
    let service = service(Arc::new(agent), hosts, stop.child_token());
    let app = axum::Router::new()
        .nest_service(ENDPOINT_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(token.clone()),
            require_token,
        ));
    errln(format_args!("MCP endpoint: http://{bound}{ENDPOINT_PATH}"));
    if generated {
        errln(format_args!("MCP bearer token (shown once): {token}"));
    }
    let shutdown = async move {
        shutdown.await;
        stop.cancel();
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::new(format!("MCP over HTTP: {e}")))
}

/// One line on stderr; a closed stderr is not a failure.
fn errln(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            listen_address("8080", false).unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            listen_address("localhost:0", false).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(listen_address("[::1]:9", false).is_ok());
        let err = listen_address("0.0.0.0:8080", false).unwrap_err().message;
        assert!(err.contains("--allow-remote"), "{err}");
        assert!(listen_address("0.0.0.0:8080", true).is_ok());
        assert!(listen_address("example.com:80", true).is_err());
    }

    #[test]
    fn tokens() {
        let (a, generated) = token(None).unwrap();
        assert!(generated);
        assert_eq!(a.len(), 64);
        assert_ne!(a, token(None).unwrap().0);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, " s3cret\n").unwrap();
        assert_eq!(token(Some(&f)).unwrap(), ("s3cret".to_string(), false));
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
            let w = token_file_warnings(&f, "s3cret");
            assert_eq!(w.len(), 2, "{w:?}");
            assert!(
                w[0].contains("mode 644") && w[1].contains("6 characters"),
                "{w:?}"
            );
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert!(token_file_warnings(&f, &"a".repeat(SHORT_TOKEN)).is_empty());
        }
        std::fs::write(&f, "\n").unwrap();
        assert!(token(Some(&f)).unwrap_err().message.contains("empty"));
        std::fs::write(&f, "a b").unwrap();
        assert!(token(Some(&f)).is_err());
        assert!(token(Some(&dir.path().join("none"))).is_err());
    }

    #[test]
    fn bearer_check() {
        let req = |value: Option<&str>| {
            let mut b = Request::builder();
            if let Some(v) = value {
                b = b.header(header::AUTHORIZATION, v);
            }
            b.body(axum::body::Body::empty()).unwrap()
        };
        assert!(authorized(&req(Some("Bearer tok")), "tok"));
        assert!(authorized(&req(Some("bearer tok")), "tok"));
        assert!(!authorized(&req(Some("Bearer tok2")), "tok"));
        assert!(!authorized(&req(Some("Basic tok")), "tok"));
        assert!(!authorized(&req(None), "tok"));
    }
}
