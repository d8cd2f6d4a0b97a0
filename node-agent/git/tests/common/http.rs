//! A tiny HTTP/1.1 server on 127.0.0.1 that runs real git's
//! `git http-backend` as a CGI program for each request, and a blocking
//! loopback client implementing the crate's transport. Test-only; the
//! shell's tests include this file too.

use agentcomputer_git::remote::transport::{HttpRequest, HttpResponse, Transport, TransportError};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// `git http-backend` served over HTTP for the repositories under a
/// directory; stops when dropped.
pub(crate) struct Backend {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// Serves the repositories under `root` (`/NAME.git`).
    pub(crate) fn start(root: &Path) -> Self {
        Self::start_requiring(root, None)
    }

    /// Like [`Backend::start`], answering 401 to every request whose
    /// `Authorization` field is not `authorization` (e.g. `Basic …`).
    pub(crate) fn start_requiring(root: &Path, authorization: Option<&str>) -> Self {
        let authorization = authorization.map(str::to_string);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let root = root.to_path_buf();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let _ = serve(conn, &root, authorization.as_deref());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        });
        Self {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/PATH`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut conn: TcpStream, root: &Path, authorization: Option<&str>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("GET").to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if let Some(expected) = authorization
        && header("authorization").as_deref() != Some(expected)
    {
        conn.write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return conn.flush();
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let home = root.join(".home");
    std::fs::create_dir_all(&home)?;
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", length.to_string())
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(p) = header("git-protocol") {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut output = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut output)?;
    let _ = feeder.join();
    let _ = child.wait();
    let split = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (cgi_head, cgi_body) = match split {
        Some((i, n)) => (
            String::from_utf8_lossy(&output[..i]).into_owned(),
            &output[i + n..],
        ),
        None => (String::new(), &output[..]),
    };
    let mut status = "200 OK".to_string();
    let mut out_headers = String::new();
    for l in cgi_head.lines() {
        if let Some(s) = l.strip_prefix("Status:") {
            status = s.trim().to_string();
        } else if !l.is_empty() {
            out_headers.push_str(l);
            out_headers.push_str("\r\n");
        }
    }
    let reply = format!(
        "HTTP/1.1 {status}\r\n{out_headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        cgi_body.len()
    );
    conn.write_all(reply.as_bytes())?;
    conn.write_all(cgi_body)?;
    conn.flush()
}

/// A blocking HTTP/1.1 client for 127.0.0.1 only.
pub(crate) struct Loopback;

impl Transport for Loopback {
    fn send(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let rest = req
            .url
            .strip_prefix("http://127.0.0.1:")
            .ok_or_else(|| TransportError::Failed("only 127.0.0.1 in tests".into()))?;
        let (port, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut conn =
            TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).map_err(|e| {
                TransportError::Failed(format!("Failed to connect to 127.0.0.1 port {port}: {e}"))
            })?;
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n",
            req.method,
            req.body.len()
        );
        for (k, v) in &req.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let io = |e: std::io::Error| TransportError::Failed(e.to_string());
        conn.write_all(head.as_bytes()).map_err(io)?;
        conn.write_all(&req.body).map_err(io)?;
        let mut all = Vec::new();
        conn.read_to_end(&mut all).map_err(io)?;
        let i = all
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| TransportError::Failed("bad reply".into()))?;
        let head = String::from_utf8_lossy(&all[..i]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        Ok(HttpResponse {
            status,
            content_type,
            body: all[i + 4..].to_vec(),
        })
    }
}

/// Runs real git `args` in `dir`, isolated from the machine's
/// configuration, with fixed identity and dates; panics unless it
/// succeeds; returns its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let home = dir.parent().unwrap().join(".home");
    std::fs::create_dir_all(&home).unwrap();
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.org")
        .env("GIT_AUTHOR_DATE", "@1700000000 +0100")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.org")
        .env("GIT_COMMITTER_DATE", "@1700000000 +0100")
        .output()
        .expect("real git runs");
    assert!(
        o.status.success(),
        "real git {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Makes a bare repository `NAME.git` under `root` with real git, holding
/// `commits` commits on `main` made in a scratch clone; returns its path.
pub(crate) fn bare_repo(root: &Path, name: &str, commits: usize) -> PathBuf {
    let bare = root.join(format!("{name}.git"));
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    git(&bare, &["config", "http.receivepack", "true"]);
    if commits > 0 {
        let work = root.join(format!("{name}-seed"));
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        for i in 0..commits {
            std::fs::write(work.join("file.txt"), format!("line {i}\n")).unwrap();
            std::fs::write(work.join(format!("f{}.txt", i % 50)), format!("v{i}\n")).unwrap();
            git(&work, &["add", "-A"]);
            git(&work, &["commit", "-q", "-m", &format!("commit {i}")]);
        }
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    }
    bare
}
