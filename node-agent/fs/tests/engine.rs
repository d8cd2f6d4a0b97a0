//! Unit tests of the engine's POSIX behaviour on real database files.

use std::sync::{Arc, Mutex};

use agentcomputer_fs::{
    Change, Errno, FileKind, Fs, Limits, MAX_FILE_SIZE, OpenOptions, Owner, ROOT_INO, RenameFlags,
    SetAttr, TimeSet, Timespec, Tuning, WriteMode, XattrFlags,
};

const O: Owner = Owner::ROOT;

fn new_fs() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    (dir, fs)
}

fn errno<T: std::fmt::Debug>(r: agentcomputer_fs::Result<T>) -> Errno {
    r.unwrap_err().errno()
}

fn file(fs: &Fs, parent: u64, name: &str) -> u64 {
    fs.mknod(parent, name.as_bytes(), FileKind::RegularFile, 0o644, 0, O)
        .unwrap()
        .ino
}

fn assert_consistent(fs: &Fs) {
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
}

#[test]
fn create_and_open_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    assert_eq!(errno(Fs::open(&p)), Errno::ENOENT);
    let fs = Fs::create(&p, Limits::default()).unwrap();
    assert_eq!(errno(Fs::create(&p, Limits::default())), Errno::EEXIST);
    file(&fs, ROOT_INO, "kept");
    drop(fs);
    let limits = Limits {
        max_bytes: 1 << 20,
        max_inodes: 100,
    };
    let fs = Fs::open_or_create(&p, limits).unwrap();
    assert_eq!(fs.limits(), limits);
    fs.lookup(ROOT_INO, b"kept").unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"").unwrap();
    assert_eq!(errno(Fs::open(&junk)), Errno::EINVAL);
}

#[test]
fn fs_and_handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Fs>();
    send_sync::<agentcomputer_fs::Handle>();
}

#[test]
fn a_closed_database_is_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    let fs = Fs::create(&p, Limits::default()).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"x").unwrap();
    fs.read_all(f).unwrap();
    drop(fs);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["fs.db".to_string()]);
    let fs = Fs::open(&p).unwrap();
    assert_eq!(fs.read_all(f).unwrap(), b"x");
}

#[test]
fn names_are_checked() {
    let (_d, fs) = new_fs();
    let long = vec![b'x'; 256];
    assert_eq!(
        errno(fs.mkdir(ROOT_INO, &long, 0o755, O)),
        Errno::ENAMETOOLONG
    );
    fs.mkdir(ROOT_INO, &long[..255], 0o755, O).unwrap();
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"a/b", 0o755, O)), Errno::EINVAL);
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"a\0b", 0o755, O)), Errno::EINVAL);
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"", 0o755, O)), Errno::ENOENT);
    assert_eq!(errno(fs.mkdir(ROOT_INO, b".", 0o755, O)), Errno::EEXIST);
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"..", 0o755, O)), Errno::EEXIST);
    // Non-UTF-8 names are fine: names are bytes.
    let odd = [0xff, 0xfe, b'n'];
    let a = fs.mkdir(ROOT_INO, &odd, 0o755, O).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, &odd).unwrap().ino, a.ino);
    assert_consistent(&fs);
}

#[test]
fn create_errors_and_nlink() {
    let (_d, fs) = new_fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    assert_eq!(d.nlink, 2);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    let f = file(&fs, d.ino, "f");
    assert_eq!(errno(fs.mkdir(d.ino, b"f", 0o755, O)), Errno::EEXIST);
    assert_eq!(errno(fs.symlink(d.ino, b"f", b"x", O)), Errno::EEXIST);
    assert_eq!(errno(fs.mkdir(f, b"x", 0o755, O)), Errno::ENOTDIR);
    assert_eq!(errno(fs.mkdir(9999, b"x", 0o755, O)), Errno::ENOENT);
    assert_eq!(
        errno(fs.mknod(d.ino, b"x", FileKind::Directory, 0o755, 0, O)),
        Errno::EINVAL
    );
    fs.mkdir(d.ino, b"s1", 0o755, O).unwrap();
    fs.mkdir(d.ino, b"s2", 0o755, O).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 4);
    fs.rmdir(d.ino, b"s1").unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 3);
    // Special files keep their kind and device number.
    let c = fs
        .mknod(d.ino, b"c", FileKind::CharDevice, 0o600, 0x0103, O)
        .unwrap();
    assert_eq!((c.kind, c.rdev), (FileKind::CharDevice, 0x0103));
    let p = fs
        .mknod(d.ino, b"p", FileKind::NamedPipe, 0o600, 7, O)
        .unwrap();
    assert_eq!((p.kind, p.rdev), (FileKind::NamedPipe, 0));
    assert_eq!(errno(fs.read(p.ino, 0, 1)), Errno::EINVAL);
    assert_consistent(&fs);
}

