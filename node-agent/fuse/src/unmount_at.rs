//! Unmounting a host mount through a descriptor of its root, never by
//! following a path: the path a mount was made at can be changed under it
//! (a directory of it renamed, a symbolic link planted), and `umount2(2)`
//! on that path would then remove whatever mount the path leads to now.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags, statx};

/// The error (inside the `io::Error` of [`crate::MountHandle::try_unmount`],
/// reachable with `get_ref()` and `downcast_ref`) when the mountpoint no
/// longer leads to the mount: nothing was unmounted and the handle still
/// holds the mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotThisMount {
    /// The path the mount was made at.
    pub mountpoint: PathBuf,
    /// `ELOOP` when a component of the path is a symbolic link; `EBUSY`
    /// when the path leads elsewhere (a directory of it was moved or
    /// replaced, or another mount covers it) or nowhere.
    pub errno: i32,
}

impl fmt::Display for NotThisMount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.errno == libc::ELOOP {
            write!(
                f,
                "{}: a component of the path is a symbolic link; nothing was unmounted",
                self.mountpoint.display()
            )
        } else {
            write!(
                f,
                "{}: the path no longer leads to this mount; nothing was unmounted",
                self.mountpoint.display()
            )
        }
    }
}

impl std::error::Error for NotThisMount {}

fn refused(mountpoint: &Path, errno: i32) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        NotThisMount {
            mountpoint: mountpoint.to_path_buf(),
            errno,
        },
    )
}

/// Checks that `mountpoint`, resolved without following any symbolic link
/// (openat2(2) `RESOLVE_NO_SYMLINKS`, `O_PATH`), is the root of the very
/// mount `root` is a descriptor of (same mount id, device and inode).
///
/// Errors: [`NotThisMount`] with `ELOOP` or `EBUSY`; `statx(2)` errors.
pub(crate) fn check_leads_to(root: BorrowedFd<'_>, mountpoint: &Path) -> io::Result<()> {
    let here = match open_no_follow(mountpoint) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ELOOP) => return Err(refused(mountpoint, libc::ELOOP)),
        Err(_) => return Err(refused(mountpoint, libc::EBUSY)),
    };
    if identity(here.as_fd())? != identity(root)? {
        return Err(refused(mountpoint, libc::EBUSY));
    }
    Ok(())
}

/// Opens the directory `path` as `O_PATH` (nothing is read, a dead FUSE
/// mount's root opens too), following no symbolic link in any component
/// (openat2(2) `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: `ELOOP`).
pub(crate) fn open_no_follow(path: &Path) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how)
}

/// The mount id (as in field 1 of `/proc/self/mountinfo`) of the mount
/// `fd` is on. Errors: `statx(2)`; a kernel before 5.8 (no mount id).
pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(identity(fd)?.0)
}

/// (mount id, device major, device minor, inode) of what `fd` refers to.
fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u32, u32, u64)> {
    let st = statx(
        fd,
        "",
        // Cached attributes: a FUSE mount whose server is dead, or not
        // serving yet, is never asked.
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::INO | StatxFlags::MNT_ID,
    )?;
    if st.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
        return Err(io::Error::other(
            "the kernel reports no mount id (statx STATX_MNT_ID needs Linux 5.8)",
        ));
    }
    Ok((
        st.stx_mnt_id,
        st.stx_dev_major,
        st.stx_dev_minor,
        st.stx_ino,
    ))
}

/// Detaches (`MNT_DETACH`) the mount whose root `root` is a descriptor of,
/// wherever it is now: `umount2(2)` of `/proc/self/fd/N`, a magic link
/// that leads to exactly that mount and no other. A mount already
/// detached (by someone else) is not an error. Processes holding files in
/// the mount keep them; the mount ends when the last one, and `root`, are
/// closed. Errors: the errno of `umount2(2)`.
pub fn detach(root: &OwnedFd) -> io::Result<()> {
    let own = format!("/proc/self/fd/{}", root.as_raw_fd());
    match nix::mount::umount2(own.as_str(), nix::mount::MntFlags::MNT_DETACH) {
        // No longer in this namespace's tree: detached already.
        Ok(()) | Err(nix::errno::Errno::EINVAL) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The device (`st_dev`, as `makedev(major, minor)`) of the filesystem
/// `root` is on: for a FUSE mount, its connection's, unique while the
/// connection lives (a connection ends with its superblock). Errors:
/// `statx(2)`.
pub(crate) fn device(root: BorrowedFd<'_>) -> io::Result<u64> {
    let (_, major, minor, _) = identity(root)?;
    Ok(rustix::fs::makedev(major, minor))
}

/// Finds the root of the mount of device `dev` (see
/// [`crate::MountHandle::device`]) and opens it (`O_PATH`) without
/// following any link: first at `mountpoint`, else wherever
/// `/proc/self/mountinfo` shows a mount of that device now (a directory
/// of its path may have been renamed). `dev` `None` (not known) accepts
/// only a mount root at `mountpoint`. `Ok(None)` when none is found.
/// Errors: reading mountinfo.
pub fn find_mount_root(mountpoint: &Path, dev: Option<u64>) -> io::Result<Option<OwnedFd>> {
    let is_root_of = |fd: &OwnedFd| -> bool {
        let Ok(st) = statx(
            fd,
            "",
            // Cached attributes: a FUSE mount whose server is dead, or not
            // serving yet, is never asked.
            AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
            StatxFlags::INO | StatxFlags::MNT_ID,
        ) else {
            return false;
        };
        let mount_root = st
            .stx_attributes_mask
            .contains(rustix::fs::StatxAttributes::MOUNT_ROOT)
            && st
                .stx_attributes
                .contains(rustix::fs::StatxAttributes::MOUNT_ROOT);
        let same = dev.is_none_or(|d| rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor) == d);
        mount_root && same
    };
    if let Ok(fd) = open_no_follow(mountpoint)
        && is_root_of(&fd)
    {
        return Ok(Some(fd));
    }
    let Some(dev) = dev else {
        return Ok(None);
    };
    let wanted = format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    let info = std::fs::read("/proc/self/mountinfo")?;
    for line in info.split(|&b| b == b'\n').rev() {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if fields.get(2).copied() != Some(wanted.as_bytes()) {
            continue;
        }
        let Some(entry) = crate::stale::parse_mountinfo_line(line) else {
            continue;
        };
        if let Ok(fd) = open_no_follow(&entry.mountpoint)
            && is_root_of(&fd)
        {
            return Ok(Some(fd));
        }
    }
    Ok(None)
}
