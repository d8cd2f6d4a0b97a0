//! `curl`: one HTTP(S) transfer under the computer's egress policy, with the
//! options agents use (curl(1)) and curl's exit codes.
//!
//! Not supported: other protocols, several URLs in one command, `-F`
//! multipart forms, `-c` cookie jars, proxies (the policy is the only way
//! out), `--compressed` decoding (accepted; nothing compressed is asked for).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::http::{HttpError, Limits, Request, Response, follow, send};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandOutput, CommandStatus};
use bytes::Bytes;
use http::Method;

use super::curl_write_out::{Transfer, render};
use super::http::{
    Network, Sink, SinkError, Spec, parse_url, read_source, remote_name, resolve, seconds,
};

/// Sent unless `-A` or `-H 'User-Agent: ...'` says otherwise.
const USER_AGENT: &str = "curl/8.5.0";
/// curl's default connect timeout (curl(1), `--connect-timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(300);
/// Redirects followed with `-L` unless `--max-redirs` says otherwise.
const MAX_REDIRECTS: usize = 30;
/// No `--max-time`: the exec's own timeout is the limit.
const NO_MAX_TIME: Duration = Duration::from_secs(24 * 3600);

const SPEC: Spec = Spec {
    short: &[
        ('s', "silent"),
        ('S', "show-error"),
        ('f', "fail"),
        ('L', "location"),
        ('o', "output"),
        ('O', "remote-name"),
        ('X', "request"),
        ('H', "header"),
        ('d', "data"),
        ('i', "include"),
        ('I', "head"),
        ('w', "write-out"),
        ('m', "max-time"),
        ('k', "insecure"),
        ('u', "user"),
        ('A', "user-agent"),
        ('e', "referer"),
        ('v', "verbose"),
        ('G', "get"),
        ('T', "upload-file"),
        ('b', "cookie"),
        ('N', "no-buffer"),
        ('g', "globoff"),
        ('#', "progress-bar"),
    ],
    valued: &[
        "output",
        "request",
        "header",
        "data",
        "data-ascii",
        "data-binary",
        "data-raw",
        "data-urlencode",
        "json",
        "write-out",
        "max-time",
        "connect-timeout",
        "max-filesize",
        "max-redirs",
        "user",
        "user-agent",
        "referer",
        "upload-file",
        "cookie",
        "url",
        "retry",
    ],
    flags: &[
        "silent",
        "show-error",
        "fail",
        "fail-with-body",
        "location",
        "remote-name",
        "include",
        "head",
        "insecure",
        "verbose",
        "get",
        "compressed",
        "no-buffer",
        "globoff",
        "progress-bar",
        "no-progress-meter",
        "http1.1",
        "create-dirs",
    ],
};

/// The `curl` command of one exec.
pub(crate) struct Curl {
    network: Arc<Network>,
}

