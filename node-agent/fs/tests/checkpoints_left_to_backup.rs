//! `Fs::leave_checkpoints_to_backup`: the engine runs no checkpoint of its
//! own, so the WAL keeps every frame until a backup shipper checkpoints.

use agentcomputer_fs::{Fs, Limits, Owner, ROOT_INO, WAL_SIZE_LIMIT, WriteMode};

/// Writes 40 files of 1 MiB (each one transaction), 40 MiB of WAL frames
/// in all, past the engine's automatic checkpoint at `WAL_SIZE_LIMIT`.
fn write_40_mib(fs: &Fs) {
    let data = vec![0x5au8; 1 << 20];
    for i in 0..40 {
        fs.write_all(
            ROOT_INO,
            format!("f{i}").as_bytes(),
            &data,
            WriteMode::Truncate,
            0o644,
            Owner::ROOT,
        )
        .unwrap();
    }
}

#[test]
fn without_the_engines_checkpoints_the_wal_keeps_every_frame() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    assert!(fs.checkpoints_left_to_backup());
    write_40_mib(&fs);
    let wal = fs.disk_usage().unwrap().wal_bytes;
    assert!(
        wal > 40 << 20,
        "WAL {wal} bytes: every frame is still there"
    );
    // compact frees nothing in the WAL either.
    fs.compact().unwrap();
    assert_eq!(fs.disk_usage().unwrap().wal_bytes, wal);
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn by_default_the_engine_checkpoints_and_keeps_the_wal_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    assert!(!fs.checkpoints_left_to_backup());
    write_40_mib(&fs);
    let wal = fs.disk_usage().unwrap().wal_bytes;
    // One transaction may take the WAL past the limit before it restarts.
    assert!(wal <= WAL_SIZE_LIMIT + (2 << 20), "WAL {wal} bytes");
    fs.compact().unwrap();
    assert_eq!(fs.disk_usage().unwrap().wal_bytes, 0);
}
