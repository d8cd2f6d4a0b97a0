//! `wget`: download one URL under the computer's egress policy, with GNU
//! Wget's common options (wget(1)) and exit statuses.
//!
//! Redirects are followed (each hop checked by the policy), as wget does.
//! One attempt only (`-t` is accepted and ignored); `-T` bounds the whole
//! transfer; no recursion, no `-c`, no proxies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::http::{HttpError, Limits, Request, Response, follow, send};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandOutput, CommandStatus};
use bytes::Bytes;
use http::Method;

use super::http::{
    Network, Sink, SinkError, Spec, parse_url, read_source, remote_name, resolve, seconds,
};
use super::ls_format::civil;

const USER_AGENT: &str = "Wget/1.21.4";
/// wget's default `--max-redirect`.
const MAX_REDIRECTS: usize = 20;
/// wget's default `--timeout` (900 s read timeout, wget(1)).
const TIMEOUT: Duration = Duration::from_secs(900);

const SPEC: Spec = Spec {
    short: &[
        ('q', "quiet"),
        ('O', "output-document"),
        ('S', "server-response"),
        ('T', "timeout"),
        ('t', "tries"),
        ('U', "user-agent"),
        ('P', "directory-prefix"),
        ('v', "verbose"),
    ],
    valued: &[
        "output-document",
        "timeout",
        "connect-timeout",
        "read-timeout",
        "dns-timeout",
        "tries",
        "user-agent",
        "header",
        "post-data",
        "post-file",
        "method",
        "body-data",
        "body-file",
        "max-redirect",
        "directory-prefix",
        "user",
        "password",
        "http-user",
        "http-password",
    ],
    flags: &[
        "quiet",
        "server-response",
        "no-check-certificate",
        "no-verbose",
        "verbose",
        "spider",
        "content-on-error",
        "auth-no-challenge",
        "no-clobber",
    ],
};

/// The `wget` command of one exec.
pub(crate) struct Wget {
    network: Arc<Network>,
}

impl Wget {
    pub(crate) fn new(network: Arc<Network>) -> Wget {
        Wget { network }
    }
}

struct Job {
    request: Request,
    output: Option<String>,
    prefix: Option<String>,
    verbosity: Verbosity,
    show_headers: bool,
    spider: bool,
    content_on_error: bool,
    max_redirects: usize,
    limits: Limits,
}

/// How a download went wrong, with wget's exit status.
enum Failure {
    Http(HttpError),
    /// A status of 400 or more (exit 8).
    Status(u16, String),
    /// A local file could not be written (exit 3).
    Write(String),
    Fatal(bashkit::Error),
}

impl From<HttpError> for Failure {
    fn from(e: HttpError) -> Failure {
        Failure::Http(e)
    }
}

impl From<SinkError> for Failure {
    fn from(e: SinkError) -> Failure {
        match e {
            SinkError::Write(m) => Failure::Write(m),
            SinkError::Fatal(e) => Failure::Fatal(e),
        }
    }
}

#[async_trait]
impl Command for Wget {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let job = match self.job(&ctx).await {
            Ok(job) => job,
            Err((code, message)) => {
                say(&ctx.stderr, &format!("wget: {message}\n")).await?;
                return Ok(CommandStatus::with_code(code));
            }
        };
        let log = Log {
            out: ctx.stderr.clone(),
            verbosity: job.verbosity,
        };
        let (code, message) = match download(&self.network, &job, &ctx, &log).await {
            Ok(()) => return Ok(CommandStatus::success()),
            Err(Failure::Fatal(e)) => return Err(e),
            Err(Failure::Http(e)) => (e.wget_code(), format!("wget: {e}\n")),
            Err(Failure::Status(code, reason)) => (8, format!("ERROR {code}: {reason}.\n")),
            Err(Failure::Write(m)) => (3, format!("wget: cannot write to file: {m}\n")),
        };
        if log.verbosity != Verbosity::Quiet {
            say(&ctx.stderr, &message).await?;
        }
        Ok(CommandStatus::with_code(code))
    }
}

