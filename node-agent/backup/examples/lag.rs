//! Backup lag under load: 10 databases, each committing 50 transactions of
//! 4 KiB a second for 10 s, each shipped by its own shipper to a local
//! versitygw. Prints the lag from a commit's return to the upload that
//! holds it (p50, p99, max), and the agent process's CPU time per 1000
//! commits with and without shipping (the baseline: the same load, no
//! shipper), as a ratio.
//!
//! Run: cargo run -p agentcomputer-backup --example lag   (needs
//! scripts/install-object-store.sh). `LAG_DATABASES=n` changes the number
//! of databases. Recorded in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{Fs, Limits};
use object_store::ObjectStore;
use object_store::path::Path;

const DATABASES: usize = 10;
const RATE: u64 = 50;
const SECONDS: u64 = 10;

fn databases() -> usize {
    std::env::var("LAG_DATABASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DATABASES)
}

/// CPU time (user + system) of this process so far.
fn cpu() -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

struct Run {
    lags: Vec<Duration>,
    cpu: Duration,
    commits: usize,
    objects: usize,
}

/// The write load on fresh databases in `dir`, shipped under `prefix` if `store` is given.
async fn run(dir: &std::path::Path, store: Option<Arc<dyn ObjectStore>>, tag: &str) -> Run {
    let mut dbs = Vec::new();
    for d in 0..databases() {
        let db = dir.join(format!("{tag}-{d}.db"));
        let fs = Fs::create(&db, Limits::default()).unwrap();
        // Without backup the engine checkpoints by itself, as in production.
        if store.is_some() {
            fs.leave_checkpoints_to_backup().unwrap();
        }
        let shipper = match &store {
            Some(s) => {
                // As the node agent runs it: woken by the engine's change
                // notifications, polling once a second.
                let shipper = Shipper::start(
                    &db,
                    s.clone(),
                    Path::from(format!("lag/{tag}/{d}")),
                    Options {
                        poll_interval: Duration::from_secs(1),
                        writer_hold: Some(fs.writer_hold()),
                        ..Options::default()
                    },
                )
                .await
                .unwrap();
                let wake = shipper.wake_handle();
                fs.subscribe(Box::new(move |_| wake.wake()));
                Some(shipper)
            }
            None => None,
        };
        dbs.push((fs, shipper));
    }
    let cpu0 = cpu();
    let mut tasks = Vec::new();
    for (fs, shipper) in dbs {
        // Commit times by transaction number (1-based, as the shipper counts).
        let commits: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let shipped: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
        let watcher = shipper.as_ref().map(|s| {
            let mut rx = s.shipped();
            let s2 = shipped.clone();
            tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    let at = rx.borrow_and_update().txn;
                    s2.lock().unwrap().push((at, Instant::now()));
                }
            })
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
    let mut out = Run {
        lags: Vec::new(),
        cpu: Duration::ZERO,
        commits: 0,
        objects: 0,
    };
    let mut stops = Vec::new();
    for (shipper, writer, watcher, commits, shipped) in tasks {
        tokio::task::spawn_blocking(move || writer.join().unwrap())
            .await
            .unwrap();
        let n = commits.lock().unwrap().len();
        out.commits += n;
        if let Some(shipper) = shipper {
            shipper.sync().await.unwrap();
            out.objects += shipper.positions_written().len();
            stops.push(shipper);
        }
        if let Some(w) = watcher {
            // The watcher hears of the last upload a moment after sync returned.
            while shipped
                .lock()
                .unwrap()
                .last()
                .is_none_or(|(t, _)| *t < n as u64)
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let commits = commits.lock().unwrap();
            let shipped = shipped.lock().unwrap();
            for (i, t) in commits.iter().enumerate() {
                let txn = i as u64 + 1;
                let up = shipped
                    .iter()
                    .find(|(n, _)| *n >= txn)
                    .expect("every commit shipped")
                    .1;
                out.lags.push(up.saturating_duration_since(*t));
            }
            w.abort();
        }
    }
    out.cpu = cpu() - cpu0;
    for s in stops {
        s.stop().await.unwrap();
    }
    out.lags.sort();
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = common::ObjectServer::start() else {
        std::process::exit(2)
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let n = databases();
    let base = run(dir.path(), None, "baseline").await;
    let shipped = run(dir.path(), Some(store), "shipped").await;
    let per_k = |r: &Run| r.cpu.as_secs_f64() * 1000.0 / r.commits as f64;
    println!(
        "backup, {n} databases x {RATE} commits/s x 4 KiB for {SECONDS} s ({} commits, {} objects):",
        shipped.commits, shipped.objects
    );
    let lags = &shipped.lags;
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p) as usize];
    for (name, v) in [
        ("p50", pct(0.5)),
        ("p99", pct(0.99)),
        ("max", *lags.last().unwrap()),
    ] {
        println!("  lag {name} {:>9.1} ms", v.as_secs_f64() * 1e3);
    }
    println!(
        "  agent CPU per 1000 commits: {:.2} s shipped, {:.2} s baseline (no shipper): {:.2}x",
        per_k(&shipped),
        per_k(&base),
        per_k(&shipped) / per_k(&base)
    );
}
