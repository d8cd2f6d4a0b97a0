//! A small HTTP/1.1 server on a loopback address for the network command
//! tests: fixed routes, every request recorded, one request per
//! connection.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: String,
    pub path: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running server; it stops with the test's runtime.
pub(crate) struct Server {
    pub addr: SocketAddr,
    /// Requests received, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections accepted (also those that never sent a request).
    pub connections: Arc<Mutex<usize>>,
    /// Connections of `/hang` whose client went away.
    pub hangs_closed: Arc<Mutex<usize>>,
}

impl Server {
    /// Starts a server on `ip` (e.g. `127.0.0.2`), any free port.
    pub(crate) async fn start(ip: &str) -> Server {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind");
        let server = Server {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
            connections: Arc::default(),
            hangs_closed: Arc::default(),
        };
        let (seen, connections, closed) = (
            server.seen.clone(),
            server.connections.clone(),
            server.hangs_closed.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                *connections.lock().unwrap() += 1;
                let (seen, closed) = (seen.clone(), closed.clone());
                tokio::spawn(async move { serve(stream, seen, closed).await });
            }
        });
        server
    }

    /// `http://ip:port{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn connection_count(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

/// Every byte value, in order: a body that is not text.
pub(crate) fn binary_body() -> Vec<u8> {
    (0..=255u8).cycle().take(3000).collect()
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, closed: Arc<Mutex<usize>>) {
    let Some(req) = read_request(&mut stream).await else {
        return;
    };
    seen.lock().unwrap().push(req.clone());
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let reply = |status: &str, headers: &[(&str, String)], body: &[u8]| {
        let mut out = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
        for (n, v) in headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(body);
        bytes
    };
    let text = [("content-type", "text/plain".to_string())];
    let bytes = match path {
        "/hello" => reply("200 OK", &text, b"hello\n"),
        "/binary" => reply("200 OK", &[], &binary_body()),
        "/cased" => {
            // Header names in the spellings servers use, and a custom reason.
            let body = b"cased\n";
            format!(
                "HTTP/1.1 200 Fine\r\nContent-Length: {}\r\nX-Request-ID: r1\r\nETag: \"v1\"\r\nx-lower: yes\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes()
            .into_iter()
            .chain(body.iter().copied())
            .collect()
        }
        "/missing" => reply("404 Not Found", &text, b"no such page\n"),
        "/echo" => {
            let mut body = format!("{} {}\n", req.method, req.path);
            for (n, v) in &req.headers {
                body.push_str(&format!("{n}: {v}\n"));
            }
            body.push('\n');
            let mut body = body.into_bytes();
            body.extend_from_slice(&req.body);
            reply("200 OK", &text, &body)
        }
        "/redirect" => {
            let to = query.strip_prefix("to=").unwrap_or("/hello").to_string();
            reply("302 Found", &[("location", to)], b"moved\n")
        }
        "/post-redirect" => reply("303 See Other", &[("location", "/echo".into())], b""),
        "/loop" => reply("302 Found", &[("location", "/loop".into())], b""),
        "/big" => {
            let n: usize = query
                .strip_prefix("n=")
                .and_then(|n| n.parse().ok())
                .unwrap_or(2000);
            reply("200 OK", &[], &vec![b'x'; n])
        }
        "/unsized" => {
            // No length: the body ends when the connection closes.
            let mut head = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
            head.extend_from_slice(&vec![b'y'; 5000]);
            head
        }
        "/partial" => {
            // Ten bytes of a promised thousand, then silence.
            let head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n0123456789";
            let _ = stream.write_all(head).await;
            let mut buf = [0u8; 64];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            *closed.lock().unwrap() += 1;
            return;
        }
        "/hang" => {
            // Never answer; note when the client goes away.
            let mut buf = [0u8; 64];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            *closed.lock().unwrap() += 1;
            return;
        }
        _ => reply("404 Not Found", &text, b"unknown route\n"),
    };
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
    // Give the client time to read before the socket is dropped.
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut piece = [0u8; 4096];
        let n = stream.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&piece[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let mut piece = [0u8; 4096];
        let n = stream.read(&mut piece).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&piece[..n]);
    }
    Some(Seen {
        method,
        path,
        headers,
        body,
    })
}
