//! `serve_connection` over a descriptor mounted by someone else, as the
//! cluster's mounter does: the test opens `/dev/fuse` and calls `mount(2)`
//! with `fd=N` itself, then hands the descriptor to `serve_connection`.
//! Needs root and /dev/fuse (prints SKIPPED otherwise).

mod common;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentcomputer_fs::{Fs, Limits, Owner, ROOT_INO, WriteMode};
use agentcomputer_fuse::{MountOptions, serve_connection};
use nix::mount::{MntFlags, umount2};

fn can_mount() -> bool {
    if !common::fuse_available() {
        return false;
    }
    if !common::is_root() {
        eprintln!("SKIPPED: mounting with fd=N needs root");
        return false;
    }
    true
}

#[test]
fn a_handed_over_connection_is_served_until_the_kernel_ends_it() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let target = dir.path().join("mnt");
    std::fs::create_dir(&target).unwrap();
    let kept = common::mount_fd(&target);
    // The server gets its own duplicate, as SCM_RIGHTS would give it.
    let handed = kept.try_clone().unwrap();
    let conn = serve_connection(fs.clone(), handed, MountOptions::default()).unwrap();
    assert!(conn.is_serving());
    let ended = Arc::new(AtomicBool::new(false));
    let flag = ended.clone();
    conn.on_end(move || flag.store(true, Ordering::SeqCst));

    // Through the kernel into the engine.
    std::fs::write(target.join("a"), b"hi\n").unwrap();
    let a = fs.lookup(ROOT_INO, b"a").unwrap();
    assert_eq!(fs.read_all(a.ino).unwrap(), b"hi\n");
    // From the engine out through the kernel (cached entry invalidated).
    assert!(std::fs::metadata(target.join("b")).is_err());
    fs.write_all(
        ROOT_INO,
        b"b",
        b"from the engine",
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
    assert_eq!(std::fs::read(target.join("b")).unwrap(), b"from the engine");

    // The mounter still holds its descriptor: only the unmount ends it.
    umount2(&target, MntFlags::empty()).unwrap();
    assert!(
        conn.wait_ended(Duration::from_secs(5)),
        "session still running after unmount"
    );
    assert!(ended.load(Ordering::SeqCst), "end hook not called");
    assert!(!conn.is_serving());
    // A hook set after the end runs at once.
    let late = Arc::new(AtomicBool::new(false));
    let flag = late.clone();
    conn.on_end(move || flag.store(true, Ordering::SeqCst));
    assert!(late.load(Ordering::SeqCst));
    drop(kept);
}

#[test]
fn a_descriptor_without_a_mount_is_refused_at_once() {
    if !can_mount() {
        return;
    }
    // A fresh /dev/fuse descriptor that nothing mounted: no FUSE_INIT can come.
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let start = std::time::Instant::now();
    let err = serve_connection(fs, OwnedFd::from(dev), MountOptions::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert!(start.elapsed() < agentcomputer_fuse::INIT_TIMEOUT);
}

#[test]
fn a_connection_unmounted_before_init_is_refused() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let target = dir.path().join("mnt");
    std::fs::create_dir(&target).unwrap();
    let fd = common::mount_fd(&target);
    umount2(&target, MntFlags::empty()).unwrap();
    let err = serve_connection(fs, fd, MountOptions::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}
