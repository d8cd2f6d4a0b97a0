//! Group commit (`Fs::with_commit_window`): calls share a transaction, stay
//! visible to every reader at once, fail alone, and reach the database file
//! by the window's end, `flush`, `fsync`, a call without a window, or close.

mod common;
use common::committed_names;

use std::time::{Duration, Instant};

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO};

fn touch(fs: &Fs, name: &str) -> u64 {
    fs.mknod(
        ROOT_INO,
        name.as_bytes(),
        FileKind::RegularFile,
        0o644,
        0,
        Owner::ROOT,
    )
    .unwrap()
    .ino
}

/// A window long enough that only the explicit events commit.
const LONG: Duration = Duration::from_secs(3600);

/// A new database in a temp dir and a view of it with commit window `window`.
fn batched_fs(window: Duration) -> (tempfile::TempDir, std::path::PathBuf, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let fs = Fs::create(&db, Limits::default())
        .unwrap()
        .with_commit_window(window);
    (dir, db, fs)
}

#[test]
fn batched_calls_are_visible_at_once_and_committed_by_flush() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let plain = Fs::create(&db, Limits::default()).unwrap();
    let batched = plain.with_commit_window(LONG);
    assert_eq!(batched.commit_window(), LONG);

    let a = touch(&batched, "a");
    batched.write(a, 0, b"hello").unwrap();
    // Every view reads the batch's changes, by inode and by path.
    assert_eq!(plain.read(a, 0, 10).unwrap(), b"hello");
    assert_eq!(plain.resolve(ROOT_INO, b"/a", true).unwrap().size, 5);
    assert_eq!(batched.readdir(ROOT_INO, 0, 10).unwrap().len(), 1);
    assert!(plain.check().unwrap().is_empty());
    // ...but they are not in the database file yet.
    assert!(committed_names(&db).is_empty());

    batched.flush().unwrap();
    assert_eq!(committed_names(&db), ["a"]);
}

#[test]
fn a_call_without_a_window_commits_the_open_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let plain = Fs::create(&db, Limits::default()).unwrap();
    let batched = plain.with_commit_window(LONG);
    touch(&batched, "a");
    touch(&batched, "b");
    assert!(committed_names(&db).is_empty());
    // What a plain call returns has committed, and so has everything before.
    touch(&plain, "c");
    assert_eq!(committed_names(&db), ["a", "b", "c"]);
}

#[test]
fn fsync_commits_the_batch() {
    let (_dir, db, batched) = batched_fs(LONG);
    touch(&batched, "a");
    batched.fsync(None).unwrap();
    assert_eq!(committed_names(&db), ["a"]);
}

#[test]
fn the_flusher_commits_a_batch_once_its_window_passed() {
    let (_dir, db, batched) = batched_fs(Duration::from_millis(20));
    touch(&batched, "a");
    // No further call: only the flusher thread can commit it. Poll
    // (generously, the machine may be loaded) instead of sleeping a guess.
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed_names(&db).is_empty() {
        assert!(Instant::now() < deadline, "the batch was never committed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(committed_names(&db), ["a"]);
}

#[test]
fn closing_commits_the_batch() {
    let (_dir, db, batched) = batched_fs(LONG);
    let a = touch(&batched, "a");
    batched.write(a, 0, b"kept").unwrap();
    assert!(batched.check().unwrap().is_empty());
    drop(batched);
    let fs = Fs::open(&db).unwrap();
    let a = fs.resolve(ROOT_INO, b"/a", true).unwrap();
    assert_eq!(fs.read_all(a.ino).unwrap(), b"kept");
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn a_failing_call_undoes_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let batched = Fs::create(
        &db,
        Limits {
            max_bytes: 64 * 1024,
            max_inodes: 100,
        },
    )
    .unwrap()
    .with_commit_window(LONG);
    let a = touch(&batched, "a");
    batched.write(a, 0, &[1u8; 1000]).unwrap();
    // Past the quota: ENOSPC, and nothing of this call remains.
    let err = batched.write(a, 0, &vec![2u8; 128 * 1024]).unwrap_err();
    assert_eq!(err.errno_name(), "ENOSPC");
    let err = batched
        .mknod(ROOT_INO, b"a", FileKind::RegularFile, 0o644, 0, Owner::ROOT)
        .unwrap_err();
    assert_eq!(err.errno_name(), "EEXIST");
    // The earlier calls of the batch are intact and commit.
    assert_eq!(batched.read_all(a).unwrap(), vec![1u8; 1000]);
    touch(&batched, "b");
    batched.flush().unwrap();
    assert_eq!(committed_names(&db), ["a", "b"]);
    assert!(batched.check().unwrap().is_empty());
    let st = batched.statfs().unwrap();
    assert_eq!(st.used_bytes, 1000);
    assert_eq!(st.used_inodes, 3);
}

#[test]
fn unlink_while_open_and_forget_in_one_batch() {
    let (_dir, db, batched) = batched_fs(LONG);
    let a = touch(&batched, "a");
    batched.write(a, 0, b"data").unwrap();
    let h = batched.open_inode(a).unwrap();
    batched.unlink(ROOT_INO, b"a").unwrap();
    assert_eq!(batched.read(a, 0, 10).unwrap(), b"data");
    drop(h);
    assert_eq!(batched.getattr(a).unwrap_err().errno_name(), "ENOENT");
    batched.flush().unwrap();
    assert!(committed_names(&db).is_empty());
    assert!(batched.check().unwrap().is_empty());
    assert_eq!(batched.statfs().unwrap().used_inodes, 1);
}

/// Readers on other threads never block forever on a batch, and see a
/// consistent tree while a writer streams batched calls.
#[test]
fn concurrent_readers_during_batches() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let plain = Fs::create(&db, Limits::default()).unwrap();
    let batched = plain.with_commit_window(Duration::from_millis(2));
    let writer = std::thread::spawn(move || {
        for i in 0..500 {
            let ino = touch(&batched, &format!("f{i:03}"));
            batched.write(ino, 0, format!("{i}").as_bytes()).unwrap();
        }
    });
    let mut seen = 0;
    while seen < 500 {
        let entries = plain.readdir(ROOT_INO, 0, 1000).unwrap();
        // Names appear in creation order and are never lost.
        assert!(entries.len() >= seen);
        seen = entries.len();
        for e in &entries {
            plain.getattr(e.ino).unwrap();
        }
    }
    writer.join().unwrap();
    plain.flush().unwrap();
    assert_eq!(committed_names(&db).len(), 500);
    assert!(plain.check().unwrap().is_empty());
}
