//! Unmounting never follows a path: a mount made over a descriptor is
//! unmounted through its own root, a path changed under it (a directory
//! renamed, a symbolic link planted) is refused, and dead-mount checks
//! and cleanup open mountpoints without following links. Needs root
//! (prints SKIPPED otherwise).

mod common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{
    MountOptions, NotThisMount, cleanup_stale_mounts, detach_mount, find_mount_root, is_dead_mount,
    mount_connection_at,
};

fn root_and_fuse() -> bool {
    if !common::fuse_available() {
        return false;
    }
    if !common::is_root() {
        eprintln!("SKIPPED: mounting over a descriptor needs root");
        return false;
    }
    true
}

fn mount_ids_at(p: &Path) -> usize {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = p.to_str().unwrap();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(p))
        .count()
}

/// A tmpfs at `dir` holding `file` = "precious".
fn decoy(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    std::fs::write(dir.join("file"), "precious").unwrap();
}

fn open_dir(p: &Path) -> std::fs::File {
    std::fs::File::open(p).unwrap()
}

#[test]
fn a_moved_mount_is_refused_by_path_and_detached_through_its_root() {
    if !root_and_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let tm = dir.path().join("tm");
    decoy(&tm);
    let mnt = dir.path().join("b/mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let target = open_dir(&mnt);
    let (mut handle, _kept) = mount_connection_at(
        fs,
        std::os::fd::AsFd::as_fd(&target),
        &mnt,
        MountOptions::default(),
    )
    .unwrap();
    drop(target);
    std::fs::write(mnt.join("mine"), "computer").unwrap();
    let dev = handle.device().expect("a root descriptor");

    // The path now leads to the decoy through a link.
    std::fs::rename(dir.path().join("b"), dir.path().join("b_old")).unwrap();
    std::fs::create_dir(dir.path().join("y")).unwrap();
    std::os::unix::fs::symlink(&tm, dir.path().join("y/mnt")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("y"), dir.path().join("b")).unwrap();
    let err = handle.try_unmount().unwrap_err();
    let refused = err.get_ref().and_then(|e| e.downcast_ref::<NotThisMount>());
    assert_eq!(
        refused,
        Some(&NotThisMount {
            mountpoint: mnt.clone(),
            errno: libc::ELOOP
        }),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(tm.join("file")).unwrap(),
        "precious"
    );

    // A plain directory in its place: EBUSY, nothing unmounted.
    std::fs::remove_file(dir.path().join("b")).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let err = handle.try_unmount().unwrap_err();
    let errno = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<NotThisMount>())
        .map(|n| n.errno);
    assert_eq!(errno, Some(libc::EBUSY), "{err}");
    let moved = dir.path().join("b_old/mnt");
    assert_eq!(
        std::fs::read_to_string(moved.join("mine")).unwrap(),
        "computer"
    );

    // Found again by its device where it is now, not through the path.
    let found = find_mount_root(&mnt, Some(dev)).unwrap().expect("found");
    let st = nix::sys::stat::fstat(&found).unwrap();
    assert_eq!(st.st_dev, dev);
    drop(found);
    assert!(find_mount_root(&mnt, None).unwrap().is_none());

    // Unmounting detaches it wherever it is; the decoy stays.
    handle.unmount().unwrap();
    assert_eq!(mount_ids_at(&moved), 0, "the moved mount is still there");
    assert_eq!(
        std::fs::read_to_string(tm.join("file")).unwrap(),
        "precious"
    );
    nix::mount::umount(&tm).unwrap();
}

/// A FUSE mount at `at` whose connection is closed at once: dead
/// (`ENOTCONN`), as a killed server leaves it.
fn dead_mount(at: &Path) {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    nix::mount::mount(
        Some("agentcomputer"),
        at,
        Some("fuse.agentcomputer"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(format!("fd={},rootmode=40000,user_id=0,group_id=0", dev.as_raw_fd()).as_str()),
    )
    .unwrap();
    drop(dev);
}

#[test]
fn dead_mounts_are_checked_and_removed_without_following_links() {
    if !root_and_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real/mnt");
    std::fs::create_dir_all(&real).unwrap();
    dead_mount(&real);
    std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
    let through_link = dir.path().join("link/mnt");
    let err = is_dead_mount(&through_link).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    assert!(is_dead_mount(&real).unwrap());
    // A live mount and a plain directory are not dead.
    let tm = dir.path().join("tm");
    decoy(&tm);
    assert!(!is_dead_mount(&tm).unwrap());
    assert!(!is_dead_mount(dir.path()).unwrap());

    let removed = cleanup_stale_mounts(dir.path()).unwrap();
    assert_eq!(removed, vec![PathBuf::from(&real)]);
    assert_eq!(mount_ids_at(&real), 0);
    assert_eq!(
        std::fs::read_to_string(tm.join("file")).unwrap(),
        "precious"
    );
    detach_mount(&std::os::fd::OwnedFd::from(open_dir(&tm))).unwrap();
    assert_eq!(mount_ids_at(&tm), 0);
}
