//! Metadata calls: stat, mkdir, readdir, remove, rename, symlink, readlink,
//! chmod, statfs. Each is a short synchronous function over the engine; the
//! service runs them on the blocking pool.

use agentcomputer_fs::{FileKind, Fs, Ino, RenameFlags, SetAttr};
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tonic::Status;

use super::convert::{OWNER, check_dir_only, file_info, kind, parent_of, resolve};
use crate::errors::{errno_detail, errno_status, on};
use crate::paths::ApiPath;

/// Default permission bits of a new directory.
const DIR_PERM: u32 = 0o755;
/// Default and largest ReadDir page.
const PAGE_DEFAULT: usize = 1000;
const PAGE_MAX: usize = 10_000;
/// Entries fetched per engine call while removing a tree.
const REMOVE_BATCH: usize = 256;

pub fn stat(fs: &Fs, req: &pb::StatRequest) -> Result<pb::FileInfo, Status> {
    let path = ApiPath::parse(&req.path)?;
    let attr = resolve(fs, &path, req.follow_symlinks)?;
    Ok(file_info(fs, &attr))
}

pub fn mkdir(fs: &Fs, req: &pb::MkdirRequest) -> Result<pb::FileInfo, Status> {
    let path = ApiPath::parse(&req.path)?;
    let perm = if req.perm == 0 {
        DIR_PERM
    } else {
        req.perm & 0o7777
    };
    if !req.parents {
        let (parent, name) = parent_of(fs, &path)?;
        let attr = fs
            .mkdir(parent, name.as_bytes(), perm, OWNER)
            .map_err(on(path.shown()))?;
        return Ok(file_info(fs, &attr));
    }
    // mkdir -p: walk down, creating what is missing; existing directories
    // (or symlinks to them) are fine, anything else is ENOTDIR.
    let mut dir = resolve(fs, &ApiPath::root(), true)?;
    for name in path.components() {
        let attr = match fs.lookup(dir.ino, name.as_bytes()) {
            Ok(a) => a,
            Err(e) if e.errno() == Errno::ENOENT => {
                match fs.mkdir(dir.ino, name.as_bytes(), perm, OWNER) {
                    Ok(a) => a,
                    // Made by someone else meanwhile.
                    Err(e) if e.errno() == Errno::EEXIST => fs
                        .lookup(dir.ino, name.as_bytes())
                        .map_err(on(path.shown()))?,
                    Err(e) => return Err(on(path.shown())(e)),
                }
            }
            Err(e) => return Err(on(path.shown())(e)),
        };
        let attr = if attr.kind == FileKind::Symlink {
            fs.resolve(dir.ino, name.as_bytes(), true)
                .map_err(on(path.shown()))?
        } else {
            attr
        };
        if attr.kind != FileKind::Directory {
            return Err(errno_status(Errno::ENOTDIR, path.shown()));
        }
        dir = attr;
    }
    Ok(file_info(fs, &dir))
}

pub fn readdir(fs: &Fs, req: &pb::ReadDirRequest) -> Result<pb::ReadDirResponse, Status> {
    let path = ApiPath::parse(&req.path)?;
    let dir = resolve(fs, &path, true)?;
    if dir.kind != FileKind::Directory {
        return Err(errno_status(Errno::ENOTDIR, path.shown()));
    }
    let page = match req.page_size as usize {
        0 => PAGE_DEFAULT,
        n => n.min(PAGE_MAX),
    };
    let cookie = if req.page_token.is_empty() {
        0
    } else {
        req.page_token.parse::<u64>().map_err(|_| {
            errno_detail(
                Errno::EINVAL,
                format_args!("bad page_token {:?}", req.page_token),
            )
        })?
    };
    // One extra entry tells whether another page follows.
    let mut entries = fs
        .readdir(dir.ino, cookie, page + 1)
        .map_err(on(path.shown()))?;
    let more = entries.len() > page;
    entries.truncate(page);
    let next_page_token = match (more, entries.last()) {
        (true, Some(last)) => last.cookie.to_string(),
        _ => String::new(),
    };
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let info = if req.with_info {
            match fs.lookup(dir.ino, &e.name) {
                Ok(attr) => Some(file_info(fs, &attr)),
                // Removed since the listing: leave it out.
                Err(err) if err.errno() == Errno::ENOENT => continue,
                Err(err) => return Err(on(path.shown())(err)),
            }
        } else {
            None
        };
        let (name, name_bytes) = match String::from_utf8(e.name) {
            Ok(s) => (s, Vec::new()),
            Err(err) => {
                let raw = err.into_bytes();
                (String::from_utf8_lossy(&raw).into_owned(), raw)
            }
        };
        out.push(pb::DirEntry {
            name,
            kind: kind(e.kind) as i32,
            ino: e.ino,
            name_bytes,
            info,
        });
    }
    Ok(pb::ReadDirResponse {
        entries: out,
        next_page_token,
    })
}

pub fn remove(fs: &Fs, req: &pb::RemoveRequest) -> Result<(), Status> {
    let path = ApiPath::parse(&req.path)?;
    refuse_dot(&path)?;
    let (parent, name) = parent_of(fs, &path)?;
    let attr = fs
        .lookup(parent, name.as_bytes())
        .map_err(on(path.shown()))?;
    check_dir_only(&path, attr.kind)?;
    let result = match (attr.kind, req.recursive) {
        (FileKind::Directory, true) => remove_tree(fs, parent, name.as_bytes(), attr.ino),
        (FileKind::Directory, false) => fs.rmdir(parent, name.as_bytes()),
        _ => fs.unlink(parent, name.as_bytes()),
    };
    result.map_err(on(path.shown()))
}

