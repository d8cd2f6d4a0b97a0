//! Writes made directly on the engine (as the API, shell and JavaScript
//! runtimes do) are visible through the mount at once, despite the
//! kernel's attribute, entry, negative-entry, page and directory caches.

mod common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use agentcomputer_fs::{Owner, ROOT_INO, RenameFlags, SetAttr, WriteMode};
use agentcomputer_fuse::{MountOptions, mount};
use common::mount_new;

fn cat(p: &std::path::Path) -> String {
    let out = std::process::Command::new("cat").arg(p).output().unwrap();
    assert!(
        out.status.success(),
        "cat {}: {}",
        p.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn engine_writes_are_visible_through_the_mount_at_once() {
    let Some(m) = mount_new() else { return };
    let fs = &m.fs;
    let note = m.path("note");
    std::fs::write(&note, "v1").unwrap();
    // Fill the kernel's caches: pages, attributes, entries, a negative entry
    // and the root's listing.
    assert_eq!(cat(&note), "v1");
    assert_eq!(std::fs::metadata(&note).unwrap().len(), 2);
    assert!(std::fs::metadata(m.path("later")).is_err());
    assert_eq!(names(&m.mnt), ["note"]);

    fs.write_all(
        ROOT_INO,
        b"/note",
        b"version two",
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
    assert_eq!(cat(&note), "version two");
    assert_eq!(std::fs::metadata(&note).unwrap().len(), 11);

    fs.write_all(
        ROOT_INO,
        b"/note",
        b", appended",
        WriteMode::Append,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
    assert_eq!(cat(&note), "version two, appended");

    // Shrinking through the engine shrinks what the kernel reports.
    let put = |data: &[u8]| {
        fs.write_all(
            ROOT_INO,
            b"/note",
            data,
            WriteMode::Truncate,
            0o644,
            Owner::ROOT,
        )
        .unwrap()
    };
    put(b"v3");
    assert_eq!(cat(&note), "v3");
    assert_eq!(std::fs::metadata(&note).unwrap().len(), 2);
    put(b"version two, appended");

    fs.write_all(
        ROOT_INO,
        b"/later",
        b"now here",
        WriteMode::CreateNew,
        0o600,
        Owner::ROOT,
    )
    .unwrap();
    assert_eq!(cat(&m.path("later")), "now here");
    assert_eq!(names(&m.mnt), ["later", "note"]);

    let ino = fs.resolve(ROOT_INO, b"/note", true).unwrap().ino;
    fs.setattr(
        ino,
        &SetAttr {
            perm: Some(0o600),
            uid: Some(1234),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let md = std::fs::metadata(&note).unwrap();
    assert_eq!((md.permissions().mode() & 0o7777, md.uid()), (0o600, 1234));

    fs.rename(
        ROOT_INO,
        b"note",
        ROOT_INO,
        b"renamed",
        RenameFlags::default(),
    )
    .unwrap();
    assert!(std::fs::metadata(&note).is_err());
    assert_eq!(cat(&m.path("renamed")), "version two, appended");

    fs.unlink(ROOT_INO, b"later").unwrap();
    assert!(std::fs::metadata(m.path("later")).is_err());
    assert_eq!(names(&m.mnt), ["renamed"]);

    // A file held open through the mount sees engine writes on read.
    let held = std::fs::File::open(m.path("renamed")).unwrap();
    let ino = fs.resolve(ROOT_INO, b"/renamed", true).unwrap().ino;
    fs.write(ino, 0, b"VERSION").unwrap();
    let mut buf = [0u8; 7];
    std::os::unix::fs::FileExt::read_exact_at(&held, &mut buf, 0).unwrap();
    assert_eq!(&buf, b"VERSION");
}

#[test]
fn mount_writes_reach_the_engine() {
    let Some(m) = mount_new() else { return };
    let p = m.path("from-mount");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(b"written through FUSE").unwrap();
    // With the writeback cache the data reaches the engine on fsync or close.
    f.sync_all().unwrap();
    let ino = m.fs.resolve(ROOT_INO, b"/from-mount", true).unwrap().ino;
    assert_eq!(m.fs.read_all(ino).unwrap(), b"written through FUSE");
    f.write_all(b", then closed").unwrap();
    drop(f);
    assert_eq!(
        m.fs.read_all(ino).unwrap(),
        b"written through FUSE, then closed"
    );
    std::fs::create_dir(m.path("dir")).unwrap();
    assert!(m.fs.resolve(ROOT_INO, b"/dir", true).is_ok());
}

#[test]
fn two_mounts_of_one_engine_see_each_other() {
    let Some(a) = mount_new() else { return };
    let mnt_b = a.dir.path().join("second");
    std::fs::create_dir(&mnt_b).unwrap();
    let b = mount(a.fs.clone(), &mnt_b, MountOptions::default()).unwrap();
    std::fs::write(a.path("shared"), "from a").unwrap();
    assert_eq!(cat(&mnt_b.join("shared")), "from a");
    // Cached in b now; a change through a is queued to b's invalidation
    // thread, so it shows up within moments rather than synchronously.
    std::fs::write(a.path("shared"), "changed in a").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cat(&mnt_b.join("shared")) != "changed in a" {
        assert!(Instant::now() < deadline, "second mount kept a stale page");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.unmount().unwrap();
}

#[test]
fn engine_unlink_of_a_cached_file_frees_its_data_once_the_kernel_forgets() {
    let Some(m) = mount_new() else { return };
    std::fs::write(m.path("big"), vec![3u8; 500_000]).unwrap();
    assert_eq!(std::fs::read(m.path("big")).unwrap().len(), 500_000);
    m.fs.unlink(ROOT_INO, b"big").unwrap();
    assert!(std::fs::metadata(m.path("big")).is_err());
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.fs.statfs().unwrap().used_bytes >= 500_000 {
        assert!(
            Instant::now() < deadline,
            "the kernel never forgot the unlinked inode"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(m.fs.check().unwrap().is_empty());
}

/// An `O_APPEND` descriptor on the mount and appends made elsewhere (the
/// engine, as the API and runtimes write, and a second mount) interleave
/// without overwriting each other, although the kernel's cached size does
/// not see the other appends.
#[test]
fn appends_from_the_mount_and_elsewhere_interleave_without_loss() {
    let Some(m) = mount_new() else { return };
    let path = m.path("log");
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let engine_append = |line: &str| {
        m.fs.write_all(
            ROOT_INO,
            b"log",
            line.as_bytes(),
            WriteMode::Append,
            0o644,
            Owner::ROOT,
        )
        .unwrap();
    };
    log.write_all(b"mount-1\n").unwrap();
    engine_append("engine-2\n");
    log.write_all(b"mount-3\n").unwrap();
    engine_append("engine-4\n");
    log.write_all(b"mount-5\n").unwrap();
    let want = "mount-1\nengine-2\nmount-3\nengine-4\nmount-5\n";
    assert_eq!(m.fs.read_all(ino).unwrap(), want.as_bytes());
    // The mount's own view catches up once its cache is dropped.
    let deadline = Instant::now() + Duration::from_secs(5);
    while cat(&path) != want {
        assert!(Instant::now() < deadline, "mount kept {:?}", cat(&path));
        std::thread::sleep(Duration::from_millis(5));
    }

    // Many interleaved appends, and a second mount appending too.
    let mnt_b = m.dir.path().join("second");
    std::fs::create_dir(&mnt_b).unwrap();
    let b = mount(m.fs.clone(), &mnt_b, MountOptions::default()).unwrap();
    let mut log_b = std::fs::OpenOptions::new()
        .append(true)
        .open(mnt_b.join("log"))
        .unwrap();
    for i in 0..300 {
        log.write_all(format!("a{i}\n").as_bytes()).unwrap();
        engine_append(&format!("e{i}\n"));
        log_b.write_all(format!("b{i}\n").as_bytes()).unwrap();
    }
    let text = String::from_utf8(m.fs.read_all(ino).unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().skip(5).collect();
    let expected: Vec<String> = (0..300)
        .flat_map(|i| [format!("a{i}"), format!("e{i}"), format!("b{i}")])
        .collect();
    assert_eq!(lines, expected);
    drop(log_b);
    b.unmount().unwrap();
}
