//! A checkpoint run on another connection (a backup shipper's) grows the
//! database file behind the writer's memory map. Told of it
//! (`WriterHold::checkpointed`), the writer maps the file again before its
//! next transaction, so rewriting a file reads its pages through the map
//! instead of with one `pread(2)` each.

use agentcomputer_fs::{Fs, Limits, Owner, ROOT_INO, WriteMode};

const SIZE: usize = 24 << 20;
const PIECE: usize = 128 << 10;

/// Read system calls this process made so far (`syscr` in
/// `/proc/self/io`, proc(5)). This test binary runs one test, so no other
/// test's reads are counted.
fn read_syscalls() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscr: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn after_an_outside_checkpoint_the_writer_reads_the_grown_file_through_its_map() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    fs.write_all(
        ROOT_INO,
        b"big",
        &data,
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
    let ino = fs.resolve(ROOT_INO, b"/big", true).unwrap().ino;
    let before = std::fs::metadata(&db).unwrap().len();

    // The shipper's checkpoint, on a connection of its own: every frame
    // goes into the database file, which grows by the file's pages.
    let other = rusqlite::Connection::open(&db).unwrap();
    let (busy, log, done): (i64, i64, i64) = other
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!((busy, done), (0, log), "a complete checkpoint");
    let grown = std::fs::metadata(&db).unwrap().len();
    assert!(grown >= before + SIZE as u64, "{before} -> {grown} bytes");
    fs.writer_hold().checkpointed();

    // This transaction restarts the WAL, so every page is then read from
    // the database file.
    fs.write(ino, 0, &data[..1]).unwrap();
    let reads = read_syscalls();
    for (i, piece) in data.chunks(PIECE).enumerate() {
        fs.write(ino, (i * PIECE) as u64, piece).unwrap();
    }
    fs.fsync(Some(ino)).unwrap();
    let reads = read_syscalls() - reads;
    let pages = SIZE / 4096;
    // Without the new map: a read for every page, table pages included
    // (6,236 for these 6,144 data pages in one run; 4 with it).
    assert!(
        reads < pages as u64 / 8,
        "{reads} read calls rewriting {pages} pages"
    );
    assert_eq!(fs.read(ino, 0, SIZE).unwrap(), data);
}
