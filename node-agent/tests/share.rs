//! Share links end to end: a real `node-agent local` makes links over gRPC
//! and serves them over HTTP; real `curl` downloads them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, create, write};
use tonic::Code;

/// What curl got: status, headers (lowercase names), body.
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `curl` of `url` with `extra` arguments; the body goes through a file.
fn curl(url: &str, extra: &[&str]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let headers = dir.path().join("headers");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-o"])
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {url} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    Got {
        status,
        headers: parse_headers(&headers),
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

fn parse_headers(file: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

async fn share(
    c: &mut Client,
    computer: &str,
    path: &str,
    secs: u64,
) -> Result<pb::ShareResponse, tonic::Status> {
    c.share(pb::ShareRequest {
        computer: computer.into(),
        path: path.into(),
        expires_in_seconds: secs,
    })
    .await
    .map(|r| r.into_inner())
}

/// `len` bytes that differ from piece to piece (an LCG), so a misplaced
/// range cannot match by chance.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

fn replace_query(url: &str, key: &str, value: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == key {
                value.to_string()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    u.query_pairs_mut().clear().extend_pairs(pairs);
    u.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn links_download_with_type_disposition_and_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let text = b"hello share links\nsecond line\n";
    c.mkdir(pb::MkdirRequest {
        computer: "demo".into(),
        path: "docs".into(),
        parents: false,
        perm: 0,
    })
    .await
    .unwrap();
    write(
        &mut c,
        "demo",
        "docs/Rapport été.md",
        pb::WriteMode::Truncate,
        text,
    )
    .await
    .unwrap();

    let link = share(&mut c, "demo", "/workspace/docs/./Rapport été.md", 0)
        .await
        .unwrap();
    assert_eq!(link.path, "docs/Rapport été.md");
    let now = agentcomputer_node_agent::share::now_unix_seconds();
    assert!(
        (3595..=3601).contains(&(link.expires_unix_seconds - now)),
        "default expiry is 1 h"
    );
    assert!(
        link.url
            .contains("/share/v1/demo/docs/Rapport%20%C3%A9t%C3%A9.md?expires="),
        "{}",
        link.url
    );

    // The whole file.
    let got = curl(&link.url, &[]);
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body, text);
    assert_eq!(got.header("content-type"), Some("text/markdown"));
    assert_eq!(
        got.header("content-disposition"),
        Some(
            "attachment; filename=\"Rapport _t_.md\"; filename*=UTF-8''Rapport%20%C3%A9t%C3%A9.md"
        )
    );
    assert_eq!(
        got.header("content-length"),
        Some(text.len().to_string().as_str())
    );
    assert_eq!(got.header("accept-ranges"), Some("bytes"));
    assert_eq!(got.header("cache-control"), Some("private, no-store"));

    // HEAD: the same headers, no body.
    let head = curl(&link.url, &["-I"]);
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(text.len().to_string().as_str())
    );
    // (curl -I writes the headers where the body would go.)
    assert!(!head.text().contains("hello share"), "HEAD sent a body");

    // One range, a suffix, an open end (RFC 9110 section 14).
    let got = curl(&link.url, &["-H", "Range: bytes=6-10"]);
    assert_eq!(got.status, 206);
    assert_eq!(got.body, b"share");
    assert_eq!(
        got.header("content-range"),
        Some(format!("bytes 6-10/{}", text.len()).as_str())
    );
    let got = curl(&link.url, &["-H", "Range: bytes=-5"]);
    assert_eq!((got.status, got.body.as_slice()), (206, &b"line\n"[..]));
    let got = curl(&link.url, &["-H", "Range: bytes=18-"]);
    assert_eq!(
        (got.status, got.body.as_slice()),
        (206, &b"second line\n"[..])
    );
    // Unsatisfiable: 416 with the size.
    let got = curl(&link.url, &["-H", &format!("Range: bytes={}-", text.len())]);
    assert_eq!(got.status, 416);
    assert_eq!(
        got.header("content-range"),
        Some(format!("bytes */{}", text.len()).as_str())
    );
    // Several ranges: the whole file (RFC 9110 section 14.2 allows it).
    let got = curl(&link.url, &["-H", "Range: bytes=0-1,4-5"]);
    assert_eq!((got.status, got.body.as_slice()), (200, &text[..]));

    // An extension nobody knows: octet-stream.
    write(
        &mut c,
        "demo",
        "blob.zzq",
        pb::WriteMode::Truncate,
        b"\x00\x01",
    )
    .await
    .unwrap();
    let blob = share(&mut c, "demo", "blob.zzq", 60).await.unwrap();
    let got = curl(&blob.url, &[]);
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));

    // What cannot be shared.
    let e = share(&mut c, "demo", "docs", 60).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().starts_with("EISDIR"), "{}", e.message());
    let e = share(&mut c, "demo", "nope.txt", 60).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = share(&mut c, "demo", "/etc/passwd", 60).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = share(&mut c, "demo", "blob.zzq", 604_801)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("604800"), "{}", e.message());
    let e = share(&mut c, "ghost", "blob.zzq", 60).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Without the agent token: refused before anything.
    let mut anonymous = agent.client_with(None).await;
    let e = share(&mut anonymous, "demo", "blob.zzq", 60)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // The file is read when the link is used.
    write(
        &mut c,
        "demo",
        "docs/Rapport été.md",
        pb::WriteMode::Truncate,
        b"v2\n",
    )
    .await
    .unwrap();
    assert_eq!(curl(&link.url, &[]).body, b"v2\n");
    // Removed: 404 (the link was genuine).
    c.remove(pb::RemoveRequest {
        computer: "demo".into(),
        path: "docs/Rapport été.md".into(),
        recursive: false,
    })
    .await
    .unwrap();
    let got = curl(&link.url, &[]);
    assert_eq!((got.status, got.text().as_str()), (404, "file not found\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_expired_unknown_and_revoked_links_get_403() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    write(
        &mut c,
        "demo",
        "a.txt",
        pb::WriteMode::Truncate,
        b"secret a\n",
    )
    .await
    .unwrap();
    write(
        &mut c,
        "demo",
        "b.txt",
        pb::WriteMode::Truncate,
        b"secret b\n",
    )
    .await
    .unwrap();
    let link = share(&mut c, "demo", "a.txt", 600).await.unwrap();
    assert_eq!(curl(&link.url, &[]).status, 200);
    let refused = |url: &str, reason: &str| {
        let got = curl(url, &[]);
        assert_eq!((got.status, got.text().as_str()), (403, reason), "{url}");
        assert!(!got.text().contains("secret"));
    };
    let invalid = "invalid or revoked link\n";

    // Tampered: the signature, the path, the expiry, the computer.
    let sig = url::Url::parse(&link.url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "sig")
        .unwrap()
        .1
        .into_owned();
    let flipped = format!(
        "{}{}",
        if sig.starts_with('A') { 'B' } else { 'A' },
        &sig[1..]
    );
    refused(&replace_query(&link.url, "sig", &flipped), invalid);
    refused(&replace_query(&link.url, "sig", ""), invalid);
    refused(&link.url.replace("/a.txt?", "/b.txt?"), invalid);
    let later = (link.expires_unix_seconds + 86_400).to_string();
    refused(&replace_query(&link.url, "expires", &later), invalid);
    refused(
        &replace_query(
            &link.url,
            "expires",
            &format!("0{}", link.expires_unix_seconds),
        ),
        invalid,
    );
    // An unknown computer looks the same as a bad signature.
    refused(&link.url.replace("/demo/", "/ghost/"), invalid);
    refused(&link.url.replace("/demo/", "/NOT_A_NAME/"), invalid);
    let bare = link.url.split('?').next().unwrap().to_string();
    refused(&bare, invalid);
    refused(&format!("{}/nothing-here", agent_base(&link.url)), invalid);

    // Expired: a 1-second link after 2 seconds.
    let short = share(&mut c, "demo", "a.txt", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    refused(&short.url, "link expired\n");

    // Revoked: deleting the computer; a new computer of the same name
    // with the same file does not bring the old link back.
    c.delete_computer(pb::DeleteComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap();
    refused(&link.url, invalid);
    create(&mut c, "demo", 0).await;
    write(
        &mut c,
        "demo",
        "a.txt",
        pb::WriteMode::Truncate,
        b"secret a\n",
    )
    .await
    .unwrap();
    refused(&link.url, invalid);
    let fresh = share(&mut c, "demo", "a.txt", 600).await.unwrap();
    assert_eq!(curl(&fresh.url, &[]).body, b"secret a\n");
    assert_ne!(fresh.url, link.url);

    // Links survive an agent restart (the key is in the computer's data).
    agent.stop().await;
    let agent = Agent::start(dir.path(), &["--share-listen", &agent_addr(&fresh.url)]);
    let got = curl(&fresh.url, &[]);
    assert_eq!((got.status, got.body.as_slice()), (200, &b"secret a\n"[..]));
    drop(agent);
}

fn agent_addr(url: &str) -> String {
    let u = url::Url::parse(url).unwrap();
    format!("{}:{}", u.host_str().unwrap(), u.port().unwrap())
}

fn agent_base(url: &str) -> String {
    format!("http://{}", agent_addr(url))
}

#[tokio::test(flavor = "multi_thread")]
async fn large_files_stream_in_bounded_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--max-downloads", "1"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let data = pattern(24 << 20);
    write(&mut c, "demo", "big.bin", pb::WriteMode::Truncate, &data)
        .await
        .unwrap();
    let link = share(&mut c, "demo", "big.bin", 600).await.unwrap();

    let started = std::time::Instant::now();
    let got = curl(&link.url, &[]);
    let took = started.elapsed();
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), data.len());
    assert!(got.body == data, "the download differs from the file");
    eprintln!(
        "downloaded {} MiB in {:?} ({:.0} MiB/s)",
        data.len() >> 20,
        took,
        data.len() as f64 / (1 << 20) as f64 / took.as_secs_f64()
    );
    // A range across several pieces.
    let got = curl(&link.url, &["-H", "Range: bytes=300000-1300000"]);
    assert_eq!(got.status, 206);
    assert!(got.body == data[300_000..=1_300_000]);

    // One download at a time: a slow client holds the only place...
    let body = dir.path().join("slow.body");
    let slow = Command::new("curl")
        .args(["-sS", "--limit-rate", "256K", "-o"])
        .arg(&body)
        .args(["-w", "%{http_code}"])
        .arg(&link.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut busy = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let got = curl(&link.url, &["-r", "0-0"]);
        if got.status == 503 {
            busy = Some(got);
            break;
        }
    }
    // ...so another gets 503 with Retry-After.
    let busy = busy.expect("a second download while one runs was not refused");
    assert_eq!(busy.header("retry-after"), Some("1"));
    // Changing the file under the slow download ends it early rather than
    // mixing two versions: curl sees fewer bytes than Content-Length.
    write(&mut c, "demo", "big.bin", pb::WriteMode::Create, b"changed")
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking(move || slow.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(
        !out.status.success(),
        "a download of a changed file completed"
    );
    let partial = std::fs::metadata(&body).map(|m| m.len()).unwrap_or(0);
    assert!(partial < data.len() as u64, "{partial} bytes");
    // The place is free again (once the ended download let go of it).
    let mut got = curl(&link.url, &["-r", "0-6"]);
    for _ in 0..50 {
        if got.status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = curl(&link.url, &["-r", "0-6"]);
    }
    assert_eq!((got.status, got.body.as_slice()), (206, &b"changed"[..]));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_without_share_server_refuses_share() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--share-listen", "off"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    write(&mut c, "demo", "a.txt", pb::WriteMode::Truncate, b"a")
        .await
        .unwrap();
    let e = share(&mut c, "demo", "a.txt", 60).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("--share-listen"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn names_with_control_and_reserved_characters_download() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    c.mkdir(pb::MkdirRequest {
        computer: "demo".into(),
        path: "a\tdir".into(),
        parents: false,
        perm: 0,
    })
    .await
    .unwrap();
    // Every C0 control byte but NUL and `/`, DEL, C1, and what a URL
    // reserves.
    let controls: String = (1u8..0x20).map(char::from).collect();
    let names = [
        "line\r\nbreak.txt".to_string(),
        format!("c{controls}\u{7f}\u{85}.txt"),
        "q?#%20[x] y+z;=@:.txt".to_string(),
        "été\\ü.txt".to_string(),
    ];
    for name in names {
        let path = format!("a\tdir/{name}");
        let body = format!("content of {name:?}\n");
        write(
            &mut c,
            "demo",
            &path,
            pb::WriteMode::Truncate,
            body.as_bytes(),
        )
        .await
        .unwrap();
        let link = share(&mut c, "demo", &path, 60).await.unwrap();
        assert_eq!(link.path, path);
        let route = link.url.split('?').next().unwrap();
        assert!(route.contains("/share/v1/demo/a%09dir/"), "{}", link.url);
        assert!(
            route.bytes().all(|b| b.is_ascii_graphic()),
            "a raw control or non-ASCII byte in {:?}",
            link.url
        );
        let got = curl(&link.url, &[]);
        assert_eq!(got.status, 200, "{:?}: {}", link.url, got.text());
        assert_eq!(got.body, body.as_bytes(), "{:?}", link.url);
    }
}
