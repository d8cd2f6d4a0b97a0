//! WAL checkpoints keep the WAL bounded under a stream of writes, and
//! closing leaves one file (docs/engine.md, "Checkpoints").

use std::path::{Path, PathBuf};

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO};

fn side_file(db: &Path, suffix: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(side_file(db, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// A writer that never pauses must not grow the WAL much past the engine's
/// checkpoint threshold (8192 pages of 4 KiB, 32 MiB): a long WAL slows
/// every page lookup.
#[test]
fn wal_stays_bounded_under_a_stream_of_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let f = fs
        .mknod(
            ROOT_INO,
            b"big",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap()
        .ino;
    let piece = vec![0x5au8; 128 * 1024];
    let total: u64 = 80 << 20;
    let mut max_wal = 0;
    for round in 0..2 {
        for i in 0..total / piece.len() as u64 {
            fs.write(f, i * piece.len() as u64, &piece).unwrap();
            max_wal = max_wal.max(wal_len(&db));
        }
        assert_eq!(fs.getattr(f).unwrap().size, total, "round {round}");
    }
    // The commit that passes 8192 pages (32 MiB) checkpoints; the next
    // transaction restarts the WAL from its beginning.
    assert!(
        max_wal < 36 << 20,
        "WAL grew to {max_wal} bytes while writing {total} bytes twice"
    );
    let back = fs.read(f, total - 4096, 8192).unwrap();
    assert_eq!(back, vec![0x5au8; 4096]);
    assert!(fs.check().unwrap().is_empty());
}

/// Many small commits, then dropping the last clone checkpoints everything
/// into the one database file and removes the WAL and shared-memory files.
#[test]
fn closing_leaves_one_file_after_background_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, Owner::ROOT).unwrap().ino;
    for i in 0..3000u32 {
        let ino = fs
            .mknod(
                d,
                format!("f{i}").as_bytes(),
                FileKind::RegularFile,
                0o644,
                0,
                Owner::ROOT,
            )
            .unwrap()
            .ino;
        fs.write(ino, 0, &i.to_le_bytes()).unwrap();
    }
    let clone = fs.clone();
    drop(fs);
    // A clone keeps the database open.
    assert!(side_file(&db, "-wal").exists());
    drop(clone);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("c.db")]);

    let fs = Fs::open(&db).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    for i in [0u32, 1234, 2999] {
        let ino = fs.lookup(d, format!("f{i}").as_bytes()).unwrap().ino;
        assert_eq!(fs.read(ino, 0, 8).unwrap(), i.to_le_bytes());
    }
    assert!(fs.check().unwrap().is_empty());
}
