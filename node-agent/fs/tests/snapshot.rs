//! Read snapshots, path opens in one snapshot, and online backups of a real
//! database file.

use agentcomputer_fs::{Errno, Fs, Limits, Owner, ROOT_INO, WriteMode};

fn new_fs() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    (dir, fs)
}

fn put(fs: &Fs, name: &str, data: &[u8]) {
    fs.write_all(
        ROOT_INO,
        name.as_bytes(),
        data,
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
}

#[test]
fn a_snapshot_reads_one_version_while_the_file_is_rewritten() {
    let (_dir, fs) = new_fs();
    put(&fs, "f", &vec![b'A'; 300_000]);
    let ino = fs.resolve(ROOT_INO, b"f", true).unwrap().ino;
    let snap = fs.read_snapshot().unwrap();
    let (head, v1) = snap.read(ino, 0, 100_000).unwrap();
    put(&fs, "f", &vec![b'B'; 200_000]);
    let (tail, v2) = snap.read(ino, 100_000, 1_000_000).unwrap();
    assert_eq!(v1, v2);
    assert!(head.iter().chain(&tail).all(|&b| b == b'A'));
    assert_eq!(head.len() + tail.len(), 300_000);
    // Outside the snapshot the new version shows, with another version.
    let (now, v3) = fs.read_versioned(ino, 0, 10).unwrap();
    assert_eq!(now, b"BBBBBBBBBB");
    assert_ne!(v1, v3);
    drop(snap);
}

#[test]
fn open_path_holds_the_inode_the_path_named() {
    let (_dir, fs) = new_fs();
    put(&fs, "f", b"old");
    let (attr, handle) = fs.open_path(ROOT_INO, b"f", true).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.read_all(attr.ino).unwrap(), b"old");
    drop(handle);
    assert_eq!(fs.read_all(attr.ino).unwrap_err().errno(), Errno::ENOENT);
    let err = fs.open_path(ROOT_INO, b"f", true).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOENT);
}

#[test]
fn a_backup_holds_every_committed_call_and_opens_clean() {
    let (dir, fs) = new_fs();
    for i in 0..50 {
        put(&fs, &format!("f{i}"), format!("content {i}").as_bytes());
    }
    // A call through a commit window is in the backup too.
    let windowed = fs.with_commit_window(std::time::Duration::from_secs(60));
    let ino = windowed
        .mknod(
            ROOT_INO,
            b"late",
            agentcomputer_fs::FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap()
        .ino;
    windowed.write(ino, 0, b"batched").unwrap();
    let copy = dir.path().join("copy.db");
    let size = fs.backup_to(&copy).unwrap();
    assert_eq!(size, std::fs::metadata(&copy).unwrap().len());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(fs.backup_to(&copy).unwrap_err().errno(), Errno::EEXIST);
    let restored = Fs::open(&copy).unwrap();
    assert!(restored.check().unwrap().is_empty());
    for i in 0..50 {
        let a = restored
            .resolve(ROOT_INO, format!("f{i}").as_bytes(), true)
            .unwrap();
        assert_eq!(
            restored.read_all(a.ino).unwrap(),
            format!("content {i}").as_bytes()
        );
    }
    let a = restored.resolve(ROOT_INO, b"late", true).unwrap();
    assert_eq!(restored.read_all(a.ino).unwrap(), b"batched");
}
