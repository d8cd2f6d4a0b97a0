//! Measures the move of an existing database to incremental auto-vacuum
//! (schema version 4 -> 5): the one-time `VACUUM INTO` copy made at the
//! first open by a build with schema version 5.
//!
//! `cargo run -p agentcomputer-fs --example vacuum_migration [MIB] [DIR]`
//! (MIB: content to store, default 512; DIR: where the database goes,
//! default the system temp dir.)
//!
//! Builds a database holding MIB of files (1 MiB each) and 20,000 small
//! files, turns it back into what a version-4 build left (no auto-vacuum,
//! schema version 4), then times `Fs::open` (which rebuilds and migrates)
//! and reports the file sizes before, during (peak of file + copy) and after.

use std::time::Instant;

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO};

const MIB: u64 = 1 << 20;

fn len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().map(|a| a.parse().expect("MIB")).unwrap_or(512);
    let base = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("fs.db");
    {
        let fs = Fs::create(
            &path,
            Limits {
                max_bytes: (mib + 64) * MIB,
                max_inodes: 1_000_000,
            },
        )
        .unwrap();
        let block = vec![0x5a_u8; MIB as usize];
        for i in 0..mib {
            let f = fs
                .mknod(
                    ROOT_INO,
                    format!("big{i}").as_bytes(),
                    FileKind::RegularFile,
                    0o644,
                    0,
                    Owner::ROOT,
                )
                .unwrap();
            fs.write(f.ino, 0, &block).unwrap();
        }
        for i in 0..20_000 {
            let f = fs
                .mknod(
                    ROOT_INO,
                    format!("small{i}").as_bytes(),
                    FileKind::RegularFile,
                    0o644,
                    0,
                    Owner::ROOT,
                )
                .unwrap();
            fs.write(f.ino, 0, b"small file").unwrap();
        }
    }
    // Back to what a version-4 build wrote: no auto-vacuum, version 4.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA auto_vacuum = NONE; VACUUM;
             UPDATE meta SET value = 4 WHERE key = 'schema_version';",
        )
        .unwrap();
        let mode: i64 = conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 0);
    }
    let before = len(&path);
    let copy = dir.path().join("fs.db.vacuum");
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (peak, stop, path, copy) = (peak.clone(), stop.clone(), path.clone(), copy.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut wal = path.as_os_str().to_owned();
                wal.push("-wal");
                let now = len(&path) + len(&copy) + len(std::path::Path::new(&wal));
                peak.fetch_max(now, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let t = Instant::now();
    let fs = Fs::open(&path).unwrap();
    let took = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().unwrap();
    let after = len(&path);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    println!(
        "| {mib} MiB + 20,000 small files | {:.2} s | {} MB | {} MB | {} MB |",
        took.as_secs_f64(),
        before / 1_000_000,
        peak.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000,
        after / 1_000_000,
    );
}
