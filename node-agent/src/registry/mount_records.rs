//! Host FUSE mounts of computers (local mode): opening and checking a
//! mount directory without following links ([`MountDir`]),
//! and the record of mounts that lets the next start find those of an
//! agent that was killed.
//!
//! The record is `<data-dir>/mounts.json`, a JSON array of
//! `{"computer": NAME, "path": ABSOLUTE_DIR}`, rewritten atomically after
//! every mount and unmount, and before every `mount(2)` with the new
//! target in it: a process killed between `mount(2)` and recording the
//! mount (or handing its connection to the descriptor holder) leaves the
//! target in the record, so the next start finds the dead mount there like
//! any other (no connection held, nobody serves it: `ENOTCONN`), instead
//! of an unrecorded one that only `umount -l` would remove. A target whose
//! `mount(2)` never happened is simply not a mount and is forgotten. A
//! killed agent's mounts stay in the kernel with
//! no server: every access fails with `ENOTCONN`. They are left there on
//! purpose ([`recheck_recorded`] keeps their records): removing one would
//! turn its path back into the plain directory underneath, and a process
//! still writing through the mount would then write there, outside the
//! computer, without an error. Mounting a computer at such a path again, or
//! unmounting it through the agent, replaces or removes the dead mount.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::warn;

/// File name of the mount record inside the data directory.
pub const RECORD_FILE: &str = crate::layout::MOUNTS_FILE;

/// One recorded mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountRecord {
    /// The mounted computer.
    pub computer: String,
    /// The absolute host directory it is mounted at.
    pub path: PathBuf,
}

/// A directory about to take a new mount, opened once without following
/// any symbolic link: every check is made on this descriptor and the mount
/// is attached to it ([`agentcomputer_fuse::mount_connection_at`]), so no
/// link planted in the path (by another user owning one of its
/// directories, say) can send the checks or the mount elsewhere.
#[derive(Debug)]
pub struct MountDir {
    fd: OwnedFd,
}

impl MountDir {
    /// Opens `path`, which must be absolute (else `EINVAL`), name an
    /// existing directory (`ENOENT`, `ENOTDIR`) through no symbolic link
    /// in any component (`ELOOP`; openat2(2) with `RESOLVE_NO_SYMLINKS`),
    /// and not be a mountpoint already (`EBUSY`; a mountpoint is on
    /// another device than its parent, or is `/`). Errors carry the errno
    /// as their raw OS error. Ownership and emptiness are checked by
    /// [`MountDir::owner`] and [`MountDir::is_empty`].
    pub fn open(path: &Path) -> io::Result<MountDir> {
        use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
        if !path.is_absolute() {
            return Err(io::Error::from_raw_os_error(libc_errno::EINVAL));
        }
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how)?;
        if path.parent().is_none() {
            return Err(io::Error::from_raw_os_error(libc_errno::EBUSY));
        }
        let me = nix::sys::stat::fstat(&fd)?;
        let parent = nix::sys::stat::fstatat(&fd, "..", nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
        if parent.st_dev != me.st_dev {
            return Err(io::Error::from_raw_os_error(libc_errno::EBUSY));
        }
        Ok(MountDir { fd })
    }

    /// The uid owning the directory.
    pub fn owner(&self) -> io::Result<u32> {
        Ok(nix::sys::stat::fstat(&self.fd)?.st_uid)
    }

    /// Whether the directory has no entries (a mount over it would hide
    /// them). Errors: reading the directory.
    pub fn is_empty(&self) -> io::Result<bool> {
        let dup = self.fd.try_clone()?;
        // The duplicate shares the file offset: start at the beginning.
        nix::unistd::lseek(&dup, 0, nix::unistd::Whence::SeekSet)?;
        let mut dir = nix::dir::Dir::from_fd(dup)?;
        let mut empty = true;
        for entry in dir.iter() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                empty = false;
                break;
            }
        }
        Ok(empty)
    }

    /// The opened directory, for the mount to attach to.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Errno values as `i32` for `io::Error::from_raw_os_error`.
mod libc_errno {
    use nix::errno::Errno;
    pub const EINVAL: i32 = Errno::EINVAL as i32;
    pub const EBUSY: i32 = Errno::EBUSY as i32;
}

