//! Connecting to a node agent: the endpoint, TLS, and the token sent with
//! every call by the [`Bearer`] interceptor, over a TCP connection to a URL
//! ([`connect`]) or over a channel opened elsewhere ([`over`], as cluster
//! mode's port-forwards do).
//!
//! For a URL, the token is found in the order [`crate::target`] documents:
//! `--token` / `AGENTCOMPUTER_TOKEN`, the file `--token-file` /
//! `AGENTCOMPUTER_TOKEN_FILE`, and, for an endpoint on this machine (a
//! loopback address or `localhost`), the file `token` of the local agent's
//! data directory ([`crate::target::default_data_dir`]).

use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

pub use agentcomputer_mcp::client::{Bearer, Client, over};

use crate::error::{CliError, Result};
use crate::target::{TOKEN_FILE, TargetArgs};

/// Endpoint used when neither `--endpoint` nor `AGENTCOMPUTER_ENDPOINT` is set.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7433";

/// Connects to the node agent at `url` (`http://` or `https://`) with the
/// token and CA of `args`; `data_dir` is the local agent's data directory,
/// whose token file is read for an endpoint on this machine when `args`
/// gives no token. Errors, one line each: a malformed URL; a token that cannot be
/// read (`no token readable at PATH: permission denied — the agent belongs
/// to another user`); a CA file without certificates; the agent is
/// unreachable (`cannot connect to node agent at URL: connection refused
/// (start one with: node-agent local)`) or its certificate is not trusted.
pub async fn connect(url: &str, args: &TargetArgs, data_dir: Option<&Path>) -> Result<Client> {
    let url = &with_scheme(url, args.ca_cert.is_some());
    crate::error::set_endpoint(url);
    let uri: http::Uri = url
        .parse()
        .map_err(|e| CliError::new(format!("invalid endpoint {url:?}: {e}")))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(CliError::new(format!(
                "invalid endpoint {url:?}: it must start with http:// or https://"
            )));
        }
    };
    let host = uri.host().unwrap_or_default();
    let local = is_local_host(host);
    let token = find_token(args, data_dir.filter(|_| local))?;
    if token.is_some() && !https && !local {
        errln!("warning: sending the agent token unencrypted to {url}; use an https:// endpoint");
    }
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| CliError::new(format!("invalid endpoint {url:?}: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    if https {
        endpoint = endpoint
            .tls_config(tls_config(
                args.ca_cert.as_deref(),
                args.tls_server_name.as_deref(),
            )?)
            .map_err(|e| CliError::new(format!("cannot set up TLS for {url}: {e}")))?;
    }
    let channel = endpoint.connect().await.map_err(|e| {
        let checked = args.tls_server_name.as_deref().unwrap_or(host);
        let why = match tls_failure(&e, checked) {
            Some(why) => why,
            None => format!("{} (start one with: node-agent local)", root_cause(&e)),
        };
        CliError::new(format!("cannot connect to node agent at {url}: {why}"))
    })?;
    let bearer = match token {
        Some(t) => Bearer::new(&t.text, &t.source)?,
        None => Bearer::none(),
    };
    Ok(over(channel, bearer))
}

/// `url` with a scheme: `HOST:PORT` as printed by the operator's status and
/// by `node-agent` (`listening on 127.0.0.1:7433`) becomes `http://HOST:PORT`,
/// or `https://HOST:PORT` when a CA certificate was given. A URL with a
/// scheme is kept as it is.
pub fn with_scheme(url: &str, tls: bool) -> String {
    if url.contains("://") {
        url.to_string()
    } else if tls {
        format!("https://{url}")
    } else {
        format!("http://{url}")
    }
}

/// A token and where it came from (for messages).
#[derive(Debug, PartialEq, Eq)]
struct Token {
    text: String,
    source: String,
}

/// The token to send, found as the module documentation says; `None` when
/// there is none to send. `data_dir`: the local agent's data directory, for
/// an endpoint on this machine only.
fn find_token(args: &TargetArgs, data_dir: Option<&Path>) -> Result<Option<Token>> {
    if let Some(t) = args
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        return Ok(Some(Token {
            text: t.to_string(),
            source: "--token / AGENTCOMPUTER_TOKEN".into(),
        }));
    }
    if let Some(file) = &args.token_file {
        return match read_token(file) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(CliError::new(format!(
                "no token readable at {}: permission denied",
                file.display()
            ))),
            Err(e) => Err(CliError::new(format!(
                "cannot read token file {} (AGENTCOMPUTER_TOKEN_FILE): {}",
                file.display(),
                io_text(&e)
            ))),
        };
    }
    let Some(data_dir) = data_dir else {
        return Ok(None);
    };
    let file = data_dir.join(TOKEN_FILE);
    match read_token(&file) {
        Ok(t) => Ok(Some(t)),
        // No local agent has run with this data directory: send nothing,
        // the agent's refusal says how to find its token.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(CliError::new(format!(
            "no token readable at {}: permission denied — the agent belongs to another user",
            file.display()
        ))),
        Err(e) => Err(CliError::new(format!(
            "cannot read the agent token {}: {}",
            file.display(),
            io_text(&e)
        ))),
    }
}

/// Reads a token file: its text without surrounding whitespace. An empty
/// file is `InvalidData`.
fn read_token(path: &Path) -> io::Result<Token> {
    let text = std::fs::read_to_string(path)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the file is empty",
        ));
    }
    Ok(Token {
        text: text.to_string(),
        source: path.display().to_string(),
    })
}

