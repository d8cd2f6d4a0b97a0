//! Take-over of a live connection: a writer appends and fsyncs records
//! through a mount while the process serving it is killed with SIGKILL and
//! a new server takes the same kernel connection over (the test process
//! holds a duplicate of the descriptor, as the cluster's mounter and the
//! local descriptor holder do). The writer must never see an error, every
//! acknowledged record must be there, a file kept open across the kills
//! stays readable, and the mount's contents equal the engine's.
//! Needs root and /dev/fuse (prints SKIPPED otherwise).

mod common;

use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentcomputer_fs::{Fs, Limits, OpenOptions, ROOT_INO};
use nix::mount::{MntFlags, umount2};
use rand::Rng;

const SERVER: &str = env!("CARGO_BIN_EXE_agentcomputer-fuse");
const ROUNDS: usize = 12;

fn record(n: u64) -> String {
    format!("record {n:08} {}\n", "y".repeat((n % 89) as usize))
}

/// Starts a server on a duplicate of `conn` (as descriptor number of a
/// non-CLOEXEC dup); returns it and the `FUSE_INIT` record it printed.
fn start_server(db: &Path, conn: &OwnedFd, resume: Option<&str>) -> (Child, String) {
    // SAFETY: `conn` is open; the duplicate has no CLOEXEC, so the child
    // inherits it under the same number, and the parent closes its copy.
    let dup = unsafe { libc::dup(conn.as_raw_fd()) };
    assert!(dup >= 0);
    let mut cmd = Command::new(SERVER);
    cmd.arg("--db").arg(db).arg("--fd").arg(dup.to_string());
    if let Some(init) = resume {
        cmd.arg("--resume-init").arg(init);
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    unsafe { libc::close(dup) };
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let init = line
        .strip_prefix("init ")
        .unwrap_or_else(|| panic!("server said {line:?}"))
        .trim()
        .to_string();
    (child, init)
}

/// Appends and fsyncs records to `log` until `stop`; any error fails the
/// test (through the returned message).
fn write_records(
    log: PathBuf,
    acked: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("open for record {n}: {e}"))?;
        f.write_all(record(n).as_bytes())
            .map_err(|e| format!("write of record {n}: {e}"))?;
        f.sync_all()
            .map_err(|e| format!("fsync of record {n}: {e}"))?;
        acked.lock().unwrap().push(n);
        n += 1;
    }
    Ok(())
}