#[test]
fn unlink_and_rmdir_errors() {
    let (_d, fs) = new_fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    let f = file(&fs, d.ino, "f");
    assert_eq!(errno(fs.unlink(ROOT_INO, b"d")), Errno::EISDIR);
    assert_eq!(errno(fs.unlink(ROOT_INO, b".")), Errno::EISDIR);
    assert_eq!(errno(fs.unlink(ROOT_INO, b"nope")), Errno::ENOENT);
    assert_eq!(errno(fs.unlink(f, b"x")), Errno::ENOTDIR);
    assert_eq!(errno(fs.rmdir(ROOT_INO, b"d")), Errno::ENOTEMPTY);
    assert_eq!(errno(fs.rmdir(d.ino, b"f")), Errno::ENOTDIR);
    assert_eq!(errno(fs.rmdir(d.ino, b".")), Errno::EINVAL);
    assert_eq!(errno(fs.rmdir(d.ino, b"..")), Errno::ENOTEMPTY);
    let (root, name) = fs.resolve_parent(ROOT_INO, b"/").unwrap();
    assert_eq!(errno(fs.rmdir(root, &name)), Errno::EBUSY);
    assert_eq!(errno(fs.mkdir(root, &name, 0o755, O)), Errno::EEXIST);
    assert_eq!(errno(fs.unlink(root, &name)), Errno::EISDIR);
    assert_eq!(fs.lookup(root, &name).unwrap().ino, ROOT_INO);
    fs.unlink(d.ino, b"f").unwrap();
    assert_eq!(errno(fs.getattr(f)), Errno::ENOENT);
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(errno(fs.getattr(d.ino)), Errno::ENOENT);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    assert_eq!(fs.statfs().unwrap().used_inodes, 1);
    assert_consistent(&fs);
}

#[test]
fn links_count_and_refuse_directories() {
    let (_d, fs) = new_fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"data").unwrap();
    let a = fs.link(f, d.ino, b"g").unwrap();
    assert_eq!(a.nlink, 2);
    assert_eq!(errno(fs.link(d.ino, ROOT_INO, b"x")), Errno::EPERM);
    assert_eq!(errno(fs.link(f, d.ino, b"g")), Errno::EEXIST);
    assert_eq!(errno(fs.link(f, f, b"g")), Errno::ENOTDIR);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    assert_eq!(fs.read_all(f).unwrap(), b"data");
    assert_consistent(&fs);
}

#[test]
fn rename_corner_cases() {
    let (_d, fs) = new_fs();
    let none = RenameFlags::default();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, O).unwrap();
    let b = fs.mkdir(a.ino, b"b", 0o755, O).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    let g = file(&fs, ROOT_INO, "g");
    fs.write(f, 0, b"from f").unwrap();
    // Into its own subtree.
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"a", b.ino, b"x", none)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"a", a.ino, b"x", none)),
        Errno::EINVAL
    );
    // Onto an ancestor of the source.
    assert_eq!(
        errno(fs.rename(a.ino, b"b", ROOT_INO, b"a", none)),
        Errno::ENOTEMPTY
    );
    // Kind mismatches.
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", a.ino, b"b", none)),
        Errno::EISDIR
    );
    assert_eq!(
        errno(fs.rename(a.ino, b"b", ROOT_INO, b"f", none)),
        Errno::ENOTDIR
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"a", ROOT_INO, b"f", none)),
        Errno::ENOTDIR
    );
    // Special names.
    assert_eq!(
        errno(fs.rename(ROOT_INO, b".", ROOT_INO, b"z", none)),
        Errno::EBUSY
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"..", none)),
        Errno::EBUSY
    );
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"..", noreplace)),
        Errno::EEXIST
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", noreplace)),
        Errno::EEXIST
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"nope", ROOT_INO, b"g", none)),
        Errno::ENOENT
    );
    // Over a file: the target's inode goes away.
    fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", none).unwrap();
    assert_eq!(errno(fs.getattr(g)), Errno::ENOENT);
    assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().ino, f);
    // Two names of one inode: nothing happens.
    fs.link(f, ROOT_INO, b"h").unwrap();
    fs.rename(ROOT_INO, b"g", ROOT_INO, b"h", none).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().ino, f);
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    // Over an empty directory, across parents, with nlink bookkeeping.
    let e = fs.mkdir(ROOT_INO, b"e", 0o755, O).unwrap();
    fs.rename(a.ino, b"b", ROOT_INO, b"e", none).unwrap();
    assert_eq!(errno(fs.getattr(e.ino)), Errno::ENOENT);
    assert_eq!(fs.parent_of(b.ino).unwrap(), ROOT_INO);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 4);
    // Over a non-empty directory.
    file(&fs, a.ino, "inside");
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"e", ROOT_INO, b"a", none)),
        Errno::ENOTEMPTY
    );
    // Exchange a file and a directory across parents.
    let xchg = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    let inside = fs.lookup(a.ino, b"inside").unwrap().ino;
    fs.rename(ROOT_INO, b"e", a.ino, b"inside", xchg).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"e").unwrap().ino, inside);
    assert_eq!(fs.lookup(a.ino, b"inside").unwrap().ino, b.ino);
    assert_eq!(fs.parent_of(b.ino).unwrap(), a.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"e", ROOT_INO, b"nope", xchg)),
        Errno::ENOENT
    );
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"e", ROOT_INO, b"h", both)),
        Errno::EINVAL
    );
    assert_consistent(&fs);
}

#[test]
fn readdir_cookies_are_stable() {
    let (_d, fs) = new_fs();
    for i in 0..10 {
        file(&fs, ROOT_INO, &format!("f{i}"));
    }
    let first = fs.readdir(ROOT_INO, 0, 4).unwrap();
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|e| e.cookie >= 3));
    // Removing entries already listed and the one we stand on changes
    // nothing for the rest of the listing.
    fs.unlink(ROOT_INO, &first[0].name).unwrap();
    fs.unlink(ROOT_INO, &first[3].name).unwrap();
    let mut rest = Vec::new();
    let mut cookie = first[3].cookie;
    loop {
        let page = fs.readdir(ROOT_INO, cookie, 3).unwrap();
        let Some(last) = page.last() else { break };
        cookie = last.cookie;
        rest.extend(page.into_iter().map(|e| e.name));
    }
    let want: Vec<Vec<u8>> = (4..10).map(|i| format!("f{i}").into_bytes()).collect();
    assert_eq!(rest, want);
    let f = fs.lookup(ROOT_INO, b"f5").unwrap().ino;
    assert_eq!(errno(fs.readdir(f, 0, 10)), Errno::ENOTDIR);
    assert_eq!(errno(fs.readdir(999, 0, 10)), Errno::ENOENT);
}

