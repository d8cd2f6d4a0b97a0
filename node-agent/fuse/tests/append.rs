//! `O_APPEND` writes through the mount land whole and contiguous while
//! other runtimes (the engine, as the API, the shell and JavaScript write)
//! append to the same file at the same time.

mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};

use agentcomputer_fs::{Owner, ROOT_INO, WriteMode};
use common::mount_new;

/// One record: `R`, its number, filler up to `len - 1` bytes, and `\n`.
fn record(i: usize, len: usize) -> Vec<u8> {
    let mut r = format!("R{i:07}:").into_bytes();
    let fill = b'a' + (i % 26) as u8;
    r.resize(len - 1, fill);
    r.push(b'\n');
    r
}

/// Appends `count` records of `len` bytes, one write(2) each from a buffer
/// `skew` bytes past a page boundary, through the mount while the engine
/// appends short lines to the same file; then checks that every record is
/// whole and every engine line is intact.
fn appends_stay_whole(count: usize, len: usize, skew: usize) {
    let Some(m) = mount_new() else { return };
    let path = m.path("log");
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let done = AtomicBool::new(false);
    let engine_lines = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut n = 0usize;
            while !done.load(Ordering::Relaxed) {
                m.fs.write_all(
                    ROOT_INO,
                    b"log",
                    format!("e{n}\n").as_bytes(),
                    WriteMode::Append,
                    0o644,
                    Owner::ROOT,
                )
                .unwrap();
                n += 1;
            }
            n
        });
        let mut buf = vec![0u8; len + 8192];
        let start = buf.as_ptr().align_offset(4096) + skew;
        for i in 0..count {
            // One write(2) per record (write_all would retry a short one).
            buf[start..start + len].copy_from_slice(&record(i, len));
            let r = &buf[start..start + len];
            let n = nix::unistd::write(&log, r).unwrap();
            assert_eq!(n, r.len(), "short write of record {i}");
        }
        log.flush().unwrap();
        done.store(true, Ordering::Relaxed);
        other.join().unwrap()
    });
    let data = m.fs.read_all(ino).unwrap();
    let mut records = Vec::new();
    let mut engine = Vec::new();
    let mut torn = Vec::new();
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if line.first() == Some(&b'e') && line.len() < 16 {
            engine.push(String::from_utf8_lossy(line).into_owned());
            continue;
        }
        let whole = (line.len() == len - 1)
            .then(|| {
                std::str::from_utf8(&line[1..8])
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok())
            })
            .flatten()
            .filter(|&i| i < count && record(i, len)[..len - 1] == *line);
        if let Some(i) = whole {
            records.push(i);
        } else {
            torn.push(String::from_utf8_lossy(&line[..line.len().min(24)]).into_owned());
        }
    }
    assert!(
        torn.is_empty(),
        "{} torn records, first {:?}",
        torn.len(),
        &torn[..torn.len().min(5)]
    );
    assert!(
        records == (0..count).collect::<Vec<_>>(),
        "records lost or out of order"
    );
    let want: Vec<String> = (0..engine_lines).map(|n| format!("e{n}")).collect();
    assert!(engine == want, "engine lines lost or out of order");
    assert!(engine_lines > 0, "the other writer never ran");
}

/// Records that cross page boundaries at every offset (through the page
/// cache the kernel would send such a write as several requests).
#[test]
fn o_append_records_are_not_torn_by_concurrent_appends() {
    appends_stay_whole(3000, 3000, 100);
}

/// One write(2) of 1 MiB - 4 KiB from a buffer at any alignment, and of the
/// mount's whole max_write (1 MiB) from a page-aligned buffer, also lands
/// whole: each fits the kernel's 256 pages per request.
#[test]
fn o_append_writes_up_to_max_write_land_whole() {
    appends_stay_whole(16, (1 << 20) - 4096, 100);
    appends_stay_whole(16, 1 << 20, 0);
}
