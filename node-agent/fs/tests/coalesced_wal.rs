//! The WAL writes of a commit are gathered into large `pwrite`s (module
//! `vfs`). These tests check what that must not change: other connections
//! see a commit the moment it returns, never a torn one, and a commit whose
//! gathered write fails (a full disk) is refused without losing or
//! corrupting anything committed before it.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentcomputer_fs::{Errno, Fs, Limits, Owner, ROOT_INO, WriteMode};

/// A file of `len` bytes, every one of them `generation % 251`.
fn body(generation: u64, len: usize) -> Vec<u8> {
    vec![(generation % 251) as u8; len]
}

fn put(fs: &Fs, name: &str, data: &[u8]) -> agentcomputer_fs::Result<()> {
    fs.write_all(
        ROOT_INO,
        name.as_bytes(),
        data,
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .map(drop)
}

fn get(fs: &Fs, name: &str) -> Vec<u8> {
    let a = fs.resolve(ROOT_INO, name.as_bytes(), true).unwrap();
    fs.read_all(a.ino).unwrap()
}

/// Commits of 4 KiB to 9.5 MB (one to many gathered writes; the largest is
/// past the writer's 8 MiB page cache, so SQLite also spills frames before
/// the COMMIT) are visible whole to reader connections as soon as the call returns,
/// while another thread keeps reading and never sees a mixed file.
#[test]
fn readers_see_each_commit_whole_and_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    put(&fs, "f", &body(0, 4096)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let latest = Arc::new(AtomicU64::new(0));
    let reader = {
        let (fs, stop, latest) = (fs.clone(), stop.clone(), latest.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let floor = latest.load(Ordering::SeqCst);
                let data = get(&fs, "f");
                let first = data[0];
                assert!(
                    data.iter().all(|&b| b == first),
                    "a reader saw a file mixing two commits"
                );
                // The byte is the generation (there are fewer than 251).
                // Commits may have gone on since `floor` was loaded, so
                // anything from `floor` up is right.
                assert!(
                    u64::from(first) >= floor,
                    "saw generation {first} after {floor} had returned"
                );
                reads += 1;
            }
            reads
        })
    };
    let sizes = [65_536, 200_000, 1_048_576, 9_500_000, 4096, 70_000];
    const GENERATIONS: u64 = 60;
    const _: () = assert!(GENERATIONS < 251, "the byte of a body is its generation");
    for generation in 1..=GENERATIONS {
        let len = sizes[generation as usize % sizes.len()];
        let data = body(generation, len);
        put(&fs, "f", &data).unwrap();
        latest.store(generation, Ordering::SeqCst);
        // Fs::read goes through a pooled reader connection, not the writer.
        assert_eq!(
            get(&fs, "f"),
            data,
            "commit {generation} not visible at once"
        );
    }
    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    drop(fs);
    let fs = Fs::open(&dir.path().join("fs.db")).unwrap();
    assert_eq!(get(&fs, "f"), body(GENERATIONS, sizes[0]));
}

/// A database reopened without a clean close keeps frames in its WAL, so
/// the new writer's first commit starts below its WAL handle's high-water
/// mark; a one-page commit (a chmod) must still be written before it is
/// published (debug builds panic in `vfs::coalesce` otherwise).
#[test]
fn the_first_commit_after_an_unclean_stop_is_written_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    put(&fs, "f", b"hello").unwrap();
    let ino = fs.resolve(ROOT_INO, b"f", true).unwrap().ino;
    // Like a crash: no close, no final checkpoint, the WAL keeps its frames.
    std::mem::forget(fs);
    let fs = Fs::open(&db).unwrap();
    let set = agentcomputer_fs::SetAttr {
        perm: Some(0o600),
        ..Default::default()
    };
    fs.setattr(ino, &set).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o600);
    assert_eq!(get(&fs, "f"), b"hello");
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

/// The same through a commit window: savepoints gathered into one batch,
/// committed by the flusher thread, read by reader connections afterwards.
#[test]
fn batched_commits_are_visible_after_flush() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let batched = fs.with_commit_window(Duration::from_millis(20));
    for i in 0..40u64 {
        put(
            &batched,
            &format!("f{i}"),
            &body(i, 50_000 + i as usize * 1000),
        )
        .unwrap();
    }
    batched.flush().unwrap();
    for i in 0..40u64 {
        assert_eq!(
            get(&fs, &format!("f{i}")),
            body(i, 50_000 + i as usize * 1000)
        );
    }
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