#[test]
fn sparse_files_and_holes() {
    let dir = tempfile::tempdir().unwrap();
    let tuning = Tuning {
        chunk_size: 4096,
        page_size: 4096,
    };
    let fs = Fs::create_with(&dir.path().join("fs.db"), Limits::default(), tuning).unwrap();
    let f = file(&fs, ROOT_INO, "sparse");
    fs.write(f, 1 << 30, b"end").unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, (1 << 30) + 3);
    assert_eq!(a.blocks, 1, "a hole costs nothing");
    assert_eq!(fs.statfs().unwrap().used_bytes, 3);
    assert_eq!(fs.read(f, 1000, 10).unwrap(), vec![0; 10]);
    assert_eq!(fs.read(f, (1 << 30) - 2, 10).unwrap(), b"\0\0end");
    assert_eq!(fs.read(f, (1 << 30) + 3, 10).unwrap(), b"");
    let mut buf = [0xAAu8; 8];
    assert_eq!(fs.read_into(f, (1 << 30) - 2, &mut buf).unwrap(), 5);
    assert_eq!(&buf, b"\0\0end\xAA\xAA\xAA");
    assert_eq!(fs.read_into(f, 1 << 31, &mut buf).unwrap(), 0);
    // A write straddling a chunk boundary, then holes inside a chunk.
    fs.write(f, 4090, b"0123456789").unwrap();
    assert_eq!(fs.read(f, 4088, 14).unwrap(), b"\0\x000123456789\0\0");
    // Shrink into the middle of a chunk, then grow again: no stale bytes.
    fs.setattr(
        f,
        &SetAttr {
            size: Some(4093),
            ..Default::default()
        },
    )
    .unwrap();
    fs.setattr(
        f,
        &SetAttr {
            size: Some(9000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        fs.read(f, 4088, 14).unwrap(),
        b"\0\x00012\0\0\0\0\0\0\0\0\0"
    );
    // A chunk's blob starts at the chunk's start: 4093 bytes are stored.
    assert_eq!(fs.statfs().unwrap().used_bytes, 4093);
    assert_eq!(fs.getattr(f).unwrap().blocks, 4093u64.div_ceil(512));
    assert_eq!(errno(fs.write(f, MAX_FILE_SIZE - 1, b"xy")), Errno::EFBIG);
    assert_eq!(
        errno(fs.setattr(
            f,
            &SetAttr {
                size: Some(MAX_FILE_SIZE + 1),
                ..Default::default()
            }
        )),
        Errno::EFBIG
    );
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    assert_eq!(errno(fs.write(d.ino, 0, b"x")), Errno::EISDIR);
    assert_eq!(errno(fs.read(d.ino, 0, 1)), Errno::EISDIR);
    assert_consistent(&fs);
}

#[test]
fn quota_enospc_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_bytes: 100_000,
        max_inodes: 5,
    };
    let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, &[1u8; 60_000]).unwrap();
    assert_eq!(errno(fs.write(f, 60_000, &[2u8; 50_000])), Errno::ENOSPC);
    // Overwriting stored bytes costs nothing; the failed write left no trace.
    fs.write(f, 0, &[3u8; 60_000]).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 60_000);
    assert_eq!(fs.read_all(f).unwrap(), vec![3u8; 60_000]);
    let s = fs.statfs().unwrap();
    assert_eq!(s.used_bytes, 60_000);
    assert_eq!(s.blocks, 100_000 / 4096);
    assert_eq!(s.blocks_free, 40_000 / 4096);
    assert_eq!((s.files, s.used_inodes, s.files_free), (5, 2, 3));
    // write_all that fails on quota does not even create the file.
    assert_eq!(
        errno(fs.write_all(
            ROOT_INO,
            b"big",
            &[0u8; 50_000],
            WriteMode::Truncate,
            0o644,
            O
        )),
        Errno::ENOSPC
    );
    assert_eq!(errno(fs.lookup(ROOT_INO, b"big")), Errno::ENOENT);
    // Inode quota.
    file(&fs, ROOT_INO, "g");
    file(&fs, ROOT_INO, "h");
    fs.mkdir(ROOT_INO, b"i", 0o755, O).unwrap();
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"j", 0o755, O)), Errno::ENOSPC);
    assert_eq!(fs.statfs().unwrap().files_free, 0);
    // Truncating frees, raising the limit allows more.
    fs.setattr(
        f,
        &SetAttr {
            size: Some(10),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.statfs().unwrap().used_bytes, 10);
    fs.set_limits(Limits {
        max_bytes: 100_000,
        max_inodes: 10,
    })
    .unwrap();
    fs.mkdir(ROOT_INO, b"j", 0o755, O).unwrap();
    assert_consistent(&fs);
}

