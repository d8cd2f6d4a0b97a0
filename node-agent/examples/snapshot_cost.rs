//! What snapshots, restores and forks cost, on the agent's own registry
//! with its continuous backup to a `file://` log (the local mechanism
//! docs/snapshots.md chose), for computers of each size in
//! `SNAPSHOT_SIZES_MIB` (default `10,1024`), filled with 1 MiB files:
//!
//! - disk: the database file, the log directory after the fill, and what
//!   20 snapshots add to it;
//! - snapshot latency (20 snapshots, p50/p99/max) while a writer commits
//!   4 KiB files back to back, and that writer's commit latency during the
//!   snapshots against a baseline run of the same length without them
//!   (how long a snapshot holds writers up);
//! - a restore of the computer to its first snapshot after the writer
//!   changed it, and a fork (a new computer from its state now).
//!
//! Run: cargo run --release -p agentcomputer-node-agent --example snapshot_cost
//! Recorded in docs/benchmarks.md ("Snapshots, restore and forks").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentcomputer_fs::{Fs, Limits, ROOT_INO};
use agentcomputer_node_agent::backup::{BackupTarget, BackupUrl};
use agentcomputer_node_agent::registry::{BackupIds, Registry, SnapshotSource};

fn write_file(fs: &Fs, name: &str, data: &[u8]) {
    fs.write_all(
        ROOT_INO,
        name.as_bytes(),
        data,
        agentcomputer_fs::WriteMode::Truncate,
        0o644,
        agentcomputer_fs::Owner::ROOT,
    )
    .unwrap();
}

