//! Unnamed files (`O_TMPFILE` semantics): invisible until named, replaced
//! atomically, freed when abandoned or after a crash.

use agentcomputer_fs::{Errno, FileKind, Fs, Limits, Owner, ROOT_INO};

const O: Owner = Owner::ROOT;

fn names(fs: &Fs, dir: u64) -> Vec<String> {
    fs.readdir(dir, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect()
}

fn consistent(fs: &Fs) {
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

#[test]
fn an_unnamed_file_is_invisible_until_linked_then_whole() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap().ino;
    let (attr, handle) = fs.create_unnamed(d, 0o640, O).unwrap();
    assert_eq!(
        (attr.nlink, attr.kind, attr.perm),
        (0, FileKind::RegularFile, 0o640)
    );
    fs.write(attr.ino, 0, b"hello").unwrap();
    assert!(names(&fs, d).is_empty());
    consistent(&fs);

    let linked = fs.link_unnamed(attr.ino, d, b"f", false).unwrap();
    assert_eq!((linked.ino, linked.nlink, linked.size), (attr.ino, 1, 5));
    assert_eq!(names(&fs, d), ["f"]);
    assert_eq!(fs.read_all(attr.ino).unwrap(), b"hello");
    // Named once, it is an ordinary file: naming it again is refused.
    assert_eq!(
        fs.link_unnamed(attr.ino, d, b"g", false)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    drop(handle);
    assert_eq!(
        fs.read_all(fs.lookup(d, b"f").unwrap().ino).unwrap(),
        b"hello"
    );
    consistent(&fs);
}

#[test]
fn linking_replaces_a_file_in_one_step_and_frees_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let old = fs
        .mknod(ROOT_INO, b"f", FileKind::RegularFile, 0o644, 0, O)
        .unwrap()
        .ino;
    fs.write(old, 0, &[7u8; 10_000]).unwrap();
    let (attr, _h) = fs.create_unnamed(ROOT_INO, 0o644, O).unwrap();
    fs.write(attr.ino, 0, b"new").unwrap();

    assert_eq!(
        fs.link_unnamed(attr.ino, ROOT_INO, b"f", false)
            .unwrap_err()
            .errno(),
        Errno::EEXIST
    );
    assert_eq!(fs.statfs().unwrap().used_bytes, 10_003);
    fs.link_unnamed(attr.ino, ROOT_INO, b"f", true).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, attr.ino);
    assert_eq!(fs.getattr(old).unwrap_err().errno(), Errno::ENOENT);
    assert_eq!(fs.statfs().unwrap().used_bytes, 3);
    consistent(&fs);
}

#[test]
fn bad_targets_are_refused_and_leave_the_file_unnamed() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    fs.mkdir(ROOT_INO, b"sub", 0o755, O).unwrap();
    let file = fs
        .mknod(ROOT_INO, b"plain", FileKind::RegularFile, 0o644, 0, O)
        .unwrap()
        .ino;
    assert_eq!(
        fs.create_unnamed(file, 0o644, O).unwrap_err().errno(),
        Errno::ENOTDIR
    );
    assert_eq!(
        fs.create_unnamed(9999, 0o644, O).unwrap_err().errno(),
        Errno::ENOENT
    );

    let (attr, _h) = fs.create_unnamed(ROOT_INO, 0o644, O).unwrap();
    let e = |r: agentcomputer_fs::Result<_>| r.unwrap_err().errno();
    assert_eq!(
        e(fs.link_unnamed(attr.ino, ROOT_INO, b"sub", true)),
        Errno::EISDIR
    );
    assert_eq!(
        e(fs.link_unnamed(attr.ino, file, b"x", false)),
        Errno::ENOTDIR
    );
    assert_eq!(
        e(fs.link_unnamed(attr.ino, ROOT_INO, &[b'n'; 256], false)),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        e(fs.link_unnamed(file, ROOT_INO, b"y", false)),
        Errno::EINVAL
    );
    assert_eq!(fs.getattr(attr.ino).unwrap().nlink, 0);
    assert!(
        fs.getattr(fs.lookup(ROOT_INO, b"sub").unwrap().ino)
            .unwrap()
            .nlink
            == 2
    );
    consistent(&fs);
}

#[test]
fn an_abandoned_unnamed_file_is_freed_with_its_handle() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let before = fs.statfs().unwrap();
    let (attr, handle) = fs.create_unnamed(ROOT_INO, 0o644, O).unwrap();
    fs.write(attr.ino, 0, &[1u8; 100_000]).unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, before.used_inodes + 1);
    drop(handle);
    let after = fs.statfs().unwrap();
    assert_eq!(
        (after.used_inodes, after.used_bytes),
        (before.used_inodes, before.used_bytes)
    );
    assert_eq!(fs.getattr(attr.ino).unwrap_err().errno(), Errno::ENOENT);
    consistent(&fs);
}

#[test]
fn an_unnamed_file_left_by_a_crash_is_purged_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let before = fs.statfs().unwrap();
    let (attr, handle) = fs.create_unnamed(ROOT_INO, 0o644, O).unwrap();
    fs.write(attr.ino, 0, &[1u8; 50_000]).unwrap();
    // Like a killed process: neither the handle nor the engine is closed.
    std::mem::forget(handle);
    std::mem::forget(fs);

    let fs = Fs::open(&db).unwrap();
    let after = fs.statfs().unwrap();
    assert_eq!(
        (after.used_inodes, after.used_bytes),
        (before.used_inodes, before.used_bytes)
    );
    assert_eq!(fs.getattr(attr.ino).unwrap_err().errno(), Errno::ENOENT);
    assert!(names(&fs, ROOT_INO).is_empty());
    consistent(&fs);
}

#[test]
fn unnamed_files_count_against_the_inode_quota() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_bytes: 1 << 20,
        max_inodes: 2,
    };
    let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
    let _one = fs.create_unnamed(ROOT_INO, 0o644, O).unwrap();
    assert_eq!(
        fs.create_unnamed(ROOT_INO, 0o644, O).unwrap_err().errno(),
        Errno::ENOSPC
    );
}