#[test]
fn unlink_while_open_keeps_data_until_close() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    let fs = Fs::create(&p, Limits::default()).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"alive").unwrap();
    let h = fs.open_inode(f).unwrap();
    let h2 = fs.open_inode(f).unwrap();
    assert_eq!(h.ino(), f);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 0);
    assert_eq!(fs.read_all(f).unwrap(), b"alive");
    fs.write(f, 5, b"!").unwrap();
    assert_eq!(errno(fs.link(f, ROOT_INO, b"back")), Errno::ENOENT);
    assert_consistent(&fs);
    drop(h);
    assert_eq!(fs.read_all(f).unwrap(), b"alive!");
    drop(h2);
    assert_eq!(errno(fs.getattr(f)), Errno::ENOENT);
    assert_eq!(fs.statfs().unwrap().used_bytes, 0);
    // Replaced by rename while open, then the process "crashes" (the handle
    // is leaked): the next open purges it.
    let g = file(&fs, ROOT_INO, "g");
    fs.write(g, 0, b"old").unwrap();
    file(&fs, ROOT_INO, "new");
    std::mem::forget(fs.open_inode(g).unwrap());
    fs.rename(ROOT_INO, b"new", ROOT_INO, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.read_all(g).unwrap(), b"old");
    drop(fs);
    let fs = Fs::open(&p).unwrap();
    assert_eq!(errno(fs.getattr(g)), Errno::ENOENT);
    assert_eq!(fs.statfs().unwrap().used_inodes, 2);
    assert_consistent(&fs);
    assert_eq!(errno(fs.open_inode(g)), Errno::ENOENT);
}

#[test]
fn an_open_for_a_live_connection_keeps_orphans_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    let fs = Fs::create(&p, Limits::default()).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"unlinked but open").unwrap();
    let g = file(&fs, ROOT_INO, "g");
    fs.write(g, 0, b"also").unwrap();
    // The serving process dies with both held open by the kernel.
    std::mem::forget(fs.open_inode(f).unwrap());
    std::mem::forget(fs.open_inode(g).unwrap());
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    let linked = file(&fs, ROOT_INO, "linked");
    drop(fs);

    let fs = Fs::open_with(&p, OpenOptions { keep_orphans: true }).unwrap();
    assert_eq!(fs.kept_orphans(), 2);
    // Reads, writes and truncation work with no engine handle.
    assert_eq!(fs.read_all(f).unwrap(), b"unlinked but open");
    fs.write(f, 17, b", and more").unwrap();
    fs.setattr(
        f,
        &SetAttr {
            size: Some(24),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.read_all(f).unwrap(), b"unlinked but open, and m");
    assert_eq!(fs.getattr(f).unwrap().nlink, 0);
    assert_consistent(&fs);
    // An engine handle's drop does not free a kept orphan: the kernel
    // still holds it.
    drop(fs.open_inode(f).unwrap());
    assert_eq!(fs.read_all(f).unwrap(), b"unlinked but open, and m");
    // Only a kept orphan is released; anything else is left alone.
    assert!(!fs.release_orphan(linked).unwrap());
    assert!(!fs.release_orphan(ROOT_INO).unwrap());
    assert!(!fs.release_orphan(987_654).unwrap());
    assert_eq!(fs.getattr(linked).unwrap().nlink, 1);
    // Released while an engine handle holds it: the handle frees it.
    let h = fs.open_inode(f).unwrap();
    assert!(!fs.release_orphan(f).unwrap());
    assert_eq!(fs.read(f, 0, 8).unwrap(), b"unlinked");
    drop(h);
    assert_eq!(errno(fs.getattr(f)), Errno::ENOENT);
    // Released with no handle: freed at once.
    assert!(fs.release_orphan(g).unwrap());
    assert_eq!(errno(fs.getattr(g)), Errno::ENOENT);
    assert!(!fs.release_orphan(g).unwrap());
    assert_eq!(fs.kept_orphans(), 0);
    assert_eq!(fs.statfs().unwrap().used_bytes, 0);
    assert_eq!(fs.statfs().unwrap().used_inodes, 2);
    assert_consistent(&fs);
}

#[test]
fn orphans_kept_for_a_connection_that_died_go_at_the_next_ordinary_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    let fs = Fs::create(&p, Limits::default()).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"data").unwrap();
    std::mem::forget(fs.open_inode(f).unwrap());
    fs.unlink(ROOT_INO, b"f").unwrap();
    drop(fs);
    let keep = OpenOptions { keep_orphans: true };
    // Kept across any number of opens for live connections...
    for _ in 0..2 {
        let fs = Fs::open_with(&p, keep).unwrap();
        assert_eq!(fs.kept_orphans(), 1);
        assert_eq!(fs.read_all(f).unwrap(), b"data");
    }
    // ...and freed by an ordinary one.
    let fs = Fs::open(&p).unwrap();
    assert_eq!(fs.kept_orphans(), 0);
    assert_eq!(errno(fs.getattr(f)), Errno::ENOENT);
    assert_eq!(fs.statfs().unwrap().used_bytes, 0);
    assert_consistent(&fs);
}

