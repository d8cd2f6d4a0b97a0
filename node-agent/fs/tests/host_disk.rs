//! The host disk a computer can make the node store is bounded by its
//! quota, by every route, and given back after deletes.

use agentcomputer_fs::{Errno, FileKind, Fs, Limits, Owner, ROOT_INO, SetAttr, XattrFlags};

const QUOTA: u64 = 10 << 20;

/// The bound the node promises: database file plus WAL within 1.25 times
/// the byte quota plus 64 MiB, after a checkpoint.
fn bound(quota: u64) -> u64 {
    quota + quota / 4 + (64 << 20)
}

fn new_fs(dir: &tempfile::TempDir, name: &str, max_bytes: u64) -> Fs {
    Fs::create(
        &dir.path().join(name),
        Limits {
            max_bytes,
            max_inodes: 1_000_000,
        },
    )
    .unwrap()
}

/// Runs `step(i)` until it fails; the failure must be a quota error.
fn fill(mut step: impl FnMut(u64) -> agentcomputer_fs::Result<()>) -> u64 {
    let mut i = 0u64;
    loop {
        match step(i) {
            Ok(()) => i += 1,
            Err(e) => {
                assert!(
                    matches!(e.errno(), Errno::ENOSPC | Errno::EFBIG),
                    "step {i}: {e}"
                );
                return i;
            }
        }
        assert!(i < 10_000_000, "the quota never stopped the route");
    }
}

fn name(i: u64) -> Vec<u8> {
    // The longest names (NAME_MAX) cost the host the most.
    let mut n = format!("{i:020}").into_bytes();
    n.resize(255, b'n');
    n
}

fn check_route(fs: &Fs, route: &str, steps: u64) {
    let before = fs.disk_usage().unwrap();
    fs.compact().unwrap();
    let after = fs.disk_usage().unwrap();
    eprintln!(
        "{route}: {steps} steps, used {} B, {} inodes; db+wal {} B before checkpoint, {} B after",
        fs.statfs().unwrap().used_bytes,
        fs.statfs().unwrap().used_inodes,
        before.total(),
        after.total()
    );
    assert!(
        after.total() <= bound(QUOTA),
        "{route}: {} B on the host for a {QUOTA} B quota",
        after.total()
    );
    assert_eq!(fs.check().unwrap(), Vec::<String>::new(), "{route}");
}

#[test]
fn every_route_stays_within_the_host_bound() {
    let dir = tempfile::tempdir().unwrap();
    let o = Owner::ROOT;

    let fs = new_fs(&dir, "data.db", QUOTA);
    let block = vec![7u8; 1 << 20];
    let n = fill(|i| {
        let f = fs.mknod(ROOT_INO, &name(i), FileKind::RegularFile, 0o644, 0, o)?;
        fs.write(f.ino, 0, &block).map(|_| ())
    });
    check_route(&fs, "data", n);

    let fs = new_fs(&dir, "names.db", QUOTA);
    let n = fill(|i| {
        fs.mknod(ROOT_INO, &name(i), FileKind::RegularFile, 0o644, 0, o)
            .map(|_| ())
    });
    assert_eq!(
        n,
        Limits {
            max_bytes: QUOTA,
            max_inodes: 1_000_000
        }
        .inode_limit()
            - 1
    );
    check_route(&fs, "names", n);

    let fs = new_fs(&dir, "links.db", QUOTA);
    let target = fs
        .mknod(ROOT_INO, b"t", FileKind::RegularFile, 0o644, 0, o)
        .unwrap();
    let n = fill(|i| fs.link(target.ino, ROOT_INO, &name(i)).map(|_| ()));
    // Each link is an inode-equivalent: the links stop at the inode limit.
    assert_eq!(fs.statfs().unwrap().files_free, 0);
    check_route(&fs, "hard links", n);

    let fs = new_fs(&dir, "xattrs.db", QUOTA);
    let value = vec![1u8; 65_536];
    let holder = fs
        .mknod(ROOT_INO, b"x", FileKind::RegularFile, 0o644, 0, o)
        .unwrap();
    let n = fill(|i| {
        let mut key = format!("user.{i:020}").into_bytes();
        key.resize(255, b'k');
        fs.setxattr(
            holder.ino,
            &key,
            &value,
            XattrFlags {
                create: true,
                replace: false,
            },
        )
    });
    check_route(&fs, "xattrs", n);

    let fs = new_fs(&dir, "symlinks.db", QUOTA);
    let target = vec![b'a'; 4000];
    let n = fill(|i| fs.symlink(ROOT_INO, &name(i), &target, o).map(|_| ()));
    check_route(&fs, "symlinks", n);

    // Sparse: the logical size is capped, and touching one byte per chunk
    // of a file at the cap costs little on the host.
    let fs = new_fs(&dir, "sparse.db", QUOTA);
    let f = fs
        .mknod(ROOT_INO, b"s", FileKind::RegularFile, 0o644, 0, o)
        .unwrap();
    let cap = fs.limits().file_size_limit();
    assert_eq!(cap, 1 << 30);
    let grow = |size| {
        fs.setattr(
            f.ino,
            &SetAttr {
                size: Some(size),
                ..SetAttr::default()
            },
        )
    };
    assert_eq!(grow(1_000_000_000_000).unwrap_err().errno(), Errno::EFBIG);
    assert_eq!(
        fs.write(f.ino, cap, b"x").unwrap_err().errno(),
        Errno::EFBIG
    );
    grow(cap).unwrap();
    let cs = fs.chunk_size();
    let n = fill(|i| {
        let at = i * cs;
        if at >= cap {
            return Err(Errno::EFBIG.into());
        }
        fs.write(f.ino, at, b"y").map(|_| ())
    });
    assert_eq!(n, cap / cs);
    check_route(&fs, "sparse", n);

    // fallocate reserves what it promises: the quota runs out.
    let fs = new_fs(&dir, "alloc.db", QUOTA);
    let f = fs
        .mknod(ROOT_INO, b"a", FileKind::RegularFile, 0o644, 0, o)
        .unwrap();
    fs.allocate(f.ino, 0, QUOTA / 2, false).unwrap();
    assert_eq!(fs.statfs().unwrap().used_bytes, QUOTA / 2);
    assert_eq!(fs.getattr(f.ino).unwrap().size, QUOTA / 2);
    assert_eq!(
        fs.allocate(f.ino, 0, QUOTA + 1, false).unwrap_err().errno(),
        Errno::ENOSPC
    );
    assert_eq!(
        fs.getattr(f.ino).unwrap().size,
        QUOTA / 2,
        "nothing changed"
    );
    assert_eq!(
        fs.allocate(f.ino, 0, QUOTA, true).unwrap_err().errno(),
        Errno::EOPNOTSUPP
    );
    // Stored bytes stay as written; holes read as zeros.
    fs.write(f.ino, 100, b"kept").unwrap();
    fs.allocate(f.ino, 0, QUOTA / 2, true).unwrap();
    assert_eq!(fs.read(f.ino, 100, 4).unwrap(), b"kept");
    let n = fill(|i| fs.allocate(f.ino, QUOTA / 2 + i * (1 << 20), 1 << 20, false));
    assert_eq!(fs.statfs().unwrap().blocks_free, 0);
    check_route(&fs, "fallocate", n);
}