/// Detaches the mount and kills the current server when the test ends,
/// also when it fails half-way.
struct Cleanup<'a> {
    mnt: &'a Path,
    server: Option<Child>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = umount2(self.mnt, MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_new_server_takes_over_a_live_connection_with_no_error_seen() {
    if !common::fuse_available() || !common::is_root() {
        eprintln!("SKIPPED: mounting with fd=N needs root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    drop(Fs::create(&db, Limits::default()).unwrap());
    let conn = common::mount_fd(&mnt);

    let (server, init) = start_server(&db, &conn, None);
    let mut cleanup = Cleanup {
        mnt: &mnt,
        server: Some(server),
    };
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..50 {
        std::fs::write(mnt.join(format!("d/f{i:02}")), format!("file {i}\n")).unwrap();
    }
    // Kept open across every kill: its reads must go on working.
    let mut kept = std::fs::File::open(mnt.join("d/f07")).unwrap();

    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (log, acked, stop) = (mnt.join("log"), acked.clone(), stop.clone());
        std::thread::spawn(move || write_records(log, acked, stop))
    };
    let mut rng = rand::rng();
    let mut pauses = Vec::new();
    for round in 0..ROUNDS {
        let before = acked.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.lock().unwrap().len() <= before {
            assert!(
                Instant::now() < deadline,
                "round {round}: no record went through"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(20..300)));
        let mut old = cleanup.server.take().expect("a server runs");
        old.kill().unwrap(); // SIGKILL, possibly in the middle of a request
        old.wait().unwrap();
        let killed = Instant::now();
        let count_at_kill = acked.lock().unwrap().len();
        let (next, printed) = start_server(&db, &conn, Some(&init));
        assert_eq!(printed, init, "the record travels unchanged");
        cleanup.server = Some(next);
        // The writer goes on by itself once the new server answers.
        while acked.lock().unwrap().len() <= count_at_kill {
            assert!(
                Instant::now() < killed + Duration::from_secs(60),
                "round {round}: the writer is stuck"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        pauses.push(killed.elapsed());
        // Listing and reading across the take-over.
        let names = std::fs::read_dir(mnt.join("d")).unwrap().count();
        assert_eq!(names, 50, "round {round}");
        let mut text = String::new();
        kept.rewind().unwrap();
        kept.read_to_string(&mut text).unwrap();
        assert_eq!(text, "file 7\n", "round {round}: the file kept open");
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap().expect("the writer saw no error");
    eprintln!("take-over pauses (kill to the next acknowledged record): {pauses:?}");

    // Everything acknowledged is there, through the mount and in the engine.
    let through_mount = std::fs::read_to_string(mnt.join("log")).unwrap();
    let acked = acked.lock().unwrap().clone();
    let expected: String = acked.iter().map(|&n| record(n)).collect();
    if !through_mount.starts_with(&expected) {
        let at = through_mount
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let around = |t: &str| {
            t.lines()
                .skip(at.saturating_sub(2))
                .take(4)
                .map(|l| l[..16.min(l.len())].to_string())
                .collect::<Vec<_>>()
        };
        panic!(
            "acknowledged records differ from line {at} ({} acknowledged): mount {:?}, expected {:?}",
            acked.len(),
            around(&through_mount),
            around(&expected)
        );
    }
    drop(kept);
    umount2(&mnt, MntFlags::empty()).unwrap();
    cleanup
        .server
        .take()
        .expect("a server runs")
        .wait()
        .unwrap();
    drop(conn);
    let fs = Fs::open(&db).unwrap();
    let ino = fs.resolve(ROOT_INO, b"log", true).unwrap().ino;
    assert_eq!(
        String::from_utf8(fs.read_all(ino).unwrap()).unwrap(),
        through_mount
    );
    assert!(fs.check().unwrap().is_empty());
}

/// Bytes of the `n`th block written to the unlinked file.
fn block(n: u8) -> Vec<u8> {
    (0..150_000u32)
        .map(|i| (i % 251) as u8 ^ n.wrapping_mul(37))
        .collect()
}

/// Drops the kernel's cached pages of `f`, so the next read is answered by
/// the server (POSIX_FADV_DONTNEED invalidates a file's clean pages).
fn drop_cached_pages(f: &std::fs::File) {
    // SAFETY: `f` is an open descriptor; the call only drops cache.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
}

/// Blocks in use on the mount, from `statfs(2)` (the engine's counters).
fn used_blocks(mnt: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(mnt).unwrap();
    st.blocks() - st.blocks_free()
}

/// A file unlinked while open lives across take-overs: the new servers do
/// not free it at start (their engines keep orphans for the live
/// connection), the process holding it reads everything it wrote and
/// writes more, and the kernel's FORGET at the last close frees it. So
/// does a file opened before a take-over and unlinked after it.
#[test]
fn a_file_unlinked_while_open_survives_take_overs_and_is_freed_at_close() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    if !common::fuse_available() || !common::is_root() {
        eprintln!("SKIPPED: mounting with fd=N needs root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    drop(Fs::create(&db, Limits::default()).unwrap());
    let conn = common::mount_fd(&mnt);
    let (server, init) = start_server(&db, &conn, None);
    let mut cleanup = Cleanup {
        mnt: &mnt,
        server: Some(server),
    };
    std::fs::write(mnt.join("kept"), b"linked file\n").unwrap();
    let empty = used_blocks(&mnt);

    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(mnt.join("scratch"))
        .unwrap();
    std::fs::remove_file(mnt.join("scratch")).unwrap();
    let mut expected = Vec::new();
    for n in 0..3 {
        f.write_all_at(&block(n), expected.len() as u64).unwrap();
        expected.extend(block(n));
    }
    f.sync_all().unwrap();
    assert!(used_blocks(&mnt) >= empty + expected.len() as u64 / 4096);
    // Opened before the take-over and unlinked after it, through the
    // kernel's cached entry (no LOOKUP reaches the new server).
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(mnt.join("held"))
        .unwrap();
    held.write_all_at(&block(20), 0).unwrap();

    for round in 0..2u8 {
        let mut old = cleanup.server.take().expect("a server runs");
        old.kill().unwrap(); // SIGKILL
        old.wait().unwrap();
        let (next, _) = start_server(&db, &conn, Some(&init));
        cleanup.server = Some(next);

        if round == 0 {
            std::fs::remove_file(mnt.join("held")).unwrap();
        }
        drop_cached_pages(&held);
        let mut back = vec![0; block(20).len()];
        held.read_exact_at(&mut back, 0).unwrap_or_else(|e| {
            panic!("round {round}: reading the file unlinked after the take-over: {e}")
        });
        assert!(
            back == block(20),
            "round {round}: the file unlinked after the take-over"
        );

        drop_cached_pages(&f);
        let mut back = vec![0; expected.len()];
        f.read_exact_at(&mut back, 0)
            .unwrap_or_else(|e| panic!("round {round}: reading the unlinked file back: {e}"));
        assert!(
            back == expected,
            "round {round}: the data read back differs"
        );
        let more = block(10 + round);
        f.write_all_at(&more, expected.len() as u64)
            .unwrap_or_else(|e| panic!("round {round}: writing more: {e}"));
        expected.extend(&more);
        f.sync_all().unwrap();
        drop_cached_pages(&f);
        let mut back = vec![0; expected.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(
            back == expected,
            "round {round}: the data written after the take-over"
        );
        let meta = f.metadata().unwrap();
        assert_eq!(meta.nlink(), 0, "round {round}");
        assert_eq!(meta.len(), expected.len() as u64, "round {round}");
    }
    assert!(used_blocks(&mnt) >= empty + expected.len() as u64 / 4096);

    // The last close evicts each inode; the kernel's FORGET frees it.
    drop(f);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    while used_blocks(&mnt) != empty {
        assert!(
            Instant::now() < deadline,
            "the unlinked file's data was not freed after its last close: {} blocks used, {empty} before",
            used_blocks(&mnt)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"linked file\n");

    umount2(&mnt, MntFlags::empty()).unwrap();
    cleanup
        .server
        .take()
        .expect("a server runs")
        .wait()
        .unwrap();
    drop(conn);
    // Opened as for another take-over, so nothing is purged at open: the
    // orphan is gone from the database itself.
    let fs = Fs::open_with(&db, OpenOptions { keep_orphans: true }).unwrap();
    assert_eq!(fs.kept_orphans(), 0, "the orphans table is empty");
    assert!(fs.check().unwrap().is_empty());
}
