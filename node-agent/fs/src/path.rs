//! Path resolution inside the computer.
//!
//! Paths are raw bytes. Absolute paths start at the root inode, relative
//! ones at the caller's `cwd`; `..` at the root stays at the root, so no
//! path leaves the computer. Symlinks are followed as by Linux
//! `path_resolution(7)`, with two rules of the computer:
//!
//! * the computer's files appear at `/workspace` in every runtime, so an
//!   absolute target equal to `/workspace` or starting with `/workspace/`
//!   has that prefix removed before it is resolved;
//! * any other absolute target resolves from the root, as in a chroot.

use rusqlite::Connection;

use crate::inode::{self, Inode};
use crate::namespace::readlink_in;
use crate::{
    Attr, Errno, FileKind, Fs, Ino, MAX_SYMLINK_HOPS, NAME_MAX, PATH_MAX, ROOT_INO, Result, dirent,
};

/// The mount point of the computer's files in every runtime.
pub const WORKSPACE: &[u8] = b"/workspace";

/// `ENOENT` for an empty path, `ENAMETOOLONG` for one of [`PATH_MAX`] bytes
/// or more (the limit counts the C string's NUL), `EINVAL` for a NUL byte.
fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT.into());
    }
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG.into());
    }
    if path.contains(&0) {
        return Err(Errno::EINVAL.into());
    }
    Ok(())
}

/// An absolute symlink target seen from the computer's root.
pub(crate) fn rebase_target(target: &[u8]) -> &[u8] {
    match target.strip_prefix(WORKSPACE) {
        Some(b"") => b"/",
        Some(rest) if rest.starts_with(b"/") => rest,
        _ => target,
    }
}

/// One component waiting to be walked.
struct Step {
    name: Vec<u8>,
    /// Follow it if it is a symlink.
    follow: bool,
    /// It must end up a directory (not last, or a trailing slash).
    must_dir: bool,
}

/// Pushes the components of `path` on `stack` (last on the bottom, so
/// they pop in order). The final component gets `follow_last` and
/// `must_dir_last`, both forced on by a trailing slash.
fn push_components(stack: &mut Vec<Step>, path: &[u8], follow_last: bool, must_dir_last: bool) {
    let trailing = path.ends_with(b"/");
    let mut parts = path.split(|&b| b == b'/').filter(|c| !c.is_empty()).rev();
    if let Some(last) = parts.next() {
        stack.push(Step {
            name: last.to_vec(),
            follow: follow_last || trailing,
            must_dir: must_dir_last || trailing,
        });
    }
    for c in parts {
        stack.push(Step {
            name: c.to_vec(),
            follow: true,
            must_dir: true,
        });
    }
}

/// Resolves `path` from `cwd` on any connection; see [`Fs::resolve`].
pub(crate) fn resolve_in(
    conn: &Connection,
    cwd: Ino,
    path: &[u8],
    follow_last: bool,
) -> Result<Attr> {
    check_path(path)?;
    let start = if path.starts_with(b"/") {
        ROOT_INO
    } else {
        cwd
    };
    let mut cur: Inode = inode::get(conn, start)?;
    let mut stack = Vec::new();
    push_components(&mut stack, path, follow_last, false);
    if stack.is_empty() || !cur.is_dir() {
        // "/" or only slashes; or a cwd that is not a directory.
        if !cur.is_dir() && !stack.is_empty() {
            return Err(Errno::ENOTDIR.into());
        }
        return Ok(cur.attr);
    }
    let mut hops = 0usize;
    while let Some(step) = stack.pop() {
        if !cur.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        let next: Inode = match step.name.as_slice() {
            b"." => cur.clone(),
            b".." => inode::get(conn, inode::parent_of(conn, cur.attr.ino)?)?,
            name => {
                if name.len() > NAME_MAX {
                    return Err(Errno::ENAMETOOLONG.into());
                }
                dirent::find(conn, cur.attr.ino, name)?.ok_or(Errno::ENOENT)?
            }
        };
        if next.attr.kind == FileKind::Symlink && step.follow {
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(Errno::ELOOP.into());
            }
            let target = readlink_in(conn, next.attr.ino)?;
            let target = rebase_target(&target);
            if target.starts_with(b"/") {
                cur = inode::get(conn, ROOT_INO)?;
            }
            push_components(&mut stack, target, true, step.must_dir);
            continue;
        }
        if step.must_dir && !next.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        cur = next;
    }
    Ok(cur.attr)
}

