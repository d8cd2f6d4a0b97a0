//! Mount lifecycle: unmounting (also while busy) and stale-mount cleanup.

mod common;

use std::io::Read;
use std::path::Path;

use agentcomputer_fuse::{MountOptions, cleanup_stale_mounts, mount};
use common::mount_new;

fn is_mountpoint(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = p.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(p))
}

#[test]
fn unmount_frees_the_path_and_keeps_the_data() {
    let Some(mut m) = mount_new() else { return };
    std::fs::write(m.path("kept"), b"still here").unwrap();
    let (fs, mnt) = (m.fs.clone(), m.mnt.clone());
    assert!(is_mountpoint(&mnt));
    m.unmount();
    assert!(!is_mountpoint(&mnt));
    assert!(!mnt.join("kept").exists());
    // Mount the same engine again: the data is there.
    let h = mount(fs, &mnt, MountOptions::default()).unwrap();
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"still here");
    drop(h);
    assert!(!is_mountpoint(&mnt));
}

#[test]
fn busy_mount_is_detached_and_open_files_keep_working() {
    let Some(mut m) = mount_new() else { return };
    std::fs::write(m.path("open"), b"served after detach").unwrap();
    let mut held = std::fs::File::open(m.path("open")).unwrap();
    let mnt = m.mnt.clone();
    m.unmount();
    assert!(!is_mountpoint(&mnt), "the path is free at once");
    let mut s = String::new();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "served after detach");
}

#[test]
fn cleanup_leaves_live_mounts_alone() {
    let Some(m) = mount_new() else { return };
    assert_eq!(
        cleanup_stale_mounts(m.dir.path()).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(is_mountpoint(&m.mnt));
    std::fs::write(m.path("alive"), b"yes").unwrap();
}

#[test]
fn writeback_cache_mode_serves_reads_and_writes() {
    use std::io::Write;
    let Some(m) = common::mount_with(MountOptions {
        writeback_cache: true,
        ..MountOptions::default()
    }) else {
        return;
    };
    let p = m.path("wb");
    let mut f = std::fs::File::create(&p).unwrap();
    for i in 0..1000 {
        writeln!(f, "line {i}").unwrap();
    }
    // The kernel holds the data until fsync or close.
    f.sync_all().unwrap();
    let ino = std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
    let stored = m.fs.read_all(ino).unwrap();
    assert_eq!(
        stored.len(),
        (0..1000)
            .map(|i| format!("line {i}\n").len())
            .sum::<usize>()
    );
    drop(f);
    let back = std::fs::read_to_string(&p).unwrap();
    assert!(back.starts_with("line 0\nline 1\n") && back.ends_with("line 999\n"));
}

/// With the writeback cache the kernel's size is authoritative: an
/// `O_DIRECT | O_APPEND` write after buffered appends that are still dirty
/// in the kernel lands after them, not at the engine's older end.
#[test]
fn writeback_mode_takes_append_offsets_from_the_kernel() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(m) = common::mount_with(MountOptions {
        writeback_cache: true,
        ..MountOptions::default()
    }) else {
        return;
    };
    let p = m.path("log");
    let mut buffered = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&p)
        .unwrap();
    buffered.write_all(&[b'a'; 8192]).unwrap();
    let mut direct = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    // O_DIRECT wants an aligned buffer.
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero size; freed below with the same layout.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    // SAFETY: `buf` holds 4096 initialised bytes.
    let block = unsafe { std::slice::from_raw_parts_mut(buf, 4096) };
    block.fill(b'd');
    direct.write_all(block).unwrap();
    // SAFETY: allocated above with `layout`.
    unsafe { std::alloc::dealloc(buf, layout) };
    buffered.sync_all().unwrap();
    let back = std::fs::read(&p).unwrap();
    assert_eq!(back.len(), 12288);
    assert!(back[..8192].iter().all(|&b| b == b'a'));
    assert!(back[8192..].iter().all(|&b| b == b'd'));
}

/// `nosymfollow`: a link on the mount pointing at a file outside it is not
/// followed (`ELOOP`), `readlink` and `lstat` still work; without the
/// option (a sandbox's mount) the same link is followed.
#[test]
fn nosymfollow_mounts_refuse_to_follow_links() {
    if !common::is_root() {
        eprintln!("SKIPPED: setting nosymfollow needs root");
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"outside").unwrap();

    let Some(m) = common::mount_with(MountOptions {
        nosymfollow: true,
        ..MountOptions::default()
    }) else {
        return;
    };
    let link = m.path("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = std::fs::write(&link, b"through the link").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"outside");
    assert_eq!(std::fs::read_link(&link).unwrap(), victim);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Plain files and directories work as ever.
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/f"), b"x").unwrap();
    assert_eq!(std::fs::read(m.path("d/f")).unwrap(), b"x");

    let Some(plain) = common::mount_new() else {
        return;
    };
    let link = plain.path("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    assert_eq!(std::fs::read(&link).unwrap(), b"outside");
}

/// `owner_map`: every inode shows the map's ids, new inodes are stored
/// with the map's stored ids, and chown to another owner is `EPERM`.
#[test]
fn owner_map_shows_one_owner_and_stores_another() {
    use std::os::unix::fs::MetadataExt;
    let map = agentcomputer_fuse::OwnerMap {
        uid: 4321,
        gid: 4322,
        stored_uid: 1000,
        stored_gid: 1001,
    };
    let Some(m) = common::mount_with(MountOptions {
        owner_map: Some(map),
        ..MountOptions::default()
    }) else {
        return;
    };
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/f"), b"x").unwrap();
    std::os::unix::fs::symlink("f", m.path("d/l")).unwrap();
    for p in [m.mnt.clone(), m.path("d"), m.path("d/f")] {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!((md.uid(), md.gid()), (4321, 4322), "{}", p.display());
    }
    let md = std::fs::symlink_metadata(m.path("d/l")).unwrap();
    assert_eq!((md.uid(), md.gid()), (4321, 4322));
    for name in ["f", "l"] {
        let ino = std::fs::symlink_metadata(m.path(&format!("d/{name}")))
            .unwrap()
            .ino();
        let stored = m.fs.getattr(ino).unwrap();
        assert_eq!((stored.uid, stored.gid), (1000, 1001), "{name}");
    }
    let f = m.path("d/f");
    assert_eq!(
        nix::unistd::chown(&f, Some(nix::unistd::Uid::from_raw(0)), None),
        Err(nix::errno::Errno::EPERM)
    );
    nix::unistd::chown(
        &f,
        Some(nix::unistd::Uid::from_raw(4321)),
        Some(nix::unistd::Gid::from_raw(4322)),
    )
    .unwrap();
    let ino = std::fs::metadata(&f).unwrap().ino();
    assert_eq!(m.fs.getattr(ino).unwrap().uid, 1000);
}
