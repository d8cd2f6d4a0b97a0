//! What shipping costs the node, in one run against a local versitygw:
//!
//! 1. the write path: one database committing 4 KiB files back to back,
//!    per-commit latency (p50, p99) and commits a second, without and with
//!    a shipper, alternated over `OVERHEAD_ROUNDS` rounds (default 3);
//! 2. idle open computers: `OVERHEAD_OPEN` databases (default 200) open
//!    with and without a shipper each: resident memory per open database,
//!    and the process's CPU over 20 s of no writes as a share of one core;
//!    also the requests the idle shippers made (uploads; their polls read
//!    the WAL index only).
//!
//! `OVERHEAD_CHECKPOINT_PAGES` and `OVERHEAD_INTERVAL_MS` change the
//! shipper's checkpoint threshold and upload interval; `OVERHEAD_RACE=1`
//! has the shipper race for SQLite's write lock to end a WAL cycle, as it
//! did before the engine lent it its writer.
//!
//! Run: cargo run --release -p agentcomputer-backup --example overhead
//! (needs scripts/install-object-store.sh). Recorded in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{Fs, Limits};
use object_store::ObjectStore;
use object_store::path::Path;

/// Shipper options as the node agent uses them: woken by the engine's
/// change notifications, polling once a second.
fn agent_options() -> Options {
    let defaults = Options::default();
    Options {
        poll_interval: Duration::from_secs(1),
        // Knobs to find where the write path's cost goes.
        checkpoint_pages: env_or(
            "OVERHEAD_CHECKPOINT_PAGES",
            defaults.checkpoint_pages as usize,
        ) as u64,
        min_upload_interval: Duration::from_millis(env_or(
            "OVERHEAD_INTERVAL_MS",
            defaults.min_upload_interval.as_millis() as usize,
        ) as u64),
        ..defaults
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user + system) of this process so far.
fn cpu() -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Resident memory of this process, bytes (/proc/self/statm, pages).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Salt-1 of the WAL header of `db` (one more at each WAL restart) and
/// the WAL file's length.
fn wal_state(db: &std::path::Path) -> (u32, u64) {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(&wal).unwrap_or_default();
    let salt1 = bytes
        .get(16..20)
        .map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap()));
    (salt1, bytes.len() as u64)
}

/// Commits for `secs` seconds back to back; returns sorted latencies.
fn write_for(fs: &Fs, secs: f64) -> Vec<Duration> {
    let start = Instant::now();
    let mut lat = Vec::new();
    let mut k = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        common::write_file(fs, &format!("f{}", k % 64), &common::content(k, 4096));
        lat.push(t.elapsed());
        k += 1;
    }
    lat.sort();
    lat
}

async fn write_path(dir: &std::path::Path, store: &Arc<dyn ObjectStore>) {
    let rounds = env_or("OVERHEAD_ROUNDS", 3);
    let (mut plain, mut shipped) = (Vec::new(), Vec::new());
    let mut uploads = 0;
    let (mut restarts, mut largest_wal) = (0, 0);
    for r in 0..rounds {
        for with in [false, true] {
            let db = dir.join(format!("w-{r}-{with}.db"));
            let fs = Fs::create(&db, Limits::default()).unwrap();
            // Without backup the engine checkpoints by itself, as it does
            // in production; with it, the shipper does.
            if with {
                fs.leave_checkpoints_to_backup().unwrap();
            }
            let shipper = if with {
                Some(
                    Shipper::start(
                        &db,
                        store.clone(),
                        Path::from(format!("overhead/w/{r}")),
                        Options {
                            // OVERHEAD_RACE=1: race for SQLite's write lock
                            // instead of borrowing the engine's writer.
                            writer_hold: (env_or("OVERHEAD_RACE", 0) == 0)
                                .then(|| fs.writer_hold()),
                            ..agent_options()
                        },
                    )
                    .await
                    .unwrap(),
                )
            } else {
                None
            };
            if let Some(s) = &shipper {
                let wake = s.wake_handle();
                fs.subscribe(Box::new(move |_| wake.wake()));
            }
            // One commit first, so the WAL has a header whose salt the
            // restarts are counted from.
            common::write_file(&fs, "start", b"start");
            let f2 = fs.clone();
            let (salt_before, _) = wal_state(&db);
            let lat = tokio::task::spawn_blocking(move || write_for(&f2, 3.0))
                .await
                .unwrap();
            if let Some(s) = shipper {
                let (salt_after, wal_len) = wal_state(&db);
                restarts += salt_after.wrapping_sub(salt_before);
                largest_wal = largest_wal.max(wal_len);
                let at = s.stop().await.unwrap();
                uploads += at.uploads;
                shipped.push(lat);
            } else {
                plain.push(lat);
            }
        }
    }
    let merge = |v: Vec<Vec<Duration>>| {
        let mut all: Vec<Duration> = v.into_iter().flatten().collect();
        all.sort();
        all
    };
    let (plain, shipped) = (merge(plain), merge(shipped));
    let secs = 3.0 * rounds as f64;
    let rate = |v: &[Duration]| v.len() as f64 / secs;
    println!("write path, 4 KiB commits back to back, {rounds} x 3 s each:");
    println!(
        "  without backup: {:.0} commits/s, p50 {:?}, p99 {:?}",
        rate(&plain),
        pct(&plain, 0.5),
        pct(&plain, 0.99)
    );
    println!(
        "  with backup:    {:.0} commits/s, p50 {:?}, p99 {:?} ({uploads} uploads, {restarts} WAL restarts, WAL file at most {:.1} MiB at the end of a run)",
        rate(&shipped),
        pct(&shipped, 0.5),
        pct(&shipped, 0.99),
        largest_wal as f64 / (1 << 20) as f64
    );
    println!(
        "  ratio (with / without): throughput {:.3}x, p50 {:.3}x, p99 {:.3}x",
        rate(&shipped) / rate(&plain),
        pct(&shipped, 0.5).as_secs_f64() / pct(&plain, 0.5).as_secs_f64(),
        pct(&shipped, 0.99).as_secs_f64() / pct(&plain, 0.99).as_secs_f64()
    );
}