/// Mounts a tmpfs of `size` at `dir`; unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> SmallDisk {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount tmpfs at {}", dir.display());
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A host disk that fills up mid-commit: the gathered WAL write fails with
/// ENOSPC, the call reports ENOSPC, and everything committed before it is
/// intact, in this process and after reopening. Once space is freed, the
/// same engine instance commits again.
#[test]
fn a_full_disk_refuses_the_commit_and_keeps_what_was_committed() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _disk = SmallDisk::mount(dir.path(), "24m");
    // Room to free later, on the same filesystem as the database.
    let filler = dir.path().join("filler");
    std::fs::write(&filler, vec![1u8; 8 << 20]).unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let mut committed = Vec::new();
    let mut refused = None;
    for i in 0..64u64 {
        let data = body(i, 1 << 20);
        match put(&fs, &format!("f{i}"), &data) {
            Ok(()) => committed.push(i),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (at, err) = refused.expect("a 24 MiB disk fills up");
    assert_eq!(err.errno(), Errno::ENOSPC, "{err}");
    assert!(!committed.is_empty());
    for &i in &committed {
        assert_eq!(get(&fs, &format!("f{i}")), body(i, 1 << 20));
    }
    assert_eq!(
        fs.resolve(ROOT_INO, format!("f{at}").as_bytes(), true)
            .unwrap_err()
            .errno(),
        Errno::ENOENT,
        "the refused call left nothing behind"
    );

    std::fs::remove_file(&filler).unwrap();
    put(&fs, "after", &body(7, 1 << 20)).unwrap();
    assert_eq!(get(&fs, "after"), body(7, 1 << 20));
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    drop(fs);

    let fs = Fs::open(&db).unwrap();
    for &i in &committed {
        assert_eq!(get(&fs, &format!("f{i}")), body(i, 1 << 20));
    }
    assert_eq!(get(&fs, "after"), body(7, 1 << 20));
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

/// A 24 MiB tmpfs holding a fresh database with one fsynced 1 MiB file,
/// `before` (`body(1, ..)`); `None` (skipped) without root.
struct FullDisk {
    dir: tempfile::TempDir,
    // Unmounted before `dir` is removed.
    _disk: SmallDisk,
    db: std::path::PathBuf,
    fs: Fs,
}

impl FullDisk {
    fn with_one_durable_file() -> Option<FullDisk> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: mounting a small tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let _disk = SmallDisk::mount(dir.path(), "24m");
        let db = dir.path().join("fs.db");
        let fs = Fs::create(&db, Limits::default()).unwrap();
        put(&fs, "before", &body(1, 1 << 20)).unwrap();
        fs.fsync(None).unwrap();
        Some(FullDisk { dir, _disk, db, fs })
    }
}

/// After a batch was lost to a full disk and space was freed: the next
/// `fsync` through `batched` reports the loss with `ENOSPC`, the one after
/// succeeds, none of `names` exists, and the durable file `before` of
/// [`FullDisk`] is intact.
fn assert_lost_once(batched: &Fs, fs: &Fs, names: &[&str]) {
    let err = batched.fsync(None).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOSPC, "{err}");
    assert!(err.to_string().contains("completed calls failed"), "{err}");
    fs.fsync(None).unwrap();
    for name in names {
        let r = fs.resolve(ROOT_INO, name.as_bytes(), true);
        assert_eq!(
            r.unwrap_err().errno(),
            Errno::ENOENT,
            "{name} was lost with its batch"
        );
    }
    assert_eq!(get(fs, "before"), body(1, 1 << 20));
}

/// A batch of calls made through a commit window that cannot commit
/// because the host disk filled up in the meantime: the call that commits
/// it (here an API-like call without a window) and the next `fsync` once
/// there is room again report `ENOSPC`, not a bare `EIO`, so callers
/// know to free space. The batch's calls are lost as a whole; everything
/// committed before stays intact.
#[test]
fn a_batch_that_cannot_commit_on_a_full_disk_reports_enospc() {
    let Some(FullDisk { dir, _disk, db, fs }) = FullDisk::with_one_durable_file() else {
        return;
    };

    // Fits in the writer's page cache, so nothing reaches the WAL before
    // the batch commits.
    let batched = fs.with_commit_window(Duration::from_secs(600));
    for i in 0..3u64 {
        put(&batched, &format!("batched{i}"), &body(i, 1 << 20)).unwrap();
    }
    // Something else on the host takes every free byte.
    let filler = dir.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![9u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        let _ = f.write_all(&block[..4096]);
        let _ = f.write_all(&block[..1]);
    }

    let err = fs.mkdir(ROOT_INO, b"api", 0o755, Owner::ROOT).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOSPC, "{err}");
    assert!(err.to_string().contains("completed calls failed"), "{err}");
    // The disk is still full: fsync fails on its own.
    let err = batched.fsync(None).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOSPC, "{err}");

    // With room again, the first fsync tells the batch's callers that their
    // calls were lost (once), as fsync(2) reports a failed writeback.
    std::fs::remove_file(&filler).unwrap();
    assert_lost_once(&batched, &fs, &["batched0", "batched1", "batched2"]);
    fs.mkdir(ROOT_INO, b"api", 0o755, Owner::ROOT).unwrap();
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    drop((batched, fs));
    let fs = Fs::open(&db).unwrap();
    assert_eq!(get(&fs, "before"), body(1, 1 << 20));
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

/// A call inside a batch that itself hits the full disk (its pages spill
/// from the page cache into the WAL): the call fails with `ENOSPC`,
/// SQLite rolls the whole batch back, and the next `fsync` reports the
/// lost calls with `ENOSPC` too.
#[test]
fn a_batch_rolled_back_by_a_full_disk_mid_call_reports_enospc() {
    let Some(FullDisk { dir, _disk, fs, .. }) = FullDisk::with_one_durable_file() else {
        return;
    };
    let batched = fs.with_commit_window(Duration::from_secs(600));
    put(&batched, "small", b"lost with its batch").unwrap();
    // Leave a few MiB free, then write more than the page cache (8 MiB)
    // and the free space together hold.
    let filler = dir.path().join("filler");
    std::fs::write(&filler, vec![9u8; 16 << 20]).unwrap();
    let err = put(&batched, "big", &body(2, 20 << 20)).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOSPC, "{err}");

    std::fs::remove_file(&filler).unwrap();
    assert_lost_once(&batched, &fs, &["small", "big"]);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}
