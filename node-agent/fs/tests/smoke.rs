use agentcomputer_fs::*;

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("c.db"), Limits::default()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, Owner::ROOT).unwrap();
    let f = fs
        .mknod(d.ino, b"f", FileKind::RegularFile, 0o644, 0, Owner::ROOT)
        .unwrap();
    fs.write(f.ino, 100_000, b"hello").unwrap();
    assert_eq!(fs.read(f.ino, 100_000, 10).unwrap(), b"hello");
    assert_eq!(fs.getattr(f.ino).unwrap().size, 100_005);
    let a = fs.resolve(ROOT_INO, b"/d/f", true).unwrap();
    assert_eq!(a.ino, f.ino);
    fs.rename(d.ino, b"f", ROOT_INO, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.readdir(ROOT_INO, 0, 10).unwrap().len(), 2);
    fs.unlink(ROOT_INO, b"g").unwrap();
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    let s = fs.statfs().unwrap();
    assert_eq!(s.used_inodes, 2);
    assert_eq!(s.used_bytes, 0);
}