impl Curl {
    pub(crate) fn new(network: Arc<Network>) -> Curl {
        Curl { network }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fail {
    No,
    /// `-f`: no body, exit 22.
    Silent,
    /// `--fail-with-body`: the body, then exit 22.
    WithBody,
}

/// How a transfer went wrong.
enum Failure {
    Http(HttpError),
    /// `-f` and a status of 400 or more.
    Status(u16),
    /// Writing the body failed (exit 23).
    Write(String),
    /// The exec is ending; bashkit must see it.
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

impl Failure {
    fn code_and_message(&self) -> (i32, String) {
        match self {
            Failure::Http(e) => (e.curl_code(), e.to_string()),
            Failure::Status(code) => (22, format!("The requested URL returned error: {code}")),
            Failure::Write(m) => (23, format!("Failure writing output to destination: {m}")),
            Failure::Fatal(e) => (1, e.to_string()),
        }
    }
}

/// Everything the command line asked for.
struct Job {
    request: Request,
    fail: Fail,
    location: bool,
    max_redirects: usize,
    include: bool,
    output: Option<String>,
    create_dirs: bool,
    silent: bool,
    show_error: bool,
    verbose: bool,
    write_out: Option<String>,
    limits: Limits,
}

#[async_trait]
impl Command for Curl {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let job = match self.job(&ctx).await {
            Ok(job) => job,
            Err((code, message)) => {
                let text = format!("curl: {message}\n");
                let _ = ctx.stderr.write_all(text.as_bytes()).await;
                if code == 2 {
                    let hint = "curl: try 'curl --help' for more information\n";
                    let _ = ctx.stderr.write_all(hint.as_bytes()).await;
                }
                return Ok(CommandStatus::with_code(code));
            }
        };
        let started = Instant::now();
        let mut transfer = Transfer::new(&job.request);
        let mut sink = None;
        let result = transfer_all(&self.network, &job, &ctx, &mut transfer, &mut sink).await;
        let flushed = match sink.as_mut() {
            Some(s) => s.flush().await.map_err(Failure::from),
            None => Ok(()),
        };
        let failure = result.err().or(flushed.err());
        // A body that --fail-with-body delivered on purpose stays.
        let delivered = matches!(failure, None | Some(Failure::Status(_)) if job.fail == Fail::WithBody)
            || failure.is_none();
        if !delivered && let Some(s) = sink {
            s.discard().await;
        }
        if let Some(Failure::Fatal(e)) = failure {
            return Err(e);
        }
        let (code, message) = failure
            .as_ref()
            .map(Failure::code_and_message)
            .unwrap_or((0, String::new()));
        transfer.exit_code = code;
        transfer.error = message.clone();
        transfer.elapsed = started.elapsed();
        if let Some(format) = &job.write_out {
            let (text, warnings) = render(format, &transfer);
            write_diagnostic(&ctx.stderr, warnings.as_bytes()).await?;
            if let Err(e @ (bashkit::Error::ResourceLimit(_) | bashkit::Error::Cancelled)) =
                ctx.stdout.write_all(&text).await
            {
                return Err(e);
            }
        }
        if code != 0 && (!job.silent || job.show_error) {
            let line = format!("curl: ({code}) {message}\n");
            write_diagnostic(&ctx.stderr, line.as_bytes()).await?;
        }
        Ok(CommandStatus::with_code(code))
    }
}

impl Curl {
    /// Reads the command line (and any `@file` data). Errors: curl's exit
    /// code and message.
    async fn job(&self, ctx: &CommandContext<'_>) -> Result<Job, (i32, String)> {
        let parsed = SPEC.parse(ctx.args).map_err(|m| (2, m))?;
        let mut urls = parsed.operands.clone();
        let mut method: Option<String> = None;
        let mut user_headers = Vec::new();
        let mut data: Vec<Vec<u8>> = Vec::new();
        let mut json = false;
        let (mut get, mut head, mut include, mut insecure) = (false, false, false, false);
        let (mut silent, mut show_error, mut verbose) = (false, false, false);
        let (mut location, mut create_dirs, mut remote) = (false, false, false);
        let mut fail = Fail::No;
        let mut output = None;
        let mut write_out = None;
        let mut max_time = None;
        let mut connect_timeout = CONNECT_TIMEOUT;
        let mut max_filesize = None;
        let mut max_redirects = MAX_REDIRECTS;
        let (mut user, mut agent, mut referer, mut cookie) = (None, None, None, None);
        let mut upload = None;
        let bad = |m: String| (2, m);
        for (name, value) in parsed.opts {
            let v = value.unwrap_or_default();
            match name.as_str() {
                "silent" => silent = true,
                "show-error" => show_error = true,
                "fail" => fail = Fail::Silent,
                "fail-with-body" => fail = Fail::WithBody,
                "location" => location = true,
                "remote-name" => remote = true,
                "include" => include = true,
                "head" => head = true,
                "insecure" => insecure = true,
                "verbose" => verbose = true,
                "get" => get = true,
                "create-dirs" => create_dirs = true,
                "output" => output = Some(v),
                "request" => method = Some(v),
                "header" => user_headers.push(v),
                "data" | "data-ascii" => data.push(match v.strip_prefix('@') {
                    Some(file) => strip_newlines(read(ctx, file).await?),
                    None => v.into_bytes(),
                }),
                "data-binary" => data.push(match v.strip_prefix('@') {
                    Some(file) => read(ctx, file).await?,
                    None => v.into_bytes(),
                }),
                "json" => {
                    json = true;
                    data.push(match v.strip_prefix('@') {
                        Some(file) => read(ctx, file).await?,
                        None => v.into_bytes(),
                    });
                }
                "data-raw" => data.push(v.into_bytes()),
                "data-urlencode" => data.push(url_encode_part(ctx, &v).await?),
                "write-out" => {
                    write_out = Some(match v.strip_prefix('@') {
                        Some(file) => String::from_utf8_lossy(&read(ctx, file).await?).into(),
                        None => v,
                    })
                }
                "max-time" => max_time = Some(seconds(&v).map_err(bad)?),
                "connect-timeout" => connect_timeout = seconds(&v).map_err(bad)?,
                "max-filesize" => {
                    max_filesize = Some(
                        v.parse::<u64>()
                            .map_err(|_| bad(format!("bad --max-filesize {v:?}")))?,
                    )
                }
                "max-redirs" => {
                    // -1 means no limit in curl.
                    max_redirects = match v.parse::<i64>() {
                        Ok(n) if n < 0 => usize::MAX,
                        Ok(n) => n as usize,
                        Err(_) => return Err(bad(format!("bad --max-redirs {v:?}"))),
                    }
                }
                "user" => user = Some(v),
                "user-agent" => agent = Some(v),
                "referer" => referer = Some(v),
                "cookie" => cookie = Some(v),
                "upload-file" => upload = Some(v),
                "url" => urls.push(v),
                // Accepted for compatibility; nothing to do here.
                _ => {}
            }
        }
        let text = match urls.as_slice() {
            [] => return Err(bad("no URL specified".into())),
            [one] => one,
            _ => return Err(bad("only one URL per curl command is supported here".into())),
        };
        let mut url = parse_url(text).map_err(|m| (3, m))?;

        let mut body = Bytes::new();
        if !data.is_empty() {
            let joined = data.join(&b'&');
            if get {
                let query = String::from_utf8_lossy(&joined).into_owned();
                let merged = match url.query() {
                    Some(q) if !q.is_empty() => format!("{q}&{query}"),
                    _ => query,
                };
                url.set_query(Some(&merged));
            } else {
                body = joined.into();
            }
        }
        if let Some(file) = &upload {
            body = read(ctx, file).await?.into();
            if url.path().ends_with('/') && file != "-" {
                let name = file.rsplit('/').next().unwrap_or(file);
                url = url.join(name).map_err(|e| (3, e.to_string()))?;
            }
        }
        let method = match method {
            Some(m) => {
                Method::from_bytes(m.as_bytes()).map_err(|_| bad(format!("bad method {m:?}")))?
            }
            None if head => Method::HEAD,
            None if upload.is_some() => Method::PUT,
            None if !data.is_empty() && !get => Method::POST,
            None => Method::GET,
        };

        let mut base: Vec<(String, String)> = vec![
            (
                "User-Agent".into(),
                agent.unwrap_or_else(|| USER_AGENT.into()),
            ),
            (
                "Accept".into(),
                if json { "application/json" } else { "*/*" }.into(),
            ),
        ];
        if let Some(user) = user {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(user);
            base.push(("Authorization".into(), format!("Basic {token}")));
        }
        if let Some(r) = referer {
            base.push(("Referer".into(), r));
        }
        if let Some(c) = cookie.filter(|c| c.contains('=')) {
            base.push(("Cookie".into(), c));
        }
        if !body.is_empty() || (!data.is_empty() && !get) {
            let kind = if json {
                "application/json"
            } else {
                "application/x-www-form-urlencoded"
            };
            if upload.is_none() {
                base.push(("Content-Type".into(), kind.into()));
            }
        }
        let headers = merge_headers(base, &user_headers);

        let output = match (output, remote) {
            (Some(o), _) => Some(o),
            (None, true) => {
                Some(remote_name(&url).ok_or((23, "Remote file name has no length".to_string()))?)
            }
            (None, false) => None,
        };
        let max_body_bytes = max_filesize
            .unwrap_or(u64::MAX)
            .min(self.network.max_download_bytes);
        Ok(Job {
            request: Request {
                method,
                url,
                headers,
                body,
                insecure,
            },
            fail,
            location,
            max_redirects,
            include: include || head,
            output,
            create_dirs,
            silent,
            show_error,
            verbose,
            write_out,
            limits: Limits {
                connect_timeout,
                deadline: Instant::now() + max_time.unwrap_or(NO_MAX_TIME),
                max_body_bytes,
            },
        })
    }
}

/// The transfer itself: every hop, the final head and body.
async fn transfer_all(
    network: &Network,
    job: &Job,
    ctx: &CommandContext<'_>,
    transfer: &mut Transfer,
    sink: &mut Option<Sink>,
) -> Result<(), Failure> {
    let mut req = job.request.clone();
    loop {
        transfer.url = req.url.to_string();
        transfer.method = req.method.to_string();
        if job.verbose {
            log_request(&ctx.stderr, &req).await?;
        }
        let mut resp = send(&network.policy, &req, job.limits).await?;
        transfer.record(&resp);
        if job.verbose {
            write_diagnostic(&ctx.stderr, &head_text(&resp, "< "))
                .await
                .map_err(Failure::Fatal)?;
        }
        let next = follow(&req, &resp);
        if let Some(next) = next.as_ref().and_then(|n| n.as_ref().ok()) {
            transfer.redirect_url = next.url.to_string();
        }
        if job.location
            && let Some(next) = next
        {
            if transfer.redirects == job.max_redirects {
                return Err(HttpError::TooManyRedirects(job.max_redirects).into());
            }
            if job.include {
                open(sink, job, ctx)
                    .await?
                    .write(&head_text(&resp, ""))
                    .await?;
            }
            drop(resp);
            req = next?;
            transfer.redirects += 1;
            transfer.redirect_url.clear();
            continue;
        }
        let status = resp.status.as_u16();
        if status >= 400 && job.fail == Fail::Silent {
            return Err(Failure::Status(status));
        }
        if job.include {
            open(sink, job, ctx)
                .await?
                .write(&head_text(&resp, ""))
                .await?;
        }
        if req.method != Method::HEAD {
            let out = open(sink, job, ctx).await?;
            let streamed = stream_body(&mut resp, out).await;
            transfer.size_download = resp.received();
            streamed?;
        }
        if status >= 400 && job.fail == Fail::WithBody {
            return Err(Failure::Status(status));
        }
        return Ok(());
    }
}

async fn stream_body(resp: &mut Response, out: &mut Sink) -> Result<(), Failure> {
    while let Some(piece) = resp.chunk().await? {
        out.write(&piece).await?;
    }
    Ok(())
}

/// The body's destination, opened (and a file created) on first use.
async fn open<'s>(
    sink: &'s mut Option<Sink>,
    job: &Job,
    ctx: &CommandContext<'_>,
) -> Result<&'s mut Sink, Failure> {
    if sink.is_none() {
        let opened = match &job.output {
            None => Sink::Stdout(ctx.stdout.clone()),
            Some(path) => {
                if job.create_dirs
                    && let Some(parent) = resolve(ctx.cwd, path).parent()
                {
                    let _ = ctx.fs.mkdir(parent, true).await;
                }
                Sink::open(path, ctx.cwd, &ctx.fs, &ctx.stdout).await?
            }
        };
        *sink = Some(opened);
    }
    Ok(sink.as_mut().expect("opened above"))
}

