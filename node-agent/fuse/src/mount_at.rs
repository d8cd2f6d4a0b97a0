//! Mounting over a directory the caller already opened, with the kernel's
//! file-descriptor mount API (fsopen(2), fsconfig(2), fsmount(2),
//! move_mount(2); Linux 5.2+, `nosymfollow` 5.10+): no path is resolved
//! between the caller's checks of the directory and the mount, so a link
//! or a rename planted in between cannot move the mount elsewhere.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, fsconfig_create, fsconfig_set_flag,
    fsconfig_set_string, fsmount, fsopen, move_mount,
};

use crate::mount::{MountHandle, NosymfollowRefused};
use crate::options::{MountOptions, SUBTYPE};

/// Mounts `fs` over the directory `dir` (a descriptor, `O_PATH` or opened
/// for reading) as [`crate::mount_connection`] does over a path: a
/// connection this process opened, served with
/// [`crate::serve_connection`]; returns the handle (its mountpoint is
/// `shown`, the path the caller resolved `dir` from; it unmounts through
/// the mount's own descriptor, see [`MountHandle::try_unmount`]) and
/// a duplicate of the connection's descriptor for a holder to keep.
///
/// The mount is `fuse.agentcomputer` with source [`MountOptions::fsname`],
/// `default_permissions`, `allow_other` per [`MountOptions::allow_other`]
/// (default: on), `nosuid,nodev`, and `nosymfollow` per the options, all
/// set before the mount is attached, so it is never visible without them.
///
/// Errors: `EPERM` when not root; the errno of the mount API call that
/// failed; when the kernel refuses `nosymfollow` (`EINVAL` before Linux
/// 5.10) an error whose inner error is [`NosymfollowRefused`]. Nothing is
/// mounted on error.
pub fn mount_connection_at(
    fs: agentcomputer_fs::Fs,
    dir: BorrowedFd<'_>,
    shown: &Path,
    opts: MountOptions,
) -> io::Result<(MountHandle, OwnedFd)> {
    let dev = OwnedFd::from(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?,
    );
    let config = fsopen("fuse", FsOpenFlags::FSOPEN_CLOEXEC)?;
    let set = |key: &str, value: &str| fsconfig_set_string(&config, key, value);
    set("source", &opts.fsname)?;
    set("subtype", SUBTYPE)?;
    set("fd", &dev.as_raw_fd().to_string())?;
    set("rootmode", "40000")?;
    set("user_id", &nix::unistd::geteuid().to_string())?;
    set("group_id", &nix::unistd::getegid().to_string())?;
    fsconfig_set_flag(&config, "default_permissions")?;
    if opts.allow_other.unwrap_or(true) {
        fsconfig_set_flag(&config, "allow_other")?;
    }
    fsconfig_create(&config)?;
    let mut attrs = MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV;
    if opts.nosymfollow {
        attrs |= MountAttrFlags::MOUNT_ATTR_NOSYMFOLLOW;
    }
    let mnt = match fsmount(&config, FsMountFlags::FSMOUNT_CLOEXEC, attrs) {
        Ok(mnt) => mnt,
        Err(e) if opts.nosymfollow && e == rustix::io::Errno::INVAL => {
            // The same call without the flag tells whether it was the one
            // refused (a kernel before 5.10).
            let plain = MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV;
            if fsmount(&config, FsMountFlags::FSMOUNT_CLOEXEC, plain).is_ok() {
                let refused = NosymfollowRefused {
                    mountpoint: shown.to_path_buf(),
                    errno: libc::EINVAL,
                };
                return Err(io::Error::new(io::ErrorKind::InvalidInput, refused));
            }
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    move_mount(
        &mnt,
        "",
        dir,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?;
    // Undone through the mount's own descriptor (the magic link leads to
    // exactly this mount's root), never through a path.
    let undo = |e: io::Error| {
        let own = format!("/proc/self/fd/{}", mnt.as_raw_fd());
        let _ = nix::mount::umount2(own.as_str(), nix::mount::MntFlags::MNT_DETACH);
        e
    };
    let kept = dev.try_clone().map_err(undo)?;
    let conn = crate::serve_connection(fs, dev, opts).map_err(undo)?;
    // The fsmount(2) descriptor stays the handle's way to this mount's
    // root: it is unmounted through it, never through `shown`.
    Ok((
        MountHandle::resumed(shown.to_path_buf(), conn).with_root(mnt),
        kept,
    ))
}