async fn idle_open(dir: &std::path::Path, store: &Arc<dyn ObjectStore>) {
    let n = env_or("OVERHEAD_OPEN", 200);
    let idle = Duration::from_secs(20);
    let base_rss = rss();
    let mut open = Vec::new();
    for i in 0..n {
        let db = dir.join(format!("o-{i}.db"));
        let fs = Fs::create(&db, Limits::default()).unwrap();
        common::write_file(&fs, "hello", b"a small file");
        fs.leave_checkpoints_to_backup().unwrap();
        open.push((db, fs));
    }
    let fs_rss = rss();
    let c0 = cpu();
    tokio::time::sleep(idle).await;
    let fs_cpu = cpu() - c0;
    let mut shippers = Vec::new();
    for (i, (db, fs)) in open.iter().enumerate() {
        let shipper = Shipper::start(
            db,
            store.clone(),
            Path::from(format!("overhead/o/{i}")),
            agent_options(),
        )
        .await
        .unwrap();
        let wake = shipper.wake_handle();
        fs.subscribe(Box::new(move |_| wake.wake()));
        shippers.push(shipper);
    }
    let started: u64 = shippers.iter().map(|s| s.shipped().borrow().uploads).sum();
    let ship_rss = rss();
    let c0 = cpu();
    tokio::time::sleep(idle).await;
    let ship_cpu = cpu() - c0;
    let after: u64 = shippers.iter().map(|s| s.shipped().borrow().uploads).sum();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("{n} open databases, idle {} s:", idle.as_secs());
    println!(
        "  resident memory: {:.1} MiB before, {:.1} MiB open ({:.2} MiB each), {:.1} MiB with shippers ({:.2} MiB each for the shipper, {:.2} MiB each in all)",
        mib(base_rss),
        mib(fs_rss),
        mib(fs_rss.saturating_sub(base_rss)) / n as f64,
        mib(ship_rss),
        mib(ship_rss.saturating_sub(fs_rss)) / n as f64,
        mib(ship_rss.saturating_sub(base_rss)) / n as f64
    );
    println!(
        "  CPU while idle: {:.2} % of one core open, {:.2} % with shippers",
        fs_cpu.as_secs_f64() * 100.0 / idle.as_secs_f64(),
        ship_cpu.as_secs_f64() * 100.0 / idle.as_secs_f64()
    );
    println!(
        "  uploads while idle: {} (after the {started} starting snapshots)",
        after - started
    );
    for s in &shippers {
        s.stop().await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = common::ObjectServer::start() else {
        std::process::exit(2)
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    write_path(dir.path(), &store).await;
    if env_or("OVERHEAD_OPEN", 200) > 0 {
        idle_open(dir.path(), &store).await;
    }
}