/// The status line and headers as curl prints them (`-i`, `-I`, `-v`),
/// header names spelled as the server sent them.
fn head_text(resp: &Response, prefix: &str) -> Vec<u8> {
    let version = match resp.version {
        http::Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let mut out = format!(
        "{prefix}{version} {} {}\r\n",
        resp.status.as_u16(),
        resp.reason()
    )
    .into_bytes();
    for (name, value) in resp.header_lines() {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

async fn log_request(stderr: &CommandOutput, req: &Request) -> Result<(), Failure> {
    let url = &req.url;
    let mut text = format!(
        "> {} {} HTTP/1.1\r\n",
        req.method,
        &url[url::Position::BeforePath..url::Position::AfterQuery]
    );
    // The Host line comes first, as curl sends it, unless -H replaced it.
    if !req
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("host"))
    {
        let host = url.host_str().unwrap_or_default();
        match url.port() {
            Some(port) => text.push_str(&format!("> Host: {host}:{port}\r\n")),
            None => text.push_str(&format!("> Host: {host}\r\n")),
        }
    }
    for (name, value) in &req.headers {
        text.push_str(&format!("> {name}: {value}\r\n"));
    }
    text.push_str(">\r\n");
    write_diagnostic(stderr, text.as_bytes())
        .await
        .map_err(Failure::Fatal)
}

/// Writes to stderr; only the exec ending is an error (a closed stderr
/// must not change curl's exit code).
async fn write_diagnostic(stderr: &CommandOutput, bytes: &[u8]) -> bashkit::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    match stderr.write_all(bytes).await {
        Err(e @ (bashkit::Error::ResourceLimit(_) | bashkit::Error::Cancelled)) => Err(e),
        _ => Ok(()),
    }
}

/// curl's defaults overridden by `-H`: `Name: value` replaces a default of
/// that name, `Name:` removes it, `Name;` sends it empty.
fn merge_headers(mut base: Vec<(String, String)>, user: &[String]) -> Vec<(String, String)> {
    let mut extra = Vec::new();
    for line in user {
        let (name, value, remove) = match line.split_once(':') {
            Some((n, v)) => (n.trim(), v.trim(), v.trim().is_empty()),
            None => match line.strip_suffix(';') {
                Some(n) => (n.trim(), "", false),
                None => continue, // curl ignores a header without a colon
            },
        };
        base.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if !remove {
            extra.push((name.to_string(), value.to_string()));
        }
    }
    base.extend(extra);
    base
}

async fn read(ctx: &CommandContext<'_>, name: &str) -> Result<Vec<u8>, (i32, String)> {
    read_source(ctx, name).await.map_err(|m| (26, m))
}

/// `-d @file` drops carriage returns and newlines (curl(1), `--data`).
fn strip_newlines(bytes: Vec<u8>) -> Vec<u8> {
    bytes
        .into_iter()
        .filter(|b| *b != b'\r' && *b != b'\n')
        .collect()
}

/// `--data-urlencode`: `content`, `=content`, `name=content`, `@file`,
/// `name@file` (curl(1)).
async fn url_encode_part(ctx: &CommandContext<'_>, part: &str) -> Result<Vec<u8>, (i32, String)> {
    let eq = part.find('=');
    let at = part.find('@');
    let (name, content) = match (eq, at) {
        (Some(e), a) if a.is_none_or(|a| e < a) => (&part[..e], part.as_bytes()[e + 1..].to_vec()),
        (_, Some(a)) => (&part[..a], read(ctx, &part[a + 1..]).await?),
        _ => ("", part.as_bytes().to_vec()),
    };
    let mut out = Vec::new();
    if !name.is_empty() {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
    }
    for b in content {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn user_headers_replace_remove_and_add() {
        let base = h(&[("User-Agent", "curl/8.5.0"), ("Accept", "*/*")]);
        let merged = merge_headers(
            base,
            &[
                "accept: text/plain".into(),
                "User-Agent:".into(),
                "X-Empty;".into(),
                "X-A: 1".into(),
                "nocolon".into(),
            ],
        );
        assert_eq!(
            merged,
            h(&[("accept", "text/plain"), ("X-Empty", ""), ("X-A", "1")])
        );
    }

    #[test]
    fn data_files_lose_newlines() {
        assert_eq!(strip_newlines(b"a\r\nb\n".to_vec()), b"ab");
    }
}
