//! Owner and mode of new inodes.
//!
//! With `default_permissions` the kernel checks access, sticky directories
//! (`may_delete`) and set-group-ID clearing on chmod, but creating an inode
//! is the filesystem's job: Linux `inode_init_owner` (fs/inode.c) gives a
//! new inode in a set-group-ID directory that directory's group, and a new
//! subdirectory keeps the set-group-ID bit.

use agentcomputer_fs::{Attr, Owner};

/// The owner and permission bits for a new inode created in `parent` by
/// the caller `uid`/`gid` with requested bits `perm` (already masked by the
/// kernel with the caller's umask).
pub(crate) fn new_inode_owner(
    parent: &Attr,
    uid: u32,
    gid: u32,
    perm: u32,
    is_dir: bool,
) -> (Owner, u32) {
    let mut perm = perm & 0o7777;
    let mut gid = gid;
    if parent.perm & libc::S_ISGID != 0 {
        gid = parent.gid;
        if is_dir {
            perm |= libc::S_ISGID;
        }
    }
    (Owner { uid, gid }, perm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{FileKind, Timespec};

    fn dir(perm: u32, gid: u32) -> Attr {
        Attr {
            ino: 2,
            kind: FileKind::Directory,
            perm,
            nlink: 2,
            uid: 0,
            gid,
            size: 0,
            blocks: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            rdev: 0,
        }
    }

    #[test]
    fn plain_directory_uses_the_callers_ids() {
        let (o, p) = new_inode_owner(&dir(0o755, 50), 1000, 100, 0o644, false);
        assert_eq!((o.uid, o.gid, p), (1000, 100, 0o644));
    }

    #[test]
    fn setgid_directory_passes_on_its_group_and_the_bit_to_subdirectories() {
        let parent = dir(0o2775, 50);
        let (o, p) = new_inode_owner(&parent, 1000, 100, 0o644, false);
        assert_eq!((o.gid, p), (50, 0o644));
        let (o, p) = new_inode_owner(&parent, 1000, 100, 0o755, true);
        assert_eq!((o.gid, p), (50, 0o2755));
    }
}