#[test]
fn symlinks_and_resolution() {
    let (_d, fs) = new_fs();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, O).unwrap();
    let f = file(&fs, a.ino, "f");
    let l = fs.symlink(ROOT_INO, b"abs", b"/workspace/a/f", O).unwrap();
    assert_eq!(l.size, 14);
    assert_eq!(l.perm, 0o777);
    assert_eq!(fs.readlink(l.ino).unwrap(), b"/workspace/a/f");
    assert_eq!(errno(fs.readlink(f)), Errno::EINVAL);
    assert_eq!(fs.resolve(ROOT_INO, b"abs", true).unwrap().ino, f);
    assert_eq!(fs.resolve(ROOT_INO, b"abs", false).unwrap().ino, l.ino);
    fs.symlink(ROOT_INO, b"ws", b"/workspace", O).unwrap();
    assert_eq!(fs.resolve(ROOT_INO, b"ws/a/f", true).unwrap().ino, f);
    fs.symlink(a.ino, b"up", b"../../../a", O).unwrap();
    assert_eq!(fs.resolve(ROOT_INO, b"/a/up/f", true).unwrap().ino, f);
    fs.symlink(ROOT_INO, b"chroot", b"/a", O).unwrap();
    assert_eq!(fs.resolve(a.ino, b"../../chroot/f", true).unwrap().ino, f);
    // Trailing slash and non-directories.
    assert_eq!(errno(fs.resolve(ROOT_INO, b"a/f/", true)), Errno::ENOTDIR);
    assert_eq!(errno(fs.resolve(ROOT_INO, b"a/f/x", true)), Errno::ENOTDIR);
    assert_eq!(fs.resolve(ROOT_INO, b"chroot/", false).unwrap().ino, a.ino);
    // Loops and limits.
    fs.symlink(ROOT_INO, b"loop", b"loop", O).unwrap();
    assert_eq!(errno(fs.resolve(ROOT_INO, b"loop", true)), Errno::ELOOP);
    fs.resolve(ROOT_INO, b"loop", false).unwrap();
    let mut prev = b"a".to_vec();
    for i in 0..41 {
        let name = format!("l{i}").into_bytes();
        fs.symlink(ROOT_INO, &name, &prev, O).unwrap();
        prev = name;
    }
    assert_eq!(fs.resolve(ROOT_INO, b"l39", true).unwrap().ino, a.ino);
    assert_eq!(errno(fs.resolve(ROOT_INO, b"l40", true)), Errno::ELOOP);
    assert_eq!(
        errno(fs.resolve(ROOT_INO, &vec![b'a'; 4096], true)),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs.resolve(ROOT_INO, &vec![b'a'; 256], true)),
        Errno::ENAMETOOLONG
    );
    assert_eq!(errno(fs.resolve(ROOT_INO, b"", true)), Errno::ENOENT);
    assert_eq!(errno(fs.symlink(ROOT_INO, b"empty", b"", O)), Errno::ENOENT);
    // ".." never leaves the root.
    assert_eq!(
        fs.resolve(a.ino, b"../../../..", true).unwrap().ino,
        ROOT_INO
    );
    assert_eq!(fs.resolve(a.ino, b"/", true).unwrap().ino, ROOT_INO);
    // resolve_parent.
    assert_eq!(
        fs.resolve_parent(ROOT_INO, b"a/new").unwrap(),
        (a.ino, b"new".to_vec())
    );
    assert_eq!(
        fs.resolve_parent(ROOT_INO, b"chroot/x/").unwrap(),
        (a.ino, b"x".to_vec())
    );
    assert_eq!(
        fs.resolve_parent(a.ino, b"n").unwrap(),
        (a.ino, b"n".to_vec())
    );
    assert_eq!(
        fs.resolve_parent(ROOT_INO, b"///").unwrap(),
        (ROOT_INO, b"/".to_vec())
    );
    assert_eq!(errno(fs.resolve_parent(ROOT_INO, b"a/f/x")), Errno::ENOTDIR);
    assert_eq!(errno(fs.resolve_parent(ROOT_INO, b"nope/x")), Errno::ENOENT);
}

#[test]
fn write_all_modes() {
    let (_d, fs) = new_fs();
    let a = fs
        .write_all(ROOT_INO, b"/f", b"one", WriteMode::CreateNew, 0o640, O)
        .unwrap();
    assert_eq!((a.size, a.perm), (3, 0o640));
    assert_eq!(
        errno(fs.write_all(ROOT_INO, b"/f", b"x", WriteMode::CreateNew, 0o640, O)),
        Errno::EEXIST
    );
    fs.write_all(ROOT_INO, b"f", b"+two", WriteMode::Append, 0o600, O)
        .unwrap();
    assert_eq!(fs.read_all(a.ino).unwrap(), b"one+two");
    fs.write_all(ROOT_INO, b"f", b"3", WriteMode::Truncate, 0o600, O)
        .unwrap();
    assert_eq!(fs.read_all(a.ino).unwrap(), b"3");
    assert_eq!(
        fs.getattr(a.ino).unwrap().perm,
        0o640,
        "existing file keeps its mode"
    );
    // A dangling symlink is followed to create its target.
    fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    fs.symlink(ROOT_INO, b"dangling", b"/workspace/d/target", O)
        .unwrap();
    assert_eq!(
        errno(fs.write_all(ROOT_INO, b"dangling", b"x", WriteMode::CreateNew, 0o644, O)),
        Errno::EEXIST
    );
    fs.write_all(
        ROOT_INO,
        b"dangling",
        b"via link",
        WriteMode::Truncate,
        0o644,
        O,
    )
    .unwrap();
    let t = fs.resolve(ROOT_INO, b"d/target", false).unwrap();
    assert_eq!(fs.read_all(t.ino).unwrap(), b"via link");
    assert_eq!(
        errno(fs.write_all(ROOT_INO, b"d", b"x", WriteMode::Truncate, 0o644, O)),
        Errno::EISDIR
    );
    assert_eq!(
        errno(fs.write_all(ROOT_INO, b"new/", b"x", WriteMode::Truncate, 0o644, O)),
        Errno::EISDIR
    );
    assert_eq!(
        errno(fs.write_all(ROOT_INO, b"no/f", b"x", WriteMode::Truncate, 0o644, O)),
        Errno::ENOENT
    );
    assert_consistent(&fs);
}