/// Whether `host` (a URI host, IPv6 in brackets) names this machine: a
/// loopback address or `localhost`.
fn is_local_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// TLS settings: trust the certificates in `ca_cert`, or the platform's
/// roots; check the agent's certificate against `server_name` when given
/// (else the endpoint's host). Errors: the file cannot be read or holds no
/// PEM certificate.
fn tls_config(ca_cert: Option<&Path>, server_name: Option<&str>) -> Result<ClientTlsConfig> {
    let mut config = ClientTlsConfig::new();
    if let Some(name) = server_name {
        config = config.domain_name(name);
    }
    let Some(path) = ca_cert else {
        return Ok(config.with_native_roots());
    };
    let pem = std::fs::read(path).map_err(|e| {
        CliError::new(format!(
            "cannot read CA certificate {} (--ca-cert / AGENTCOMPUTER_CA_CERT): {}",
            path.display(),
            io_text(&e)
        ))
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            CliError::new(format!(
                "CA certificate {} is not valid PEM: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(CliError::new(format!(
            "no certificate (-----BEGIN CERTIFICATE-----) in CA certificate file {}",
            path.display()
        )));
    }
    Ok(config.ca_certificate(Certificate::from_pem(pem)))
}

/// A one-line explanation of a failed TLS handshake, if `err` is one.
fn tls_failure(err: &tonic::transport::Error, host: &str) -> Option<String> {
    use rustls::CertificateError as C;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let tls = loop {
        let e = cause?;
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            break t;
        }
        if let Some(t) = e
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            break t;
        }
        cause = e.source();
    };
    const TRUST: &str = "pass the CA's certificate with --ca-cert PEM or AGENTCOMPUTER_CA_CERT";
    Some(match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => format!(
                "the agent's TLS certificate is not signed by a trusted certificate authority ({TRUST})"
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                format!("the agent's TLS certificate is not valid for host {host}")
            }
            C::Expired | C::ExpiredContext { .. } => {
                "the agent's TLS certificate has expired".to_string()
            }
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the agent's TLS certificate is not valid yet".to_string()
            }
            other => format!("the agent's TLS certificate is not acceptable: {other:?}"),
        },
        rustls::Error::InvalidMessage(_) => {
            "the agent did not answer in TLS (is it serving plain http://?)".to_string()
        }
        other => format!("TLS handshake failed: {other}"),
    })
}

/// The text of an I/O error without its OS error code, lowercase first.
fn io_text(err: &io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    lowercase_first(text)
}

/// The innermost cause, which names what really went wrong (for example
/// "connection refused"), with an OS error code stripped.
pub fn root_cause(err: &tonic::transport::Error) -> String {
    let mut cause: &dyn std::error::Error = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if let Some(io) = cause.downcast_ref::<io::Error>() {
        return io_text(io);
    }
    lowercase_first(&cause.to_string())
}

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_without_a_scheme() {
        assert_eq!(
            with_scheme("127.0.0.1:7533", false),
            "http://127.0.0.1:7533"
        );
        assert_eq!(with_scheme("10.0.0.5:7433", true), "https://10.0.0.5:7433");
        assert_eq!(with_scheme("https://a:1", false), "https://a:1");
        assert_eq!(with_scheme("http://a:1", true), "http://a:1");
    }

    #[test]
    fn local_hosts() {
        for h in ["127.0.0.1", "127.1.2.3", "[::1]", "localhost", "LOCALHOST"] {
            assert!(is_local_host(h), "{h}");
        }
        for h in ["10.0.0.1", "example.com", "[::2]", "0.0.0.0", ""] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn token_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "from-file\n").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join(TOKEN_FILE), "from-data-dir\n").unwrap();
        let flag = TargetArgs {
            token: Some("from-flag".into()),
            token_file: Some(file.clone()),
            ..TargetArgs::default()
        };
        assert_eq!(
            find_token(&flag, Some(&data)).unwrap().unwrap().text,
            "from-flag"
        );
        let from_file = TargetArgs {
            token: Some("  ".into()),
            token_file: Some(file.clone()),
            ..TargetArgs::default()
        };
        let t = find_token(&from_file, Some(&data)).unwrap().unwrap();
        assert_eq!(t.text, "from-file");
        assert_eq!(t.source, file.display().to_string());
        // An endpoint on this machine: the local agent's token file.
        let t = find_token(&TargetArgs::default(), Some(&data))
            .unwrap()
            .unwrap();
        assert_eq!(t.text, "from-data-dir");
        // A remote endpoint gets no token unless one is given.
        assert_eq!(find_token(&TargetArgs::default(), None).unwrap(), None);
        // No local agent has run there: nothing to send.
        let fresh = dir.path().join("fresh");
        assert_eq!(
            find_token(&TargetArgs::default(), Some(&fresh)).unwrap(),
            None
        );

        let missing = TargetArgs {
            token_file: Some(dir.path().join("nope")),
            ..TargetArgs::default()
        };
        let err = find_token(&missing, None).unwrap_err().message;
        assert!(err.contains("cannot read token file"), "{err}");
        assert!(err.contains("nope"), "{err}");
        std::fs::write(&file, "\n").unwrap();
        let err = find_token(&from_file, None).unwrap_err().message;
        assert!(err.ends_with("the file is empty"), "{err}");
    }

    #[test]
    fn ca_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not pem").unwrap();
        let err = tls_config(Some(&f), None).unwrap_err().message;
        assert!(err.starts_with("no certificate"), "{err}");
        let err = tls_config(Some(&dir.path().join("none.pem")), None)
            .unwrap_err()
            .message;
        assert!(err.contains("cannot read CA certificate"), "{err}");
        assert!(err.ends_with("no such file or directory"), "{err}");
    }
}
