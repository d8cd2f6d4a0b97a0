//! Engine values to API messages, and path lookups shared by the handlers.

use agentcomputer_fs::{Attr, FileKind, Fs, Ino};
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tonic::Status;

use crate::errors::{errno_status, on};
use crate::paths::ApiPath;

/// Owner of inodes created through the API: the same identity scripts run
/// as in the shell runtime, so files are alike whichever way they were made.
pub const OWNER: agentcomputer_fs::Owner = agentcomputer_shell::SHELL_OWNER;

/// The API's name for an inode kind.
pub fn kind(kind: FileKind) -> pb::FileKind {
    match kind {
        FileKind::RegularFile => pb::FileKind::Regular,
        FileKind::Directory => pb::FileKind::Directory,
        FileKind::Symlink => pb::FileKind::Symlink,
        FileKind::NamedPipe => pb::FileKind::Fifo,
        FileKind::CharDevice => pb::FileKind::CharDevice,
        FileKind::BlockDevice => pb::FileKind::BlockDevice,
        FileKind::Socket => pb::FileKind::Socket,
    }
}

/// `attr` as a `FileInfo`; for a symlink the target is read too (a failure
/// to read it leaves the target empty rather than failing the listing).
pub fn file_info(fs: &Fs, attr: &Attr) -> pb::FileInfo {
    let symlink_target = if attr.kind == FileKind::Symlink {
        fs.readlink(attr.ino)
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default()
    } else {
        String::new()
    };
    pb::FileInfo {
        ino: attr.ino,
        kind: kind(attr.kind) as i32,
        perm: attr.perm,
        mode: attr.mode(),
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        size: attr.size,
        blocks: attr.blocks,
        atime_unix_nanos: attr.atime.as_nanos(),
        mtime_unix_nanos: attr.mtime.as_nanos(),
        ctime_unix_nanos: attr.ctime.as_nanos(),
        symlink_target,
    }
}

/// Resolves `path`, following a final symlink when `follow` is set or the
/// path ends in `/` (which must then name a directory: `ENOTDIR`).
pub fn resolve(fs: &Fs, path: &ApiPath, follow: bool) -> Result<Attr, Status> {
    let attr = fs
        .resolve(
            agentcomputer_fs::ROOT_INO,
            &path.engine_path(),
            follow || path.dir_only(),
        )
        .map_err(on(path.shown()))?;
    if path.dir_only() && attr.kind != FileKind::Directory {
        return Err(errno_status(Errno::ENOTDIR, path.shown()));
    }
    Ok(attr)
}

/// `ENOTDIR` when `path` ends in `/` but the entry it names (`kind`, not
/// following a final symlink) is not a directory: what unlink, rmdir and
/// rename give for `file/` on Linux.
pub fn check_dir_only(path: &ApiPath, kind: FileKind) -> Result<(), Status> {
    if path.dir_only() && kind != FileKind::Directory {
        return Err(errno_status(Errno::ENOTDIR, path.shown()));
    }
    Ok(())
}

/// The directory holding `path`'s last component, and that component.
/// Errors: `EBUSY` for the root (it has no parent entry), `ENOTDIR` when the
/// parent is not a directory, and the parent's resolution errors.
pub fn parent_of<'p>(fs: &Fs, path: &'p ApiPath) -> Result<(Ino, &'p str), Status> {
    let Some((parent, name)) = path.split_last() else {
        return Err(errno_status(Errno::EBUSY, path.shown()));
    };
    let dir = resolve(fs, &parent, true)?;
    if dir.kind != FileKind::Directory {
        return Err(errno_status(Errno::ENOTDIR, path.shown()));
    }
    Ok((dir.ino, name))
}