#[test]
fn xattrs() {
    let (_d, fs) = new_fs();
    let f = file(&fs, ROOT_INO, "f");
    let create = XattrFlags {
        create: true,
        replace: false,
    };
    let replace = XattrFlags {
        create: false,
        replace: true,
    };
    assert_eq!(errno(fs.getxattr(f, b"user.a")), Errno::ENODATA);
    assert_eq!(
        errno(fs.setxattr(f, b"user.a", b"1", replace)),
        Errno::ENODATA
    );
    fs.setxattr(f, b"user.a", b"1", create).unwrap();
    assert_eq!(
        errno(fs.setxattr(f, b"user.a", b"2", create)),
        Errno::EEXIST
    );
    fs.setxattr(f, b"user.a", b"2", replace).unwrap();
    fs.setxattr(f, b"user.b", b"", XattrFlags::default())
        .unwrap();
    assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"2");
    assert_eq!(fs.getxattr(f, b"user.b").unwrap(), b"");
    assert_eq!(
        fs.listxattr(f).unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    fs.removexattr(f, b"user.a").unwrap();
    assert_eq!(errno(fs.removexattr(f, b"user.a")), Errno::ENODATA);
    assert_eq!(errno(fs.setxattr(f, b"", b"x", create)), Errno::ERANGE);
    assert_eq!(
        errno(fs.setxattr(f, &[b'n'; 256], b"x", create)),
        Errno::ERANGE
    );
    // Namespaces as on ext4: unknown ones are ENOTSUP, a bare prefix EINVAL.
    for bad in [&b"bogus.ns"[..], b"user", b"system.posix_acl_access"] {
        assert_eq!(errno(fs.setxattr(f, bad, b"x", create)), Errno::ENOTSUP);
        assert_eq!(errno(fs.getxattr(f, bad)), Errno::ENOTSUP);
    }
    assert_eq!(errno(fs.setxattr(f, b"user.", b"x", create)), Errno::EINVAL);
    fs.setxattr(f, b"trusted.t", b"x", create).unwrap();
    fs.setxattr(f, b"security.s", b"x", create).unwrap();
    fs.removexattr(f, b"trusted.t").unwrap();
    fs.removexattr(f, b"security.s").unwrap();
    assert_eq!(
        errno(fs.setxattr(f, b"user.big", &vec![0; 65537], create)),
        Errno::E2BIG
    );
    assert_eq!(errno(fs.getxattr(999, b"user.a")), Errno::ENOENT);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_consistent(&fs);
}