impl Wget {
    async fn job(&self, ctx: &CommandContext<'_>) -> Result<Job, (i32, String)> {
        // -nv and -nc are two-letter short options.
        let args: Vec<String> = ctx
            .args
            .iter()
            .map(|a| match a.as_str() {
                "-nv" => "--no-verbose".to_string(),
                "-nc" => "--no-clobber".to_string(),
                _ => a.clone(),
            })
            .collect();
        let parsed = SPEC.parse(&args).map_err(|m| (2, m))?;
        let mut job = Job {
            request: Request {
                method: Method::GET,
                url: url::Url::parse("http://unset.invalid/").expect("valid"),
                headers: vec![
                    ("User-Agent".into(), USER_AGENT.into()),
                    ("Accept".into(), "*/*".into()),
                ],
                body: Bytes::new(),
                insecure: false,
            },
            output: None,
            prefix: None,
            verbosity: Verbosity::Full,
            show_headers: false,
            spider: false,
            content_on_error: false,
            max_redirects: MAX_REDIRECTS,
            limits: Limits {
                connect_timeout: TIMEOUT,
                deadline: Instant::now() + TIMEOUT,
                max_body_bytes: self.network.max_download_bytes,
            },
        };
        let (mut user, mut password) = (None, None);
        let mut method = None;
        let mut body: Option<Vec<u8>> = None;
        let mut form = false;
        let bad = |m: String| (2, m);
        for (name, value) in parsed.opts {
            let v = value.unwrap_or_default();
            match name.as_str() {
                "quiet" => job.verbosity = Verbosity::Quiet,
                "no-verbose" => job.verbosity = Verbosity::Brief,
                "verbose" => job.verbosity = Verbosity::Full,
                "server-response" => job.show_headers = true,
                "no-check-certificate" => job.request.insecure = true,
                "spider" => job.spider = true,
                "content-on-error" => job.content_on_error = true,
                "output-document" => job.output = Some(v),
                "directory-prefix" => job.prefix = Some(v),
                "timeout" | "read-timeout" => {
                    let t = seconds(&v).map_err(bad)?;
                    job.limits.deadline = Instant::now() + t;
                    job.limits.connect_timeout = job.limits.connect_timeout.min(t);
                }
                "connect-timeout" | "dns-timeout" => {
                    job.limits.connect_timeout = seconds(&v).map_err(bad)?
                }
                "user-agent" => set_header(&mut job.request.headers, "User-Agent", &v),
                "header" => {
                    if let Some((n, value)) = v.split_once(':') {
                        set_header(&mut job.request.headers, n.trim(), value.trim());
                    }
                }
                "post-data" | "post-file" => {
                    form = true;
                    method = Some("POST".to_string());
                    body = Some(if name == "post-file" {
                        read_source(ctx, &v).await.map_err(|m| (3, m))?
                    } else {
                        v.into_bytes()
                    });
                }
                "body-data" => body = Some(v.into_bytes()),
                "body-file" => body = Some(read_source(ctx, &v).await.map_err(|m| (3, m))?),
                "method" => method = Some(v.to_uppercase()),
                "max-redirect" => {
                    job.max_redirects = v
                        .parse()
                        .map_err(|_| bad(format!("bad --max-redirect {v:?}")))?
                }
                "user" | "http-user" => user = Some(v),
                "password" | "http-password" => password = Some(v),
                // tries, auth-no-challenge, no-clobber: nothing to do.
                _ => {}
            }
        }
        let url = match parsed.operands.as_slice() {
            [] => return Err((1, "missing URL".into())),
            [one] => one,
            _ => return Err((2, "only one URL per wget command is supported here".into())),
        };
        job.request.url = parse_url(url).map_err(|m| (2, m))?;
        if let Some(m) = method.or(job.spider.then(|| "HEAD".to_string())) {
            job.request.method =
                Method::from_bytes(m.as_bytes()).map_err(|_| bad(format!("bad method {m:?}")))?;
        }
        if let Some(b) = body {
            job.request.body = b.into();
        }
        if form && !has_header(&job.request.headers, "content-type") {
            job.request.headers.push((
                "Content-Type".into(),
                "application/x-www-form-urlencoded".into(),
            ));
        }
        if let Some(user) = user {
            use base64::Engine;
            let pair = format!("{user}:{}", password.unwrap_or_default());
            let token = base64::engine::general_purpose::STANDARD.encode(pair);
            set_header(
                &mut job.request.headers,
                "Authorization",
                &format!("Basic {token}"),
            );
        }
        Ok(job)
    }
}

