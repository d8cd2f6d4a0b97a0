//! Chooses the chunk size and SQLite page size: runs the same I/O on a fresh
//! database for each combination and prints a Markdown table.
//!
//! `cargo run --release -p agentcomputer-fs --example chunk_size [DIR]`
//! (DIR: where the databases go; default: the system temp dir.)
//!
//! Per combination: 64 MiB written sequentially in 128 KiB calls (the FUSE
//! default `max_write`) then one fsync; the same read back in 128 KiB
//! calls; 2,000 random 4 KiB overwrites inside that file, one transaction
//! each; 8 MiB appended in 4 KiB calls (small writes, the worst case for
//! large chunks); the database size for the 64 MiB file; and 2,000 empty
//! file creates (metadata: every commit writes whole pages).

use std::time::Instant;

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO, Tuning};

const MIB: u64 = 1 << 20;
const ROUNDS: usize = 3;

/// CPU time used by this thread, in seconds (`clock_gettime(2)`).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the clock id is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    let combos: Vec<(u32, u32)> = [16u32, 32, 64, 128, 256]
        .iter()
        .flat_map(|&c| [4u32, 16, 64].map(move |p| (c, p)))
        .collect();
    let mut results: Vec<Vec<[f64; 7]>> = vec![Vec::new(); combos.len()];
    for round in 0..ROUNDS {
        for (i, &(chunk_kib, page_kib)) in combos.iter().enumerate() {
            let path = dir
                .path()
                .join(format!("c{chunk_kib}-p{page_kib}-{round}.db"));
            let tuning = Tuning {
                chunk_size: chunk_kib * 1024,
                page_size: page_kib * 1024,
            };
            let cpu = thread_cpu();
            let r = run(&path, tuning);
            results[i].push([r.0, r.1, r.2, r.3, r.4, r.5, thread_cpu() - cpu]);
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
    println!(
        "| chunk KiB | page KiB | seq write MB/s | seq read MB/s | rand 4K write ops/s | 4K append MB/s | db MiB / 64 MiB | creates/s | CPU s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, &(chunk_kib, page_kib)) in combos.iter().enumerate() {
        let col = |k: usize| median(&mut results[i].iter().map(|r| r[k]).collect::<Vec<_>>());
        println!(
            "| {chunk_kib} | {page_kib} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {:.2} |",
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            col(5),
            col(6)
        );
    }
}

/// Deterministic bytes that don't compress to nothing.
fn block(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn run(path: &std::path::Path, tuning: Tuning) -> (f64, f64, f64, f64, f64, f64) {
    let fs = Fs::create_with(
        path,
        Limits {
            max_bytes: 1 << 40,
            max_inodes: 1 << 20,
        },
        tuning,
    )
    .expect("create");
    let f = fs
        .mknod(
            ROOT_INO,
            b"seq",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap()
        .ino;
    let piece = block(7, 128 * 1024);
    let total = 64 * MIB;

    let t = Instant::now();
    let mut off = 0;
    while off < total {
        fs.write(f, off, &piece).unwrap();
        off += piece.len() as u64;
    }
    fs.fsync(Some(f)).unwrap();
    let write = total as f64 / MIB as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut off = 0;
    while off < total {
        let got = fs.read(f, off, 128 * 1024).unwrap();
        assert_eq!(got.len(), 128 * 1024);
        off += got.len() as u64;
    }
    let read = total as f64 / MIB as f64 / t.elapsed().as_secs_f64();

    let small = block(9, 4096);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % (total / 4096)) * 4096;
        fs.write(f, off, &small).unwrap();
    }
    let random = n as f64 / t.elapsed().as_secs_f64();

    let db_mib = std::fs::metadata(path).unwrap().len() as f64 / MIB as f64;

    let g = fs
        .mknod(
            ROOT_INO,
            b"append",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap()
        .ino;
    let t = Instant::now();
    let mut off = 0;
    while off < 8 * MIB {
        fs.write(g, off, &small).unwrap();
        off += 4096;
    }
    let append = 8.0 / t.elapsed().as_secs_f64();

    let d = fs.mkdir(ROOT_INO, b"many", 0o755, Owner::ROOT).unwrap().ino;
    let t = Instant::now();
    for i in 0..2000 {
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
    let creates = 2000.0 / t.elapsed().as_secs_f64();
    (write, read, random, append, db_mib, creates)
}