#[test]
fn setattr_and_times() {
    let (_d, fs) = new_fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, O).unwrap();
    let f = file(&fs, d.ino, "f");
    let before = fs.getattr(d.ino).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    file(&fs, d.ino, "g");
    let after = fs.getattr(d.ino).unwrap();
    assert!(after.mtime > before.mtime && after.ctime > before.ctime);
    let t = Timespec {
        sec: 1_000_000_000,
        nsec: 123_456_789,
    };
    let a = fs
        .setattr(
            f,
            &SetAttr {
                atime: Some(TimeSet::At(t)),
                mtime: Some(TimeSet::At(t)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.atime, a.mtime), (t, t));
    assert!(a.ctime > t);
    let a = fs
        .setattr(
            f,
            &SetAttr {
                perm: Some(0o4755),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.perm, 0o4755);
    assert_eq!(a.mode(), libc::S_IFREG | 0o4755);
    // chown clears set-user-ID.
    let a = fs
        .setattr(
            f,
            &SetAttr {
                uid: Some(1000),
                gid: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (1000, 1000, 0o755));
    fs.write(f, 0, b"abc").unwrap();
    let w = fs.getattr(f).unwrap();
    assert!(w.mtime > t);
    assert_eq!(
        errno(fs.setattr(
            d.ino,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            }
        )),
        Errno::EISDIR
    );
    assert_eq!(errno(fs.setattr(999, &SetAttr::default())), Errno::ENOENT);
}

#[test]
fn changes_are_announced_after_commit() {
    let (_d, fs) = new_fs();
    let seen: Arc<Mutex<Vec<Change>>> = Arc::default();
    let s = seen.clone();
    let fs2 = fs.clone();
    let id = fs.subscribe(Box::new(move |c| {
        // The change is committed: a reader sees it from inside the callback.
        if let Change::Entry { parent, name } = c {
            let _ = fs2.lookup(*parent, name);
        }
        s.lock().unwrap().push(c.clone());
    }));
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, b"x").unwrap();
    let got = std::mem::take(&mut *seen.lock().unwrap());
    assert!(got.contains(&Change::Entry {
        parent: ROOT_INO,
        name: b"f".to_vec()
    }));
    assert!(got.contains(&Change::Inode(ROOT_INO)));
    assert!(got.contains(&Change::Inode(f)));
    // A failed call announces nothing.
    fs.unlink(ROOT_INO, b"nope").unwrap_err();
    assert!(seen.lock().unwrap().is_empty());
    fs.unsubscribe(id);
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn reads_do_not_wait_for_writes_and_threads_share_one_fs() {
    let (_d, fs) = new_fs();
    let f = file(&fs, ROOT_INO, "f");
    fs.write(f, 0, &[7u8; 1000]).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let name = format!("t{t}-{i}");
                    let a = fs
                        .write_all(
                            ROOT_INO,
                            name.as_bytes(),
                            name.as_bytes(),
                            WriteMode::CreateNew,
                            0o644,
                            O,
                        )
                        .unwrap();
                    assert_eq!(fs.read_all(a.ino).unwrap(), name.as_bytes());
                    assert_eq!(fs.read(f, 0, 1000).unwrap(), vec![7u8; 1000]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(fs.statfs().unwrap().used_inodes, 2 + 200);
    assert_consistent(&fs);
    fs.fsync(Some(f)).unwrap();
}

/// Opening, reading and closing an inode races with unlinking and
/// recreating it: a handle either fails with ENOENT or keeps the data it
/// opened readable until dropped, and nothing leaks.
#[test]
fn open_races_unlink() {
    let (_d, fs) = new_fs();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let current = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (fs, stop, current) = (fs.clone(), stop.clone(), current.clone());
        std::thread::spawn(move || {
            for i in 0..300u32 {
                let a = fs
                    .write_all(
                        ROOT_INO,
                        b"f",
                        &i.to_le_bytes(),
                        WriteMode::CreateNew,
                        0o644,
                        O,
                    )
                    .unwrap();
                current.store(a.ino, std::sync::atomic::Ordering::SeqCst);
                fs.unlink(ROOT_INO, b"f").unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut held = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let ino = current.load(std::sync::atomic::Ordering::SeqCst);
        if ino == 0 {
            continue;
        }
        match fs.open_inode(ino) {
            Ok(h) => {
                held += 1;
                // Whatever happens to its name, an open inode stays readable.
                assert_eq!(fs.read_all(h.ino()).unwrap().len(), 4);
                drop(h);
            }
            Err(e) => assert_eq!(e.errno(), Errno::ENOENT),
        }
    }
    writer.join().unwrap();
    assert!(held > 0, "no open ever won the race");
    assert_eq!(fs.statfs().unwrap().used_inodes, 1);
    assert_eq!(fs.statfs().unwrap().used_bytes, 0);
    assert_consistent(&fs);
}

/// 256 MiB written in 1 MiB pieces, checked by hash without holding the file
/// in memory. Slow in debug builds: run with `--ignored` (and `--release`).
#[test]
#[ignore]
fn file_larger_than_the_cache() {
    use std::hash::Hasher;
    let (_d, fs) = new_fs();
    let f = file(&fs, ROOT_INO, "big");
    let piece = |i: u64| -> Vec<u8> {
        (0..1u64 << 20)
            .map(|j| (i * 31 + j * 7 % 251) as u8)
            .collect()
    };
    let mut want = std::collections::hash_map::DefaultHasher::new();
    for i in 0..256 {
        let p = piece(i);
        want.write(&p);
        fs.write(f, i << 20, &p).unwrap();
    }
    assert_eq!(fs.getattr(f).unwrap().size, 256 << 20);
    let mut got = std::collections::hash_map::DefaultHasher::new();
    for i in 0..256u64 {
        got.write(&fs.read(f, i << 20, 1 << 20).unwrap());
    }
    assert_eq!(got.finish(), want.finish());
    assert_eq!(fs.statfs().unwrap().used_bytes, 256 << 20);
    assert_consistent(&fs);
}

#[test]
fn readdir_plus_matches_readdir_and_getattr() {
    let (_d, fs) = new_fs();
    let dir = fs.mkdir(ROOT_INO, b"d", 0o750, Owner::ROOT).unwrap().ino;
    for i in 0..300 {
        let f = file(&fs, dir, &format!("f{i}"));
        fs.write(f, 0, &vec![1u8; i]).unwrap();
    }
    fs.symlink(dir, b"s", b"f1", Owner::ROOT).unwrap();
    let sub = fs.mkdir(dir, b"sub", 0o700, Owner::ROOT).unwrap().ino;
    let mut plain = Vec::new();
    let mut after = 0;
    loop {
        let page = fs.readdir(dir, after, 128).unwrap();
        let Some(last) = page.last() else { break };
        after = last.cookie;
        plain.extend(page);
    }
    let mut plus = Vec::new();
    let mut after = 0;
    loop {
        let (parent, page) = fs.readdir_plus(dir, after, 128).unwrap();
        assert_eq!(parent, ROOT_INO);
        let Some((last, _)) = page.last() else { break };
        after = last.cookie;
        plus.extend(page);
    }
    assert_eq!(plain.len(), 302);
    assert_eq!(plus.len(), plain.len());
    for ((e, a), p) in plus.iter().zip(&plain) {
        assert_eq!(e, p);
        assert_eq!(*a, fs.getattr(e.ino).unwrap(), "attributes of {:?}", e.name);
    }
    assert_eq!(fs.readdir_plus(sub, 0, 10).unwrap(), (dir, Vec::new()));
    assert_eq!(errno(fs.readdir_plus(plain[0].ino, 0, 10)), Errno::ENOTDIR);
    assert_eq!(errno(fs.readdir_plus(999_999, 0, 10)), Errno::ENOENT);
}

#[test]
fn appends_from_many_threads_never_overwrite_each_other() {
    let (_d, fs) = new_fs();
    let ino = file(&fs, ROOT_INO, "log");
    std::thread::scope(|s| {
        for t in 0..4 {
            let fs = fs.clone();
            s.spawn(move || {
                for i in 0..100 {
                    let line = format!("{t}:{i:03}\n");
                    let (at, n) = fs.append(ino, line.as_bytes()).unwrap();
                    assert_eq!(n, line.len());
                    assert_eq!(at % 6, 0, "appended at a line boundary");
                }
            });
        }
    });
    let text = String::from_utf8(fs.read_all(ino).unwrap()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 400);
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), 400, "every line once");
    assert_eq!(errno(fs.append(ROOT_INO, b"x")), Errno::EISDIR);
    assert_consistent(&fs);
}

#[test]
fn xattrs_and_symlink_targets_count_against_the_byte_quota() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_bytes: 10_000,
        max_inodes: 100,
    };
    let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
    let used = |fs: &Fs| fs.statfs().unwrap().used_bytes;
    let f = file(&fs, ROOT_INO, "f");
    let set = XattrFlags::default();
    fs.setxattr(f, b"user.a", &[1u8; 5000], set).unwrap();
    assert_eq!(used(&fs), 5006);
    assert_eq!(
        errno(fs.setxattr(f, b"user.b", &[2u8; 5000], set)),
        Errno::ENOSPC
    );
    assert_eq!(used(&fs), 5006, "a refused xattr stores nothing");
    // Replacing a value counts the difference.
    fs.setxattr(f, b"user.a", &[1u8; 1000], set).unwrap();
    assert_eq!(used(&fs), 1006);
    fs.setxattr(f, b"user.b", &[2u8; 5000], set).unwrap();
    assert_eq!(used(&fs), 6012);
    fs.removexattr(f, b"user.a").unwrap();
    assert_eq!(used(&fs), 5006);

    let target = vec![b't'; 4000];
    fs.symlink(ROOT_INO, b"l", &target, O).unwrap();
    assert_eq!(used(&fs), 9006);
    assert_eq!(
        errno(fs.symlink(ROOT_INO, b"l2", &target, O)),
        Errno::ENOSPC
    );
    assert_consistent(&fs);
    // Freeing the inodes gives their xattr and target bytes back.
    fs.unlink(ROOT_INO, b"l").unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(used(&fs), 0);
    assert_consistent(&fs);
}