/// Writes the record of live mounts atomically (temporary file, fsync,
/// rename), so a crash leaves the old or the new list.
/// The file is private to the agent's user (`0600`).
pub fn save_records(data_dir: &Path, records: &[MountRecord]) -> io::Result<()> {
    let tmp = data_dir.join(format!(".{RECORD_FILE}.tmp"));
    let mut text = serde_json::to_vec_pretty(records).map_err(io::Error::other)?;
    text.push(b'\n');
    {
        use std::io::Write;
        let mut f = crate::private::create_file(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, data_dir.join(RECORD_FILE))
}

/// Reads the record; a missing file is an empty list. Errors: I/O, or
/// `InvalidData` for a file that is not a valid record.
pub fn load_records(data_dir: &Path) -> io::Result<Vec<MountRecord>> {
    match std::fs::read(data_dir.join(RECORD_FILE)) {
        Ok(text) => {
            serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Checks the mounts recorded by a previous run at start: those whose
/// mount is dead (the run was killed; every access fails with `ENOTCONN`)
/// are logged and kept, in the record and in the returned list, so that
/// their paths never silently become writable directories again; the rest
/// (unmounted since, or mounted by someone else) are forgotten. An
/// unreadable record is logged and replaced. Errors: rewriting the record.
/// Paths in `held` (live connections the descriptor holder keeps, about
/// to be resumed) are neither probed nor kept here.
pub fn recheck_recorded(data_dir: &Path, held: &[PathBuf]) -> io::Result<Vec<MountRecord>> {
    let records = load_records(data_dir).unwrap_or_else(|e| {
        warn!(error = %e, "unreadable mount record; mounts of a previous run are not checked");
        Vec::new()
    });
    let mut dead = Vec::new();
    for r in records {
        if held.contains(&r.path) {
            continue;
        }
        match agentcomputer_fuse::is_dead_mount(&r.path) {
            Ok(true) => {
                warn!(
                    computer = %r.computer,
                    path = %r.path.display(),
                    "a previous run was killed while this computer was mounted: the dead mount is left in place (its files fail with ENOTCONN, nothing lands in the directory underneath); mount the computer there again to replace it, or unmount it"
                );
                dead.push(r);
            }
            Ok(false) => {}
            Err(e) => warn!(path = %r.path.display(), error = %e, "cannot check a recorded mount"),
        }
    }
    if !dead.is_empty() || data_dir.join(RECORD_FILE).exists() {
        save_records(data_dir, &dead)?;
    }
    Ok(dead)
}

/// Removes the dead mount at `path` left by a killed run (and dead mounts
/// below it), lazily. Live mounts are left alone. Returns whether one was
/// removed. Errors: reading mountinfo, or the unmount.
pub fn remove_dead(path: &Path) -> io::Result<bool> {
    if !agentcomputer_fuse::is_dead_mount(path)? {
        return Ok(false);
    }
    Ok(!agentcomputer_fuse::cleanup_stale_mounts(path)?.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_dir_checks() {
        let dir = tempfile::tempdir().unwrap();
        let errno = |p: &Path| MountDir::open(p).unwrap_err().raw_os_error();
        assert_eq!(errno(Path::new("rel/dir")), Some(libc_errno::EINVAL));
        assert_eq!(
            errno(&dir.path().join("missing")),
            Some(nix::errno::Errno::ENOENT as i32)
        );
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(errno(&file), Some(nix::errno::Errno::ENOTDIR as i32));
        assert_eq!(errno(Path::new("/")), Some(libc_errno::EBUSY));
        assert_eq!(errno(Path::new("/proc")), Some(libc_errno::EBUSY));
        // A link anywhere in the path, to a fine directory, is refused.
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let eloop = Some(nix::errno::Errno::ELOOP as i32);
        assert_eq!(errno(&dir.path().join("link")), eloop);
        assert_eq!(errno(&dir.path().join("link/sub")), eloop);
        MountDir::open(&real.join("sub")).unwrap();
        let opened = MountDir::open(dir.path()).unwrap();
        assert_eq!(opened.owner().unwrap(), nix::unistd::geteuid().as_raw());
    }

    #[test]
    fn emptiness() {
        let dir = tempfile::tempdir().unwrap();
        let opened = MountDir::open(dir.path()).unwrap();
        assert!(opened.is_empty().unwrap());
        std::fs::write(dir.path().join(".hidden"), b"").unwrap();
        assert!(!opened.is_empty().unwrap());
        // Asked again, the answer is read again from the start.
        assert!(!opened.is_empty().unwrap());
    }

    #[test]
    fn records_round_trip_and_recheck_forgets_what_is_not_dead() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_records(dir.path()).unwrap().is_empty());
        let live = tempfile::tempdir().unwrap();
        let recs = vec![MountRecord {
            computer: "demo".into(),
            path: live.path().to_path_buf(),
        }];
        save_records(dir.path(), &recs).unwrap();
        assert_eq!(load_records(dir.path()).unwrap(), recs);
        // A recorded directory that is not a mount is left as it is.
        assert!(recheck_recorded(dir.path(), &[]).unwrap().is_empty());
        assert!(!remove_dead(live.path()).unwrap());
        assert!(live.path().is_dir());
        assert!(load_records(dir.path()).unwrap().is_empty());
    }
}