/// Removes directory `parent/name` (inode `ino`) and everything below it,
/// depth first with an explicit stack so deep trees cannot overflow ours.
fn remove_tree(fs: &Fs, parent: Ino, name: &[u8], ino: Ino) -> agentcomputer_fs::Result<()> {
    let mut stack: Vec<(Ino, Vec<u8>, Ino)> = vec![(parent, name.to_vec(), ino)];
    while let Some((parent, name, dir)) = stack.last().cloned() {
        let entries = fs.readdir(dir, 0, REMOVE_BATCH)?;
        if entries.is_empty() {
            fs.rmdir(parent, &name)?;
            stack.pop();
            continue;
        }
        for e in entries {
            if e.kind == FileKind::Directory {
                // Descend now; this directory is listed again afterwards.
                stack.push((dir, e.name, e.ino));
                break;
            }
            fs.unlink(dir, &e.name)?;
        }
    }
    Ok(())
}

pub fn rename(fs: &Fs, req: &pb::RenameRequest) -> Result<(), Status> {
    let from = ApiPath::parse(&req.from)?;
    let to = ApiPath::parse(&req.to)?;
    refuse_dot(&from)?;
    refuse_dot(&to)?;
    let (from_dir, from_name) = parent_of(fs, &from)?;
    let (to_dir, to_name) = parent_of(fs, &to)?;
    if from.dir_only() || to.dir_only() {
        // A trailing slash on either side makes the source a directory.
        let src = fs
            .lookup(from_dir, from_name.as_bytes())
            .map_err(on(from.shown()))?;
        check_dir_only(if from.dir_only() { &from } else { &to }, src.kind)?;
    }
    let flags = RenameFlags {
        noreplace: req.noreplace,
        exchange: false,
    };
    fs.rename(
        from_dir,
        from_name.as_bytes(),
        to_dir,
        to_name.as_bytes(),
        flags,
    )
    .map_err(|e| {
        // ENOENT is about the source, anything else usually the target.
        let shown = if e.errno() == Errno::ENOENT {
            from.shown()
        } else {
            to.shown()
        };
        on(shown)(e)
    })
}

/// `EINVAL` for a path whose last component is `.` or `..` (as `rm`
/// refuses them): `a/b/..` must not remove `a`.
fn refuse_dot(path: &ApiPath) -> Result<(), Status> {
    if path.dot_last() {
        return Err(errno_detail(
            Errno::EINVAL,
            format_args!("refusing to remove or rename '.' or '..': {}", path.shown()),
        ));
    }
    Ok(())
}

pub fn symlink(fs: &Fs, req: &pb::SymlinkRequest) -> Result<pb::FileInfo, Status> {
    let path = ApiPath::parse(&req.path)?;
    if req.target.is_empty() {
        return Err(errno_detail(Errno::ENOENT, "empty symlink target"));
    }
    let (parent, name) = parent_of(fs, &path)?;
    if path.dir_only() {
        // symlink(2) on `name/`: EEXIST if taken, else ENOENT (a directory
        // that does not exist), as Linux answers.
        let errno = match fs.lookup(parent, name.as_bytes()) {
            Ok(_) => Errno::EEXIST,
            Err(_) => Errno::ENOENT,
        };
        return Err(errno_status(errno, path.shown()));
    }
    let attr = fs
        .symlink(parent, name.as_bytes(), req.target.as_bytes(), OWNER)
        .map_err(on(path.shown()))?;
    Ok(file_info(fs, &attr))
}

pub fn readlink(fs: &Fs, req: &pb::ReadlinkRequest) -> Result<pb::ReadlinkResponse, Status> {
    let path = ApiPath::parse(&req.path)?;
    let attr = resolve(fs, &path, false)?;
    if attr.kind != FileKind::Symlink {
        return Err(errno_status(Errno::EINVAL, path.shown()));
    }
    let target = fs.readlink(attr.ino).map_err(on(path.shown()))?;
    Ok(pb::ReadlinkResponse {
        target: String::from_utf8_lossy(&target).into_owned(),
    })
}

pub fn chmod(fs: &Fs, req: &pb::ChmodRequest) -> Result<pb::FileInfo, Status> {
    let path = ApiPath::parse(&req.path)?;
    let attr = resolve(fs, &path, true)?;
    let set = SetAttr {
        perm: Some(req.perm & 0o7777),
        ..SetAttr::default()
    };
    let attr = fs.setattr(attr.ino, &set).map_err(on(path.shown()))?;
    Ok(file_info(fs, &attr))
}

pub fn statfs(fs: &Fs) -> Result<pb::StatfsResponse, Status> {
    let st = fs.statfs().map_err(on(""))?;
    Ok(pb::StatfsResponse {
        block_size: st.block_size,
        blocks: st.blocks,
        blocks_free: st.blocks_free,
        files: st.files,
        files_free: st.files_free,
        used_bytes: st.used_bytes,
        used_inodes: st.used_inodes,
        name_max: st.name_max,
    })
}
