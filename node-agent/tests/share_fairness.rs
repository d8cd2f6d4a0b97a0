//! Share-link downloads are shared fairly between computers: a real
//! `node-agent local` serves links to real HTTP clients, one computer's
//! readers trickle or stall, and another computer's links keep answering.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, create, write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn link(c: &mut Client, computer: &str, path: &str) -> String {
    c.share(pb::ShareRequest {
        computer: computer.into(),
        path: path.into(),
        expires_in_seconds: 600,
    })
    .await
    .unwrap()
    .into_inner()
    .url
}

/// The address and the path-and-query of `url`.
fn split(url: &str) -> (SocketAddr, String) {
    let u = url::Url::parse(url).unwrap();
    let addr = format!("{}:{}", u.host_str().unwrap(), u.port().unwrap())
        .parse()
        .unwrap();
    (addr, format!("{}?{}", u.path(), u.query().unwrap()))
}

/// A GET of `url` on a connection with a small receive buffer (so the
/// server's writes wait for this reader), returning the connection after
/// the status line and the status.
async fn open_download(url: &str) -> (TcpStream, u16) {
    let (addr, target) = split(url);
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "no status line");
        line.push(b[0]);
    }
    let status = String::from_utf8_lossy(&line)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (s, status)
}

/// Reads `chunk` bytes a second from `s` until the server ends the
/// connection; returns the bytes read and when it ended.
async fn trickle(mut s: TcpStream, chunk: usize) -> (usize, Instant) {
    let mut total = 0;
    let mut buf = vec![0u8; chunk];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return (total, Instant::now()),
            Ok(n) => total += n,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A whole download by a fast client: status and body.
async fn fetch(url: &str) -> (u16, Vec<u8>) {
    let (addr, target) = split(url);
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut all))
        .await
        .expect("a download took over 30 s")
        .unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = String::from_utf8_lossy(&all[..end])
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (status, all[end + 4..].to_vec())
}

/// One computer's many slow readers take at most that computer's share of
/// `--max-downloads`; another computer's link still answers 200 at once.
#[tokio::test(flavor = "multi_thread")]
async fn one_computers_slow_downloads_leave_other_computers_links_working() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--max-downloads", "8"]);
    let mut c = agent.client().await;
    create(&mut c, "hog", 0).await;
    create(&mut c, "calm", 0).await;
    let big = vec![7u8; 4 << 20];
    write(&mut c, "hog", "big.bin", pb::WriteMode::Truncate, &big)
        .await
        .unwrap();
    write(
        &mut c,
        "calm",
        "note.txt",
        pb::WriteMode::Truncate,
        b"calm\n",
    )
    .await
    .unwrap();
    let hog = link(&mut c, "hog", "big.bin").await;
    let calm = link(&mut c, "calm", "note.txt").await;

    // As many slow readers of one link as the agent serves downloads, each
    // taking 2 KiB a second.
    let mut readers = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let (s, status) = open_download(&hog).await;
        statuses.push(status);
        if status == 200 {
            readers.push(tokio::spawn(trickle(s, 2048)));
        }
    }
    let served = statuses.iter().filter(|s| **s == 200).count();
    eprintln!("the slow computer's downloads: {statuses:?}");
    assert!(served >= 1, "the slow computer got no download at all");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );

    // Meanwhile another computer's link answers, quickly, every time.
    for _ in 0..3 {
        let started = Instant::now();
        let (status, body) = fetch(&calm).await;
        assert_eq!(
            (status, String::from_utf8_lossy(&body).as_ref()),
            (200, "calm\n"),
            "another computer's link while one computer's {served} slow downloads run"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "another computer's link took {:?}",
            started.elapsed()
        );
    }
    assert!(
        served < 8,
        "one computer took all {served} of the agent's downloads"
    );
    for r in readers {
        r.abort();
    }
}

/// A reader slower than the minimum rate (1 KiB/s against the default
/// 4 KiB/s) is dropped within a few windows, and its place is free again.
#[tokio::test(flavor = "multi_thread")]
async fn a_download_slower_than_the_minimum_rate_is_ended() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--max-downloads", "1"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let big = vec![1u8; 8 << 20];
    write(&mut c, "demo", "big.bin", pb::WriteMode::Truncate, &big)
        .await
        .unwrap();
    let url = link(&mut c, "demo", "big.bin").await;
    let started = Instant::now();
    let (s, status) = open_download(&url).await;
    assert_eq!(status, 200);
    let reader = tokio::spawn(trickle(s, 1024));
    // The only place is taken while the reader is connected.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fetch(&url).await.0, 503, "a second download was served");
    let ended = tokio::time::timeout(Duration::from_secs(45), reader).await;
    let (read, at) = ended
        .unwrap_or_else(|_| panic!("a 1 KiB/s reader still held its download after 45 s"))
        .unwrap();
    eprintln!(
        "the slow reader was ended after {:?}, having read {read} bytes",
        at - started
    );
    assert!(read < big.len(), "the slow reader got the whole file");
    // Its place is free: the next download is served whole.
    let (status, body) = fetch(&url).await;
    assert_eq!(status, 200);
    assert!(body == big, "the next download differs from the file");
}
