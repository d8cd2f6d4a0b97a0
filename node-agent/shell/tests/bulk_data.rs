//! Bulk data through the shell's redirections costs about what an upload
//! (`put`) of the same bytes costs: timed against the engine's own upload
//! path in the same run (printed, for docs/benchmarks.md), and checked by
//! what it depends on, the number of engine commits.

mod common;

use agentcomputer_fs::{Change, Owner, ROOT_INO};
use common::Computer;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BYTES: usize = 50_000_000;
/// The engine write the runtime gathers appends into (1 MiB).
const FLUSH: usize = 1 << 20;

/// CPU time this process has used (user and system), from
/// `/proc/self/stat`: on a busy machine the wall clock measures the
/// neighbours too.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime), counted from the state (field 3).
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Wall and CPU time of `f`.
async fn measure<F: std::future::Future<Output = ()>>(f: F) -> (Duration, Duration) {
    let (wall, cpu0) = (Instant::now(), cpu());
    f.await;
    (wall.elapsed(), cpu() - cpu0)
}

/// What `put` does in the node agent: an unnamed file written in 1 MiB
/// messages, linked in and synced once.
fn put(c: &Computer, name: &str, data: &[u8]) {
    let (attr, _open) = c.fs.create_unnamed(ROOT_INO, 0o644, Owner::ROOT).unwrap();
    let mut at = 0u64;
    for chunk in data.chunks(1 << 20) {
        let mut done = 0;
        while done < chunk.len() {
            let n = c.fs.write(attr.ino, at, &chunk[done..]).unwrap();
            done += n;
            at += n as u64;
        }
    }
    c.fs.link_unnamed(attr.ino, ROOT_INO, name.as_bytes(), true)
        .unwrap();
    c.fs.fsync(Some(attr.ino)).unwrap();
}

#[tokio::test]
async fn redirected_bulk_data_costs_about_what_an_upload_costs() {
    let c = Computer::new();
    let zeros = vec![0u8; BYTES];
    let upload = measure(async { put(&c, "uploaded", &zeros) }).await;
    let head = measure(async {
        c.sh("head -c 50000000 /dev/zero > z").await.ok();
    })
    .await;
    let cat = measure(async {
        c.sh("cat z > z2").await.ok();
    })
    .await;
    let ratio = |d: Duration, of: Duration| d.as_secs_f64() / of.as_secs_f64().max(0.01);
    let show = |what: &str, (wall, cpu): (Duration, Duration)| {
        format!(
            "{what}: wall {:.0} ms ({:.2}x put), cpu {:.0} ms ({:.2}x put)",
            wall.as_secs_f64() * 1e3,
            ratio(wall, upload.0),
            cpu.as_secs_f64() * 1e3,
            ratio(cpu, upload.1)
        )
    };
    eprintln!("{}", show("put", upload));
    eprintln!("{}", show("head -c 50000000 /dev/zero > z", head));
    eprintln!("{}", show("cat z > z2", cat));
    assert_eq!(c.read("z").len(), BYTES);
    assert_eq!(c.read("z2"), zeros);
    // What the numbers above depend on, asserted without a clock: the
    // engine commits per 50 MB, about one per MiB (it was one per 4 KiB
    // piece of output, ~12,000).
    for script in ["head -c 50000000 /dev/zero > z3", "cat z3 > z4"] {
        let changes = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&changes);
        let id = c.fs.subscribe(Box::new(move |change| {
            if matches!(change, Change::Inode(_)) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }));
        c.sh(script).await.ok();
        c.fs.unsubscribe(id);
        let n = changes.load(Ordering::Relaxed);
        assert!(
            n <= BYTES / FLUSH + 10,
            "{script}: {n} inode changes, more than one per MiB written"
        );
    }
}