/// Names outside `user.`, `trusted.` and `security.` stored before the
/// namespace check (through an older build) stay readable and removable,
/// so their space can be reclaimed; new ones are refused.
#[test]
fn xattrs_stored_under_other_namespaces_stay_readable_and_removable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let f = file(&fs, ROOT_INO, "f");
    drop(fs);
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(&format!(
            "INSERT INTO xattrs (ino, name, value) VALUES ({f}, CAST('bogus.ns' AS BLOB), CAST('v' AS BLOB));
             UPDATE meta SET value = value + 9 WHERE key = 'used_bytes';"
        ))
        .unwrap();
    }
    let fs = Fs::open(&db).unwrap();
    assert_consistent(&fs);
    assert_eq!(fs.listxattr(f).unwrap(), vec![b"bogus.ns".to_vec()]);
    assert_eq!(fs.getxattr(f, b"bogus.ns").unwrap(), b"v");
    assert_eq!(
        errno(fs.setxattr(f, b"bogus.ns", b"w", XattrFlags::default())),
        Errno::ENOTSUP
    );
    fs.removexattr(f, b"bogus.ns").unwrap();
    assert_eq!(errno(fs.getxattr(f, b"bogus.ns")), Errno::ENOTSUP);
    assert_eq!(errno(fs.removexattr(f, b"bogus.ns")), Errno::ENOTSUP);
    assert_eq!(errno(fs.getxattr(f, b"user.none")), Errno::ENODATA);
    assert_eq!(fs.statfs().unwrap().used_bytes, 0);
    assert_consistent(&fs);
}

/// A swap resent by the kernel after a take-over (`FUSE_UNIQUE_RESEND`) is
/// applied once: the record written with the first swap stops the second,
/// also after the database is closed and opened again (the new server is
/// a new process); an unrecorded or new request swaps as usual.
#[test]
fn a_resent_exchange_is_applied_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fs.db");
    let fs = Fs::create(&p, Limits::default()).unwrap();
    let a = file(&fs, ROOT_INO, "a");
    let b = file(&fs, ROOT_INO, "b");
    let at = |fs: &Fs, name: &str| fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;

    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 42, false)
            .unwrap()
    );
    assert_eq!((at(&fs, "a"), at(&fs, "b")), (b, a));
    drop(fs);

    let fs = Fs::open(&p).unwrap();
    // The same request again, as the kernel resends it: already applied.
    assert!(
        !fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 42, true)
            .unwrap()
    );
    assert_eq!((at(&fs, "a"), at(&fs, "b")), (b, a));
    // A resent request the dead server never applied swaps.
    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 44, true)
            .unwrap()
    );
    assert_eq!((at(&fs, "a"), at(&fs, "b")), (a, b));
    // A new request (not resent) with a remembered id swaps too: ids are
    // per connection, and only a resend can repeat one.
    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 42, false)
            .unwrap()
    );
    assert_eq!((at(&fs, "a"), at(&fs, "b")), (b, a));
    // Errors are the rename's, and a failed swap leaves no record.
    assert_eq!(
        errno(fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"gone", 46, false)),
        Errno::ENOENT
    );
    file(&fs, ROOT_INO, "gone");
    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"gone", 46, true)
            .unwrap()
    );
    assert_consistent(&fs);
}

/// Only the last `EXCHANGES_REMEMBERED` swaps are kept.
#[test]
fn applied_exchanges_are_bounded() {
    let (_dir, fs) = new_fs();
    file(&fs, ROOT_INO, "a");
    file(&fs, ROOT_INO, "b");
    let n = agentcomputer_fs::EXCHANGES_REMEMBERED as u64;
    for id in 0..n + 10 {
        assert!(
            fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", id, false)
                .unwrap()
        );
    }
    // The oldest ten were dropped: resent, they swap again.
    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 3, true)
            .unwrap()
    );
    // That swap pushed out one more (id 10); the newest are still known.
    assert!(
        !fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", n + 9, true)
            .unwrap()
    );
    assert!(
        !fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 11, true)
            .unwrap()
    );
    assert!(
        fs.exchange_once(ROOT_INO, b"a", ROOT_INO, b"b", 10, true)
            .unwrap()
    );
}