/// Splits `path` into its directory part and final name; see
/// [`Fs::resolve_parent`].
pub(crate) fn resolve_parent_in(
    conn: &Connection,
    cwd: Ino,
    path: &[u8],
) -> Result<(Ino, Vec<u8>)> {
    check_path(path)?;
    let trimmed = match path.iter().rposition(|&b| b != b'/') {
        Some(i) => &path[..=i],
        None => return Ok((ROOT_INO, b"/".to_vec())),
    };
    let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => (&trimmed[..=i], &trimmed[i + 1..]),
        None => (&b""[..], trimmed),
    };
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG.into());
    }
    let parent = if dir.is_empty() {
        inode::get_dir(conn, cwd)?.attr
    } else {
        resolve_in(conn, cwd, dir, true)?
    };
    if parent.kind != FileKind::Directory {
        return Err(Errno::ENOTDIR.into());
    }
    Ok((parent.ino, name.to_vec()))
}

impl Fs {
    /// Resolves `path` to an inode. Absolute paths start at the root,
    /// relative ones at directory `cwd`. Intermediate symlinks are always
    /// followed, the last one only if `follow_last` (or the path ends in
    /// `/`). See the module docs for absolute symlink targets.
    ///
    /// Errors: `ENOENT` (missing component or empty path), `ENOTDIR` (a
    /// non-directory used as one, also before a trailing `/`), `ELOOP`
    /// after [`MAX_SYMLINK_HOPS`] symlinks, `ENAMETOOLONG` (a name over 255
    /// bytes or a path of 4096 or more), `EINVAL` (NUL in the path).
    pub fn resolve(&self, cwd: Ino, path: &[u8], follow_last: bool) -> Result<Attr> {
        let r = self.inner.reader()?;
        r.snapshot(|c| resolve_in(c, cwd, path, follow_last))
    }

    /// Resolves all of `path` but its final name: returns the directory
    /// that holds (or would hold) the final name, and that name. Trailing
    /// slashes are dropped (`"a/b/"` gives `b` in `a`). Symlinks in the
    /// directory part are followed; the final name is returned as written,
    /// `.` and `..` included.
    ///
    /// For `/` (or only slashes) the answer is `(ROOT_INO, b"/")`: the name
    /// `/` denotes the root itself at the inode-level calls, which then give
    /// Linux's answers for `/` (`rmdir` `EBUSY`, `mkdir` `EEXIST`, `unlink`
    /// `EISDIR`, `rename` `EBUSY`, `lookup` the root).
    ///
    /// Errors: as [`Fs::resolve`] for the directory part; `ENOTDIR` if it
    /// is not a directory.
    pub fn resolve_parent(&self, cwd: Ino, path: &[u8]) -> Result<(Ino, Vec<u8>)> {
        let r = self.inner.reader()?;
        r.snapshot(|c| resolve_parent_in(c, cwd, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_prefix_is_removed() {
        assert_eq!(rebase_target(b"/workspace"), b"/");
        assert_eq!(rebase_target(b"/workspace/a/b"), b"/a/b");
        assert_eq!(rebase_target(b"/workspaces/a"), b"/workspaces/a");
        assert_eq!(rebase_target(b"/etc/passwd"), b"/etc/passwd");
        assert_eq!(rebase_target(b"rel/x"), b"rel/x");
    }
}
