//! Conversions between the engine's types and fuser's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentcomputer_fs::{Attr, Error, FileKind, Timespec};
use fuser::{FileAttr, FileType, INodeNo};

/// The fuser errno for an engine error (storage failures are `EIO`).
pub(crate) fn errno(e: &Error) -> fuser::Errno {
    fuser::Errno::from_i32(e.errno() as i32)
}

pub(crate) fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::RegularFile => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::NamedPipe => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// A stored time as `SystemTime`; times before the epoch are kept.
pub(crate) fn system_time(t: Timespec) -> SystemTime {
    let whole = Duration::from_secs(t.sec.unsigned_abs());
    let base = if t.sec >= 0 {
        UNIX_EPOCH.checked_add(whole)
    } else {
        UNIX_EPOCH.checked_sub(whole)
    };
    base.and_then(|b| b.checked_add(Duration::from_nanos(u64::from(t.nsec))))
        .unwrap_or(UNIX_EPOCH)
}

/// Inverse of [`system_time`].
pub(crate) fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let ns = i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX);
            Timespec::from_nanos(-ns)
        }
    }
}

/// The kernel's view of inode attributes. `blksize` is the preferred I/O
/// size reported in `st_blksize` (the engine's chunk size).
pub(crate) fn file_attr(a: &Attr, blksize: u32) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: UNIX_EPOCH,
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize,
        flags: 0,
    }
}

/// The attributes of a negative lookup reply: node id 0 tells the kernel
/// to cache the name's absence for the entry timeout (fuse_lowlevel.h,
/// `fuse_reply_entry`).
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_including_before_the_epoch() {
        for ns in [
            0i64,
            1,
            999_999_999,
            1_700_000_000_123_456_789,
            -1,
            -1_500_000_000,
        ] {
            let t = Timespec::from_nanos(ns);
            assert_eq!(timespec(system_time(t)), t, "{ns}");
        }
    }
}