/// New databases are made with incremental auto-vacuum, so opening one
/// never needs the rebuild of older databases (which would cost a copy).
#[test]
fn new_databases_need_no_auto_vacuum_rebuild() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    drop(Fs::create(&path, Limits::default()).unwrap());
    let ino_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    drop(Fs::open(&path).unwrap());
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&meta),
        ino_before,
        "the file was rebuilt"
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, 2);
}

#[test]
fn hard_links_count_as_inode_equivalents() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(
        &dir.path().join("l.db"),
        Limits {
            max_bytes: QUOTA,
            max_inodes: 4,
        },
    )
    .unwrap();
    let f = fs
        .mknod(ROOT_INO, b"f", FileKind::RegularFile, 0o644, 0, Owner::ROOT)
        .unwrap();
    fs.link(f.ino, ROOT_INO, b"g").unwrap();
    fs.link(f.ino, ROOT_INO, b"h").unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, 4);
    assert_eq!(
        fs.link(f.ino, ROOT_INO, b"i").unwrap_err().errno(),
        Errno::ENOSPC
    );
    fs.unlink(ROOT_INO, b"g").unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, 3);
    // Renaming one link over another of the same inode changes nothing
    // (rename(2)); dropping the last extra link gives its equivalent back.
    fs.rename(ROOT_INO, b"h", ROOT_INO, b"f", Default::default())
        .unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, 3);
    fs.unlink(ROOT_INO, b"h").unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, 2);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.statfs().unwrap().used_inodes, 1);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

#[test]
fn deleting_a_large_file_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = new_fs(&dir, "big.db", 1 << 30);
    let f = fs
        .mknod(
            ROOT_INO,
            b"big",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap();
    let block = vec![3u8; 4 << 20];
    for i in 0..32u64 {
        fs.write(f.ino, i * (4 << 20), &block).unwrap();
    }
    fs.compact().unwrap();
    let full = fs.disk_usage().unwrap();
    assert!(full.total() >= 128 << 20, "{full:?}");
    fs.unlink(ROOT_INO, b"big").unwrap();
    let freed = fs.disk_usage().unwrap();
    assert!(freed.free_bytes >= 120 << 20, "{freed:?}");
    let c = fs.compact().unwrap();
    let after = fs.disk_usage().unwrap();
    eprintln!(
        "128 MiB file: {} B on the host, {} B after delete + compact",
        full.total(),
        after.total()
    );
    assert!(after.total() < 4 << 20, "{c:?} {after:?}");
    assert_eq!(after.wal_bytes, 0);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    // Still a working filesystem.
    let g = fs
        .mknod(
            ROOT_INO,
            b"again",
            FileKind::RegularFile,
            0o644,
            0,
            Owner::ROOT,
        )
        .unwrap();
    fs.write(g.ino, 0, b"fine").unwrap();
    drop(fs);
    let fs = Fs::open(&dir.path().join("big.db")).unwrap();
    assert_eq!(fs.read_all(g.ino).unwrap(), b"fine");
}
