//! Backup lag under load: 10 databases, each committing 50 transactions of
//! 4 KiB a second for 10 s, each shipped by its own shipper to a local
//! versitygw. Prints the lag from a commit's return to the upload that
//! holds it: p50, p99, max, and each as a ratio of the poll interval.
//!
//! Run: cargo run -p agentcomputer-backup --example lag   (needs
//! scripts/install-object-store.sh). Recorded in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;

const DATABASES: usize = 10;

fn databases() -> usize {
    std::env::var("LAG_DATABASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DATABASES)
}
const RATE: u64 = 50;
const SECONDS: u64 = 10;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = common::ObjectServer::start() else {
        std::process::exit(2)
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    // Baseline: one conditional 16 KiB create at a time, as one shipper round uploads.
    let mut puts = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        let opts = object_store::PutOptions {
            mode: object_store::PutMode::Create,
            ..Default::default()
        };
        store
            .put_opts(
                &Path::from(format!("baseline/{i}")),
                vec![7u8; 16384].into(),
                opts,
            )
            .await
            .unwrap();
        puts.push(t.elapsed());
    }
    puts.sort();
    let put_p50 = puts[50];
    let options = Options::default();
    let mut lags = Vec::new();
    let mut positions = Vec::new();
    let mut tasks = Vec::new();
    for d in 0..databases() {
        let db = dir.path().join(format!("c{d}.db"));
        let fs = Fs::create(&db, Limits::default()).unwrap();
        fs.leave_checkpoints_to_backup().unwrap();
        let shipper = Shipper::start(&db, store.clone(), Path::from(format!("lag/c{d}")), options)
            .await
            .unwrap();
        // Commit times by transaction number (1-based, as the shipper counts).
        let commits: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let shipped: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
        let mut rx = shipper.shipped();
        let s2 = shipped.clone();
        let watcher = tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let at = rx.borrow_and_update().txn;
                s2.lock().unwrap().push((at, Instant::now()));
            }
        });
        let c2 = commits.clone();
        let writer = std::thread::spawn(move || {
            let start = Instant::now();
            for k in 0..RATE * SECONDS {
                let due = start + Duration::from_micros(k * 1_000_000 / RATE);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                common::write_file(
                    &fs,
                    &format!("f{}", k % 64),
                    &common::content(k as usize, 4096),
                );
                c2.lock().unwrap().push(Instant::now());
            }
        });
        tasks.push((shipper, writer, watcher, commits, shipped));
    }
    for (shipper, writer, watcher, commits, shipped) in tasks {
        tokio::task::spawn_blocking(move || writer.join().unwrap())
            .await
            .unwrap();
        shipper.sync().await.unwrap();
        positions.push(shipper.positions_written().len());
        shipper.stop().await.unwrap();
        let _ = watcher.await;
        let commits = commits.lock().unwrap();
        let shipped = shipped.lock().unwrap();
        for (i, t) in commits.iter().enumerate() {
            let txn = i as u64 + 1;
            let up = shipped
                .iter()
                .find(|(n, _)| *n >= txn)
                .expect("every commit shipped")
                .1;
            lags.push(up.saturating_duration_since(*t));
        }
    }
    lags.sort();
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize];
    let poll = options.poll_interval.as_secs_f64();
    println!(
        "baseline: one 16 KiB conditional PUT, p50 {:.1} ms",
        put_p50.as_secs_f64() * 1e3
    );
    let mut objects = 0;
    for n in &positions {
        objects += n;
    }
    println!("objects written: {objects}");
    println!(
        "backup lag, {} databases x {RATE} commits/s x 4 KiB, {SECONDS} s ({} commits):",
        databases(),
        lags.len()
    );
    for (name, v) in [
        ("p50", pct(0.5)),
        ("p99", pct(0.99)),
        ("max", *lags.last().unwrap()),
    ] {
        println!(
            "  {name} {:>8.1} ms   {:>5.1}x the {:.0} ms poll interval",
            v.as_secs_f64() * 1e3,
            v.as_secs_f64() / poll,
            poll * 1e3
        );
    }
}
