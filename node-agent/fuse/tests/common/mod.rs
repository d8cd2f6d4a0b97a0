//! Shared setup: a real engine database and a real FUSE mount in a temp dir.
#![allow(dead_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{MountHandle, MountOptions, mount};

pub(crate) struct TestMount {
    pub fs: Fs,
    pub mnt: PathBuf,
    handle: Option<MountHandle>,
    // Last: removed after the unmount.
    pub dir: tempfile::TempDir,
}

impl TestMount {
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts now; the engine, database and directories stay until drop.
    pub(crate) fn unmount(&mut self) {
        self.handle.take().unwrap().unmount().unwrap();
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        drop(self.handle.take());
    }
}

/// Whether FUSE can be used here; prints why not when it can't.
pub(crate) fn fuse_available() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent, FUSE tests cannot run on this machine");
        return false;
    }
    if !is_root() && !Path::new("/usr/bin/fusermount3").exists() {
        eprintln!("SKIPPED: not root and no fusermount3 (Debian package fuse3): cannot mount");
        return false;
    }
    true
}

/// Whether this process runs as root (needed to act as another user).
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh engine mounted with `opts`, or `None` (skip) without /dev/fuse.
pub(crate) fn mount_with(opts: MountOptions) -> Option<TestMount> {
    if !fuse_available() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    // Other users (the EACCES tests run as nobody) must reach the mountpoint.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let handle = mount(fs.clone(), &mnt, opts).unwrap();
    Some(TestMount {
        fs,
        mnt,
        handle: Some(handle),
        dir,
    })
}

/// A fresh engine mounted with the default options.
pub(crate) fn mount_new() -> Option<TestMount> {
    mount_with(MountOptions::default())
}

/// The errno of the last failed libc call.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A path as a C string.
pub(crate) fn cpath(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Runs `sh -c script` as user and group `nobody` (65534, no
/// supplementary groups: std drops them with the uid) with `$1`.. set to
/// `args`; returns (exit code, stderr).
pub(crate) fn sh_as_nobody(script: &str, args: &[&Path]) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Opens /dev/fuse and mounts `target` on it, as the mounter does.
pub(crate) fn mount_fd(target: &Path) -> OwnedFd {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let fd = OwnedFd::from(dev);
    let data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions",
        fd.as_raw_fd()
    );
    nix::mount::mount(
        Some("agentcomputer:test"),
        target,
        Some("fuse.agentcomputer"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .unwrap();
    fd
}
