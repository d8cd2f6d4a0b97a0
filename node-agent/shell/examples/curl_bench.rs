//! Measures the shell's `curl` against an HTTP server on 127.0.0.1 started
//! here: latency of one small request (alone in an exec and in a loop),
//! the cost of a policy refusal, and download throughput to a file of the
//! computer and through a pipe.
//!
//! `cargo run --release -p agentcomputer-shell --example curl_bench`

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_egress::{CidrConfig, EgressConfig, Mode, Policy};
use agentcomputer_fs::{Fs, Limits};
use agentcomputer_shell::{ExecRequest, OutputChunk, run};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const BIG: usize = 50 * 1024 * 1024;

#[tokio::main]
async fn main() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let big = head.starts_with(b"GET /big");
                let len = if big { BIG } else { 3 };
                let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n");
                let _ = s.write_all(reply.as_bytes()).await;
                if big {
                    let block = vec![b'x'; 64 * 1024];
                    for _ in 0..BIG / block.len() {
                        if s.write_all(&block).await.is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = s.write_all(b"ok\n").await;
                }
            });
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("c.db"), Limits::default()).unwrap();
    let policy = Arc::new(
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig::parse_flag("127.0.0.1").unwrap()],
            ..EgressConfig::default()
        })
        .unwrap(),
    );
    let small = format!("http://{addr}/small");
    let big = format!("http://{addr}/big");

    let mut alone = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let out = exec(&fs, &policy, &format!("curl -s {small}")).await;
        alone.push(t.elapsed());
        assert_eq!(out, b"ok\n");
    }
    let mut empty = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        exec(&fs, &policy, "true").await;
        empty.push(t.elapsed());
    }
    println!(
        "one exec running `curl -s` (small body): median {:?} (an exec running `true`: {:?})",
        median(&mut alone),
        median(&mut empty)
    );

    let n = 500;
    let t = Instant::now();
    exec(
        &fs,
        &policy,
        &format!("for i in $(seq {n}); do curl -s {small} >/dev/null; done"),
    )
    .await;
    println!(
        "curl in a loop: {:?} per request ({n} requests)",
        t.elapsed() / n
    );

    let t = Instant::now();
    exec(
        &fs,
        &policy,
        &format!("for i in $(seq {n}); do curl -s http://10.0.0.5/ ; done; true"),
    )
    .await;
    println!("refused by the policy: {:?} per request", t.elapsed() / n);

    for (what, script) in [
        (
            "to a file of the computer (-o)",
            format!("curl -s -o big {big}"),
        ),
        ("through a pipe (| wc -c)", format!("curl -s {big} | wc -c")),
        ("to /dev/null", format!("curl -s -o /dev/null {big}")),
    ] {
        let t = Instant::now();
        exec(&fs, &policy, &script).await;
        let secs = t.elapsed().as_secs_f64();
        println!("50 MiB {what}: {:.2} s, {:.0} MiB/s", secs, 50.0 / secs);
    }
}

async fn exec(fs: &Fs, policy: &Arc<Policy>, script: &str) -> Vec<u8> {
    let (tx, mut rx) = mpsc::channel(64);
    let req = ExecRequest {
        script: script.into(),
        timeout: Duration::from_secs(120),
        max_output_bytes: 1 << 30,
        egress: Arc::clone(policy),
        ..ExecRequest::default()
    };
    let collect = async {
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            match chunk {
                OutputChunk::Stdout(b) => out.extend(b),
                OutputChunk::Stderr(b) => eprint!("{}", String::from_utf8_lossy(&b)),
            }
        }
        out
    };
    let (outcome, out) = tokio::join!(run(fs.clone(), req, tx, CancellationToken::new()), collect);
    assert_eq!(outcome.exit_code, 0, "{script}: {outcome:?}");
    out
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}
