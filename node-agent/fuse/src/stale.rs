//! Finding and removing mounts whose server died.
//!
//! When the process serving a FUSE mount is killed, the kernel ends the
//! connection but the mount stays; every access then fails with
//! `ENOTCONN` ("Transport endpoint is not connected") until it is
//! unmounted. A lazy unmount (`MNT_DETACH`) removes it even while
//! processes still hold files in it.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::unmount_at::{detach, mount_id, open_no_follow};

/// Lazily unmounts every dead FUSE mount at or below `under` (a mount of
/// type `fuse` or `fuse.*` whose `statfs` fails with `ENOTCONN`) and returns
/// the mountpoints it removed. Live mounts are left alone, whoever serves
/// them. (Mounted by root through `mount(2)` the type is plain `fuse`; the
/// source field names [`crate::MountOptions::fsname`].)
///
/// Reads `/proc/self/mountinfo` (proc(5)); each mountpoint is opened
/// without following links and must lead to that line's mount (else it is
/// skipped). As root it calls `umount2(MNT_DETACH)` through the opened
/// descriptor; otherwise `fusermount3 -u -z`.
///
/// Errors: reading mountinfo, or an unmount that failed.
pub fn cleanup_stale_mounts(under: &Path) -> io::Result<Vec<PathBuf>> {
    let info = std::fs::read("/proc/self/mountinfo")?;
    let mut removed = Vec::new();
    // Later lines are mounted on top of earlier ones: undo from the top.
    for line in info.split(|&b| b == b'\n').rev() {
        let Some(entry) = parse_mountinfo_line(line) else {
            continue;
        };
        if !entry.is_fuse() || !entry.mountpoint.starts_with(under) {
            continue;
        }
        // The path is opened without following links and must lead to
        // the very mount of this line (its root, by mount id): a path
        // changed since (a link planted, a directory moved, another mount
        // on top) is left alone rather than followed elsewhere.
        let Some(root) = open_mount_root(&entry) else {
            continue;
        };
        // statfs always asks the server; stat may be answered from the
        // kernel's attribute cache even after the connection died.
        if let Err(nix::errno::Errno::ENOTCONN) = nix::sys::statfs::fstatfs(&root) {
            detach_dead(&root, &entry.mountpoint)?;
            removed.push(entry.mountpoint);
        }
    }
    Ok(removed)
}

/// Whether `mountpoint` is itself the mountpoint of a dead FUSE mount: the
/// path, opened without following any symbolic link, leads to the root of
/// a mount of type `fuse` or `fuse.*` mounted there, and its `statfs`
/// fails with `ENOTCONN` or `ECONNABORTED` (an aborted connection), or
/// gets no answer within [`PROBE_WAIT`]: a connection that some process
/// keeps open but nobody serves (a descriptor holder's, after the agent
/// that would resume it was started without it) would otherwise make the
/// caller wait for its end. Errors: reading mountinfo; `ELOOP` for a
/// path with a symbolic link in it.
pub fn is_dead_mount(mountpoint: &Path) -> io::Result<bool> {
    let root = match open_no_follow(mountpoint) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ELOOP) => return Err(nix::errno::Errno::ELOOP.into()),
        Err(_) => return Ok(false),
    };
    let id = mount_id(root.as_fd())?;
    let info = std::fs::read("/proc/self/mountinfo")?;
    let entry = info
        .split(|&b| b == b'\n')
        .filter_map(parse_mountinfo_line)
        .find(|e| e.id == id);
    let Some(entry) = entry else {
        return Ok(false);
    };
    Ok(entry.mountpoint == mountpoint && entry.is_fuse() && !answers(root))
}

