//! What whole `O_APPEND` writes cost: opens and closes (the kernel sends
//! OPEN and RELEASE since the server chooses direct I/O per open), and
//! appends of log lines, records and 1 MiB blocks through a real mount of
//! a fresh engine. Prints one line per measurement; docs/benchmarks.md
//! keeps the numbers of a run before and after the change.
//!
//! `cargo run -p agentcomputer-fuse --example append_cost` (as root or with
//! fusermount3; needs /dev/fuse).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{MountOptions, mount};

/// Runs `op` for about `budget` and returns calls per second.
fn rate(budget: Duration, mut op: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..16 {
            op();
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default())?;
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt)?;
    let handle = mount(fs, &mnt, MountOptions::default())?;
    let budget = Duration::from_secs(3);

    let plain = mnt.join("plain");
    std::fs::write(&plain, b"x")?;
    let opens = rate(budget, || drop(std::fs::File::open(&plain).unwrap()));
    println!("open+close O_RDONLY: {opens:.0}/s");

    let read = std::fs::File::open(&plain)?;
    let cached_reads = rate(budget, || {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 1];
        read.read_at(&mut b, 0).unwrap();
    });
    println!("1-byte pread, cached: {cached_reads:.0}/s");

    for (name, len) in [("100 B line", 100usize), ("3000 B record", 3000)] {
        let path = mnt.join(format!("log-{len}"));
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(&path)?;
        let line = vec![b'l'; len];
        let appends = rate(budget, || log.write_all(&line).unwrap());
        println!(
            "O_APPEND {name}: {appends:.0}/s ({:.1} MB/s)",
            appends * len as f64 / 1e6
        );
        std::fs::remove_file(&path)?;
    }

    let path = mnt.join("blocks");
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)?;
    let block = vec![b'b'; 1 << 20];
    let start = Instant::now();
    let mut written = 0usize;
    while start.elapsed() < budget {
        log.write_all(&block)?;
        written += block.len();
        if written >= 256 << 20 {
            // Stay small on disk: start over.
            log.set_len(0)?;
        }
    }
    println!(
        "O_APPEND 1 MiB blocks: {:.0} MB/s",
        written as f64 / 1e6 / start.elapsed().as_secs_f64()
    );
    drop(log);
    drop(read);
    handle.unmount()?;
    Ok(())
}
