//! Engine throughput next to the same work on the local disk via std::fs.
//!
//! `cargo run --release -p agentcomputer-fs --example engine_bench [DIR]`
//! (DIR: where both the database and the ext4 files go; default: the
//! system temp dir.) Each engine call is its own committed transaction, as
//! through the API; the disk side does the equivalent syscalls. Ratio is
//! engine / disk (above 1: the engine is faster). The last column is the
//! CPU time the engine's thread used for that work.

use std::io::{Read, Write};
use std::time::Instant;

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO, SetAttr, TimeSet, Timespec};

const FILES: usize = 10_000;
const MIB: usize = 1 << 20;
const TOTAL: usize = 64 * MIB;
const PIECE: usize = 128 * 1024;
/// Files in the tar-like sequence, and bytes written to each.
const TAR_FILES: usize = 2_000;
const TAR_BYTES: usize = 4096;

fn rate(n: f64, t: Instant) -> f64 {
    n / t.elapsed().as_secs_f64()
}

/// CPU time used by this thread, in seconds (`clock_gettime(2)`): on a busy
/// machine it shows the engine's own cost apart from waiting for a core.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the clock id is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    let fs = Fs::create(&dir.path().join("bench.db"), Limits::default()).unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let o = Owner::ROOT;
    let data: Vec<u8> = (0..PIECE).map(|i| (i * 7 % 251) as u8).collect();
    let mut rows: Vec<(&str, &str, f64, f64, f64)> = Vec::new();

    // Creates: 10k empty files in one directory.
    let d = fs.mkdir(ROOT_INO, b"many", 0o755, o).unwrap().ino;
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..FILES {
        fs.mknod(
            d,
            format!("f{i}").as_bytes(),
            FileKind::RegularFile,
            0o644,
            0,
            o,
        )
        .unwrap();
    }
    let (e, ec) = (rate(FILES as f64, t), thread_cpu() - c);
    let many = disk.join("many");
    std::fs::create_dir(&many).unwrap();
    let t = Instant::now();
    for i in 0..FILES {
        std::fs::File::create_new(many.join(format!("f{i}"))).unwrap();
    }
    rows.push(("create empty file", "files/s", e, rate(FILES as f64, t), ec));

    // Stats by path.
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..FILES {
        fs.resolve(ROOT_INO, format!("/many/f{i}").as_bytes(), true)
            .unwrap();
    }
    let (e, ec) = (rate(FILES as f64, t), thread_cpu() - c);
    let t = Instant::now();
    for i in 0..FILES {
        std::fs::metadata(many.join(format!("f{i}"))).unwrap();
    }
    rows.push(("stat by path", "stats/s", e, rate(FILES as f64, t), ec));

    // Tar-like extraction: per file create, write, then utimens, chown and
    // chmod as separate calls (what `tar x` does through FUSE).
    let td = fs.mkdir(ROOT_INO, b"tar", 0o755, o).unwrap().ino;
    let mtime = Timespec {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..TAR_FILES {
        let ino = fs
            .mknod(
                td,
                format!("f{i}").as_bytes(),
                FileKind::RegularFile,
                0o600,
                0,
                o,
            )
            .unwrap()
            .ino;
        fs.write(ino, 0, &data[..TAR_BYTES]).unwrap();
        let times = SetAttr {
            atime: Some(TimeSet::At(mtime)),
            mtime: Some(TimeSet::At(mtime)),
            ..SetAttr::default()
        };
        fs.setattr(ino, &times).unwrap();
        let owner = SetAttr {
            uid: Some(o.uid),
            gid: Some(o.gid),
            ..SetAttr::default()
        };
        fs.setattr(ino, &owner).unwrap();
        let mode = SetAttr {
            perm: Some(0o644),
            ..SetAttr::default()
        };
        fs.setattr(ino, &mode).unwrap();
    }
    let (e, ec) = (rate(TAR_FILES as f64, t), thread_cpu() - c);
    let tar = disk.join("tar");
    std::fs::create_dir(&tar).unwrap();
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let t = Instant::now();
    for i in 0..TAR_FILES {
        let mut file = std::fs::File::create_new(tar.join(format!("f{i}"))).unwrap();
        file.write_all(&data[..TAR_BYTES]).unwrap();
        let st = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        file.set_times(std::fs::FileTimes::new().set_accessed(st).set_modified(st))
            .unwrap();
        std::os::unix::fs::fchown(&file, Some(uid.as_raw()), Some(gid.as_raw())).unwrap();
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
    }
    rows.push((
        "tar-like file (create, 4 KiB write, 3 setattr)",
        "files/s",
        e,
        rate(TAR_FILES as f64, t),
        ec,
    ));

    // 64 MiB sequential write in 128 KiB calls, then fsync.
    let f = fs
        .mknod(ROOT_INO, b"big", FileKind::RegularFile, 0o644, 0, o)
        .unwrap()
        .ino;
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..TOTAL / PIECE {
        fs.write(f, (i * PIECE) as u64, &data).unwrap();
    }
    fs.fsync(Some(f)).unwrap();
    let (e, ec) = (rate(64.0, t), thread_cpu() - c);
    let big = disk.join("big");
    let t = Instant::now();
    let mut file = std::fs::File::create(&big).unwrap();
    for _ in 0..TOTAL / PIECE {
        file.write_all(&data).unwrap();
    }
    file.sync_all().unwrap();
    drop(file);
    rows.push((
        "64 MiB sequential write + fsync",
        "MB/s",
        e,
        rate(64.0, t),
        ec,
    ));

    // The same 64 MiB overwritten in place (the database does not grow).
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..TOTAL / PIECE {
        fs.write(f, (i * PIECE) as u64, &data).unwrap();
    }
    fs.fsync(Some(f)).unwrap();
    let (e, ec) = (rate(64.0, t), thread_cpu() - c);
    let t = Instant::now();
    let mut file = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    for _ in 0..TOTAL / PIECE {
        file.write_all(&data).unwrap();
    }
    file.sync_all().unwrap();
    drop(file);
    rows.push(("64 MiB overwrite + fsync", "MB/s", e, rate(64.0, t), ec));

    // 64 MiB sequential read in 128 KiB calls (both from warm caches).
    let (t, c) = (Instant::now(), thread_cpu());
    for i in 0..TOTAL / PIECE {
        assert_eq!(fs.read(f, (i * PIECE) as u64, PIECE).unwrap().len(), PIECE);
    }
    let (e, ec) = (rate(64.0, t), thread_cpu() - c);
    let t = Instant::now();
    let mut file = std::fs::File::open(&big).unwrap();
    let mut buf = vec![0u8; PIECE];
    for _ in 0..TOTAL / PIECE {
        file.read_exact(&mut buf).unwrap();
    }
    rows.push(("64 MiB sequential read", "MB/s", e, rate(64.0, t), ec));

    println!("| work | unit | engine | ext4 (std::fs) | ratio | engine CPU s |");
    println!("|---|---|---:|---:|---:|---:|");
    for (work, unit, e, x, cpu) in rows {
        println!(
            "| {work} | {unit} | {e:.0} | {x:.0} | {:.2} | {cpu:.2} |",
            e / x
        );
    }
}