async fn download(
    network: &Network,
    job: &Job,
    ctx: &CommandContext<'_>,
    log: &Log,
) -> Result<(), Failure> {
    let mut req = job.request.clone();
    let mut hops = 0;
    let mut resp = loop {
        let resp = send(&network.policy, &req, job.limits).await?;
        log.line(&format!(
            "Connecting to {} ({})... connected.\nHTTP request sent, awaiting response... {} {}\n",
            req.url.host_str().unwrap_or_default(),
            resp.remote,
            resp.status.as_u16(),
            resp.reason()
        ))
        .await?;
        if job.show_headers {
            log.line(&headers_text(&resp)).await?;
        }
        let Some(next) = follow(&req, &resp) else {
            break resp;
        };
        if hops == job.max_redirects {
            return Err(HttpError::TooManyRedirects(job.max_redirects).into());
        }
        let next = next?;
        log.line(&format!("Location: {} [following]\n", next.url))
            .await?;
        req = next;
        hops += 1;
    };
    let status = resp.status.as_u16();
    let failed = status >= 400;
    if job.spider {
        return match failed {
            true => Err(Failure::Status(status, resp.reason().to_string())),
            false => Ok(()),
        };
    }
    if failed && !job.content_on_error {
        return Err(Failure::Status(status, resp.reason().to_string()));
    }
    let (mut sink, shown) = open(job, &job.request.url, ctx).await?;
    if let Some(len) = resp.headers.get(http::header::CONTENT_LENGTH) {
        let kind = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        log.line(&format!(
            "Length: {} [{kind}]\n",
            len.to_str().unwrap_or("?")
        ))
        .await?;
    }
    log.line(&format!("Saving to: '{shown}'\n\n")).await?;
    let streamed = stream_body(&mut resp, &mut sink).await;
    let flushed = sink.flush().await.map_err(Failure::from);
    if let Err(e) = streamed.and(flushed) {
        sink.discard().await;
        return Err(e);
    }
    if failed {
        return Err(Failure::Status(status, resp.reason().to_string()));
    }
    log.line(&format!("'{shown}' saved [{}]\n", resp.received()))
        .await?;
    let size = match resp.headers.get(http::header::CONTENT_LENGTH) {
        Some(len) => format!("{}/{}", resp.received(), len.to_str().unwrap_or("?")),
        None => resp.received().to_string(),
    };
    log.brief(&format!(
        "{} URL:{} [{size}] -> \"{shown}\" [1]\n",
        utc_timestamp(std::time::SystemTime::now()),
        resp.url
    ))
    .await?;
    Ok(())
}

async fn stream_body(resp: &mut Response, sink: &mut Sink) -> Result<(), Failure> {
    while let Some(piece) = resp.chunk().await? {
        sink.write(&piece).await?;
    }
    Ok(())
}

/// The destination: `-O` (`-` is stdout), else the URL's last segment
/// (`index.html` for none) under `-P`, with `.1`, `.2`, ... appended while
/// the name is taken, as wget does without `-O`.
async fn open(
    job: &Job,
    url: &url::Url,
    ctx: &CommandContext<'_>,
) -> Result<(Sink, String), Failure> {
    if let Some(path) = &job.output {
        let sink = Sink::open(path, ctx.cwd, &ctx.fs, &ctx.stdout).await?;
        let shown = if path == "-" { "STDOUT" } else { path };
        return Ok((sink, shown.to_string()));
    }
    let name = remote_name(url).unwrap_or_else(|| "index.html".to_string());
    let base = match &job.prefix {
        Some(dir) => {
            let _ = ctx.fs.mkdir(&resolve(ctx.cwd, dir), true).await;
            format!("{}/{name}", dir.trim_end_matches('/'))
        }
        None => name,
    };
    let mut candidate = base.clone();
    let mut n = 0;
    while ctx
        .fs
        .exists(&resolve(ctx.cwd, &candidate))
        .await
        .unwrap_or(false)
    {
        n += 1;
        candidate = format!("{base}.{n}");
    }
    let sink = Sink::open(&candidate, ctx.cwd, &ctx.fs, &ctx.stdout).await?;
    Ok((sink, candidate))
}

fn headers_text(resp: &Response) -> String {
    let mut out = format!("  HTTP/1.1 {} {}\n", resp.status.as_u16(), resp.reason());
    for (name, value) in resp.header_lines() {
        out.push_str(&format!("  {name}: {}\n", String::from_utf8_lossy(&value)));
    }
    out
}

fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers.push((name.to_string(), value.to_string()));
}

fn has_header(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// How much wget says on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verbosity {
    /// `-q`: nothing.
    Quiet,
    /// `-nv`: errors and one line per saved file.
    Brief,
    /// The default: progress lines too.
    Full,
}

/// wget's progress and error lines on stderr.
struct Log {
    out: CommandOutput,
    verbosity: Verbosity,
}

impl Log {
    /// A progress line (default verbosity only).
    async fn line(&self, text: &str) -> Result<(), Failure> {
        self.at(Verbosity::Full, text).await
    }

    /// The one-line summary of `-nv`.
    async fn brief(&self, text: &str) -> Result<(), Failure> {
        self.at(Verbosity::Brief, text).await
    }

    async fn at(&self, level: Verbosity, text: &str) -> Result<(), Failure> {
        if self.verbosity != level {
            return Ok(());
        }
        say(&self.out, text).await.map_err(Failure::Fatal)
    }
}

/// `2025-01-02 03:04:05`, in UTC as every time the shell shows.
fn utc_timestamp(at: std::time::SystemTime) -> String {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (year, month, day) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Writes to stderr; only the exec ending is an error.
async fn say(stderr: &CommandOutput, text: &str) -> bashkit::Result<()> {
    match stderr.write_all(text.as_bytes()).await {
        Err(e @ (bashkit::Error::ResourceLimit(_) | bashkit::Error::Cancelled)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc() {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_735_787_045);
        assert_eq!(utc_timestamp(at), "2025-01-02 03:04:05");
    }
}