fn du(path: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            du(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Commits 4 KiB files back to back until `stop`; returns each commit's latency.
fn writer(fs: Fs, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let page = vec![7u8; 4096];
        let mut lat = Vec::new();
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            write_file(&fs, &format!("w{}", i % 256), &page);
            lat.push(t.elapsed());
            i += 1;
        }
        lat
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // RUST_LOG=agentcomputer_backup=debug,agentcomputer_node_agent=info
    // shows where a restore's time goes.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let sizes: Vec<u64> = std::env::var("SNAPSHOT_SIZES_MIB")
        .unwrap_or_else(|_| "10,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for mib in sizes {
        let data = tempfile::tempdir().unwrap();
        let registry = Registry::new(data.path(), Duration::from_secs(600)).unwrap();
        let log = data.path().join("log");
        let url = BackupUrl::parse(&format!("file://{}", log.display())).unwrap();
        registry.set_backup(
            Arc::new(BackupTarget::open(&url).unwrap()),
            BackupIds::Random,
        );
        let name = format!("c{mib}");
        registry
            .create(
                &name,
                Limits {
                    max_bytes: (mib + 256) << 20,
                    ..Limits::default()
                },
                Default::default(),
            )
            .await
            .unwrap();
        let lease = registry.acquire(&name).await.unwrap();
        let fs = lease.fs().clone();
        let t = Instant::now();
        {
            let fs = fs.clone();
            tokio::task::spawn_blocking(move || {
                for i in 0..mib {
                    let body: Vec<u8> = (0..1 << 20).map(|j| ((i * 31 + j) % 251) as u8).collect();
                    write_file(&fs, &format!("f{i}"), &body);
                }
            })
            .await
            .unwrap();
        }
        registry.sync(&name).await.unwrap();
        let filled = t.elapsed();
        let db = data.path().join("computers").join(&name).join("fs.db");
        let db_bytes = std::fs::metadata(&db).unwrap().len()
            + std::fs::metadata(db.with_extension("db-wal"))
                .map(|m| m.len())
                .unwrap_or(0);
        let log_before = du(&log);
        // The alternative a local snapshot could use: a full copy of the
        // database in one read transaction (`VACUUM INTO`, the Backup call).
        let copy = data.path().join("copy.db");
        let t = Instant::now();
        let copied = {
            let fs = fs.clone();
            let copy = copy.clone();
            tokio::task::spawn_blocking(move || fs.backup_to(&copy).unwrap())
                .await
                .unwrap()
        };
        let vacuum_into = t.elapsed();
        std::fs::remove_file(&copy).unwrap();

        // Baseline: the writer alone for as long as the snapshots take.
        let stop = Arc::new(AtomicBool::new(false));
        let w = writer(fs.clone(), stop.clone());
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, Ordering::SeqCst);
        let mut base = w.join().unwrap();
        base.sort();

        // Snapshots of a computer nobody writes to.
        let mut idle = Vec::new();
        for n in 0..10 {
            let t = Instant::now();
            registry
                .snapshot(&name, Some(&format!("{name}-idle{n}")))
                .await
                .unwrap();
            idle.push(t.elapsed());
        }
        idle.sort();
        for n in 0..10 {
            registry
                .delete_snapshot(&name, &format!("{name}-idle{n}"))
                .await
                .unwrap();
        }

        let log_mid = du(&log);
        let stop = Arc::new(AtomicBool::new(false));
        let w = writer(fs.clone(), stop.clone());
        let mut took = Vec::new();
        let started = Instant::now();
        for n in 0..20 {
            let t = Instant::now();
            registry
                .snapshot(&name, Some(&format!("{name}-s{n}")))
                .await
                .unwrap();
            took.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let window = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        let mut during = w.join().unwrap();
        during.sort();
        took.sort();
        registry.sync(&name).await.unwrap();
        let log_after = du(&log);
        let snap_meta = du(&log.join("snapshots"))
            + du(&log
                .join("computers")
                .join(
                    std::fs::read_dir(log.join("computers"))
                        .unwrap()
                        .next()
                        .unwrap()
                        .unwrap()
                        .file_name(),
                )
                .join("snapshots"));
        drop(lease);
        drop(fs);

        // The baseline restores and forks are compared with, in this run:
        // the database file copied and synced (what any materialisation of
        // it costs at least on this disk, whatever the load).
        let copied_file = {
            let db = db.clone();
            let copy = data.path().join("copy-of-file.db");
            tokio::task::spawn_blocking(move || {
                let t = Instant::now();
                std::fs::copy(&db, &copy).unwrap();
                std::fs::File::open(&copy).unwrap().sync_all().unwrap();
                let took = t.elapsed();
                std::fs::remove_file(&copy).unwrap();
                took
            })
            .await
            .unwrap()
        };

        let t = Instant::now();
        registry
            .restore_snapshot(&name, &format!("{name}-s0"))
            .await
            .unwrap();
        let restore = t.elapsed();
        let t = Instant::now();
        registry
            .create_from(
                &format!("{name}-fork"),
                &SnapshotSource::Computer(name.clone()),
            )
            .await
            .unwrap();
        let fork = t.elapsed();
        let t = Instant::now();
        drop(registry.acquire(&format!("{name}-fork")).await.unwrap());
        let fork_open = t.elapsed();

        println!(
            "== {mib} MiB computer (filled and shipped in {})",
            ms(filled)
        );
        println!(
            "disk: database file and WAL {} MiB, log after fill {} MiB ({:.2}x a compact copy of the database, {} MiB); a full copy (VACUUM INTO) took {}",
            db_bytes >> 20,
            log_before >> 20,
            log_before as f64 / copied as f64,
            copied >> 20,
            ms(vacuum_into)
        );
        println!(
            "disk: 20 snapshots' records {} bytes; log grew {} KiB during the writer's {} s with snapshots (and {} KiB in the {} s without)",
            snap_meta,
            (log_after - log_mid) >> 10,
            window.as_secs(),
            (log_mid - log_before) >> 10,
            3
        );
        println!(
            "snapshot of an idle computer: p50 {}, max {} (10)",
            ms(pct(&idle, 0.5)),
            ms(*idle.last().unwrap())
        );
        println!(
            "snapshot: p50 {}, p99 {}, max {} (20, a writer committing 4 KiB files back to back)",
            ms(pct(&took, 0.5)),
            ms(pct(&took, 0.99)),
            ms(*took.last().unwrap())
        );
        println!(
            "writer commit latency: without snapshots p50 {} p99 {} max {} ({} commits); during snapshots p50 {} p99 {} max {} ({} commits)",
            ms(pct(&base, 0.5)),
            ms(pct(&base, 0.99)),
            ms(*base.last().unwrap()),
            base.len(),
            ms(pct(&during, 0.5)),
            ms(pct(&during, 0.99)),
            ms(*during.last().unwrap()),
            during.len()
        );
        let x = |d: Duration| d.as_secs_f64() / copied_file.as_secs_f64();
        println!(
            "baseline: the database file ({} MiB) copied and synced in {}",
            std::fs::metadata(&db).map(|m| m.len() >> 20).unwrap_or(0),
            ms(copied_file)
        );
        println!(
            "restore to the first snapshot {} ({:.2}x the baseline); fork {} ({:.2}x) + first open {} ({:.2}x)",
            ms(restore),
            x(restore),
            ms(fork),
            x(fork),
            ms(fork_open),
            x(fork_open)
        );
    }
}