/// How long [`is_dead_mount`] waits for a FUSE server to answer `statfs`.
pub(crate) const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the server of the FUSE mount whose root is `root` answers
/// `statfs` within [`PROBE_WAIT`] (any answer but
/// `ENOTCONN`/`ECONNABORTED`). The probe runs on a thread of its own, left
/// behind while a call waits.
fn answers(root: OwnedFd) -> bool {
    use nix::errno::Errno;
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("fuse-probe".into())
        .spawn(move || {
            let _ = tx.send(nix::sys::statfs::fstatfs(&root).err());
        });
    if spawned.is_err() {
        return true;
    }
    match rx.recv_timeout(PROBE_WAIT) {
        Ok(Some(Errno::ENOTCONN | Errno::ECONNABORTED)) => false,
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The root of the mount of `entry`, opened at its mountpoint without
/// following links; `None` when the path does not lead to that mount now.
fn open_mount_root(entry: &MountEntry) -> Option<OwnedFd> {
    let fd = open_no_follow(&entry.mountpoint).ok()?;
    (mount_id(fd.as_fd()).ok()? == entry.id).then_some(fd)
}

/// Detaches the dead mount whose root is `root` (through the descriptor,
/// see [`crate::unmount_at`]); an unprivileged user has `fusermount3 -u
/// -z` do it at `mountpoint` (fusermount3 refuses to follow a link there).
fn detach_dead(root: &OwnedFd, mountpoint: &Path) -> io::Result<()> {
    if nix::unistd::geteuid().is_root() {
        detach(root)
    } else {
        lazy_unmount(mountpoint)
    }
}

/// Detaches the mount at `mountpoint` (`umount2(MNT_DETACH)`, or
/// `fusermount3 -u -z` for an unprivileged user).
pub(crate) fn lazy_unmount(mountpoint: &Path) -> io::Result<()> {
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let out = Command::new("fusermount3")
                .args(["-u", "-z", "--"])
                .arg(mountpoint)
                .output()?;
            if out.status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "fusermount3 -u -z {}: {}",
                    mountpoint.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// One line of `/proc/self/mountinfo` (proc(5)).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// The mount id (field 1).
    id: u64,
    /// The mountpoint (field 5).
    pub(crate) mountpoint: PathBuf,
    /// The filesystem type (first field after `-`).
    fstype: Vec<u8>,
}

impl MountEntry {
    fn is_fuse(&self) -> bool {
        self.fstype == b"fuse" || self.fstype.starts_with(b"fuse.")
    }
}

/// The mount id, mountpoint and filesystem type of one mountinfo line.
pub(crate) fn parse_mountinfo_line(line: &[u8]) -> Option<MountEntry> {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let id = std::str::from_utf8(fields.first()?).ok()?.parse().ok()?;
    let mountpoint = fields.get(4)?;
    let dash = fields.iter().position(|f| *f == b"-")?;
    let fstype = fields.get(dash + 1)?;
    Some(MountEntry {
        id,
        mountpoint: PathBuf::from(OsString::from_vec(unescape(mountpoint))),
        fstype: unescape(fstype),
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\'
            && i + 3 < s.len()
            && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (s[i + 1] - b'0') * 64 + (s[i + 2] - b'0') * 8 + (s[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines_with_escapes() {
        let line = b"36 35 0:45 / /tmp/a\\040b rw,nosuid,nodev - fuse.agentcomputer agentcomputer rw,user_id=0";
        let e = parse_mountinfo_line(line).unwrap();
        assert_eq!(e.id, 36);
        assert_eq!(e.mountpoint, PathBuf::from("/tmp/a b"));
        assert!(e.is_fuse());
        let with_optional =
            b"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        let e = parse_mountinfo_line(with_optional).unwrap();
        assert_eq!(
            (e.mountpoint, e.fstype),
            (PathBuf::from("/mnt2"), b"ext3".to_vec())
        );
        assert!(parse_mountinfo_line(b"").is_none());
    }

    #[test]
    fn unescape_leaves_plain_backslashes() {
        assert_eq!(unescape(b"a\\134b\\x"), b"a\\b\\x");
        assert_eq!(unescape(b"tab\\011"), b"tab\t");
    }
}
