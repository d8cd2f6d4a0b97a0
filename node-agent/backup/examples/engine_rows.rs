//! The engine benchmark's write rows (`agentcomputer-fs`'s `engine_bench`)
//! without and with a shipper, against a local versitygw: what continuous
//! backup costs each kind of write through the API, where every call is its
//! own committed transaction.
//!
//! Rows: 10,000 empty files made in one directory; 2,000 tar-like files
//! (create, a 4 KiB write, then times, owner and mode as three calls);
//! 64 MiB written in 128 KiB calls then fsync; the same 64 MiB overwritten.
//! Each round runs every row on a fresh database twice, without and with a
//! shipper, the order alternating between rounds; the table gives medians
//! over `ENGINE_ROWS_ROUNDS` rounds (default 5) and the ratio with/without
//! (above 1: slower with backup), plus the writer thread's CPU.
//! `ENGINE_ROWS_ONLY=WORD` runs only the rows whose name holds `WORD`.
//!
//! The shipper runs as the node agent runs it: the engine leaves
//! checkpoints to it, and it is woken by the engine's change notifications
//! and polls once a second.
//!
//! Run: cargo run --release -p agentcomputer-backup --example engine_rows
//! (needs scripts/install-object-store.sh). Recorded in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO, SetAttr, TimeSet, Timespec};
use object_store::ObjectStore;
use object_store::path::Path;

const PIECE: usize = 128 * 1024;
const BIG: usize = 64 << 20;

/// One row's work on a fresh database.
type Work = fn(&Fs, &[u8]);

const ROWS: &[(&str, Work)] = &[
    ("create empty file (10k)", create_empty),
    (
        "tar-like file (create, 4 KiB write, 3 setattr; 2k)",
        tar_like,
    ),
    ("64 MiB sequential write + fsync", big_write),
    ("64 MiB overwrite + fsync", overwrite),
];

fn create_empty(fs: &Fs, _: &[u8]) {
    let d = fs.mkdir(ROOT_INO, b"many", 0o755, Owner::ROOT).unwrap().ino;
    for i in 0..10_000 {
        let name = format!("f{i}");
        fs.mknod(
            d,
            name.as_bytes(),
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap();
    }
}

fn tar_like(fs: &Fs, data: &[u8]) {
    let d = fs.mkdir(ROOT_INO, b"tar", 0o755, Owner::ROOT).unwrap().ino;
    let at = TimeSet::At(Timespec {
        sec: 1_700_000_000,
        nsec: 0,
    });
    for i in 0..2_000 {
        let name = format!("f{i}");
        let ino = fs
            .mknod(
                d,
                name.as_bytes(),
                FileKind::RegularFile,
                0o600,
                0,
                Owner::ROOT,
            )
            .unwrap()
            .ino;
        fs.write(ino, 0, &data[..4096]).unwrap();
        for set in [
            SetAttr {
                atime: Some(at),
                mtime: Some(at),
                ..SetAttr::default()
            },
            SetAttr {
                uid: Some(0),
                gid: Some(0),
                ..SetAttr::default()
            },
            SetAttr {
                perm: Some(0o644),
                ..SetAttr::default()
            },
        ] {
            fs.setattr(ino, &set).unwrap();
        }
    }
}

fn write_big(fs: &Fs, data: &[u8], ino: u64) {
    for i in 0..BIG / PIECE {
        fs.write(ino, (i * PIECE) as u64, data).unwrap();
    }
    fs.fsync(Some(ino)).unwrap();
}

fn big_write(fs: &Fs, data: &[u8]) {
    let ino = fs
        .mknod(
            ROOT_INO,
            b"big",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap()
        .ino;
    write_big(fs, data, ino);
}

fn overwrite(fs: &Fs, data: &[u8]) {
    // The file is made and written before the clock starts (see `run`),
    // so this row is the second pass only.
    let ino = fs.resolve(ROOT_INO, b"/big", true).unwrap().ino;
    write_big(fs, data, ino);
}

/// CPU time this thread has used (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer and a clock Linux supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs row `row` once on a fresh database, with a shipper if `store` is
/// given; returns wall and writer-CPU time of the work alone.
async fn run(
    dir: &std::path::Path,
    tag: &str,
    row: usize,
    store: Option<&Arc<dyn ObjectStore>>,
) -> (Duration, Duration) {
    let db = dir.join(format!("{tag}.db"));
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let shipper = match store {
        Some(store) => {
            fs.leave_checkpoints_to_backup().unwrap();
            let s = Shipper::start(
                &db,
                store.clone(),
                Path::from(format!("engine-rows/{tag}")),
                Options {
                    poll_interval: Duration::from_secs(1),
                    writer_hold: Some(fs.writer_hold()),
                    ..Options::default()
                },
            )
            .await
            .unwrap();
            let wake = s.wake_handle();
            fs.subscribe(Box::new(move |_| wake.wake()));
            Some(s)
        }
        None => None,
    };
    let data: Vec<u8> = (0..PIECE).map(|i| (i * 7 % 251) as u8).collect();
    let (name, work) = ROWS[row];
    if name.starts_with("64 MiB overwrite") {
        let (f2, d2) = (fs.clone(), data.clone());
        tokio::task::spawn_blocking(move || big_write(&f2, &d2))
            .await
            .unwrap();
        // Both runs start the clock with the first pass's checkpoint
        // behind them: without backup the engine ran it inside the first
        // pass; with backup the shipper runs it on its own thread, and
        // waiting for it here keeps the row about the second pass.
        if let Some(s) = &shipper {
            s.sync().await.unwrap();
        }
    }
    let f2 = fs.clone();
    let timed = tokio::task::spawn_blocking(move || {
        let (t, c) = (Instant::now(), thread_cpu());
        work(&f2, &data);
        (t.elapsed(), thread_cpu() - c)
    })
    .await
    .unwrap();
    if let Some(s) = shipper {
        s.stop().await.unwrap();
    }
    drop(fs);
    let _ = std::fs::remove_file(&db);
    timed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = common::ObjectServer::start() else {
        std::process::exit(2)
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let rounds: usize = std::env::var("ENGINE_ROWS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("load average at start: {}", load_average());
    println!("| row | without: ms | with backup: ms | ratio | writer CPU without: ms | with: ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    // `ENGINE_ROWS_ONLY=overwrite`: the rows whose name holds the word.
    let only = std::env::var("ENGINE_ROWS_ONLY").unwrap_or_default();
    for (row, (name, _)) in ROWS.iter().enumerate() {
        if !name.contains(only.as_str()) {
            continue;
        }
        let (mut plain, mut shipped) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for r in 0..rounds {
            // Alternate which goes first, so neither always runs on a
            // cooler machine.
            let order = if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with in order {
                let tag = format!("{row}-{r}-{with}");
                let (wall, cpu) = run(dir.path(), &tag, row, with.then_some(&store)).await;
                let into = if with { &mut shipped } else { &mut plain };
                into.0.push(wall);
                into.1.push(cpu);
            }
        }
        let (pw, pc) = (median(plain.0), median(plain.1));
        let (sw, sc) = (median(shipped.0), median(shipped.1));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} |",
            name,
            ms(pw),
            ms(sw),
            sw.as_secs_f64() / pw.as_secs_f64(),
            ms(pc),
            ms(sc)
        );
    }
    println!("load average at the end: {}", load_average());
}
