//! The physical path of an operand in the shell's namespace: every symlink
//! on it resolved (in the namespace, as bashkit's following layer resolves
//! them), so that a command can tell which tree — the engine behind
//! `/workspace` or the scratch tree — holds the file it names.

use crate::errno::errno_error;
use agentcomputer_fs::Errno;
use bashkit::{FileSystem, FileType, Metadata};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Symlinks followed per path before `ELOOP` (Linux `MAXSYMLINKS`).
const MAX_HOPS: usize = 40;

/// `path` (absolute) with every symlink resolved, and the metadata of what
/// it names, or `None` when only its last component is missing (a file
/// about to be created). `..` after a link applies to the link's target.
///
/// Errors: `ENOENT` for a missing directory on the way, `ENOTDIR`,
/// `ELOOP` past 40 links, and the filesystem's own.
pub(crate) async fn realpath(
    fs: &dyn FileSystem,
    path: &Path,
) -> bashkit::Result<(PathBuf, Option<Metadata>)> {
    let mut todo: VecDeque<String> = names(path).collect();
    let mut done = PathBuf::from("/");
    let mut meta = fs.lstat(&done).await?;
    let mut hops = 0;
    while let Some(name) = todo.pop_front() {
        match name.as_str() {
            "." => continue,
            ".." => {
                done.pop();
                meta = fs.lstat(&done).await?;
                continue;
            }
            _ => {}
        }
        if !meta.file_type.is_dir() {
            return Err(errno_error(Errno::ENOTDIR));
        }
        let next = done.join(&name);
        match fs.lstat(&next).await {
            Ok(m) if m.file_type == FileType::Symlink => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(errno_error(Errno::ELOOP));
                }
                let target = fs.read_link(&next).await?;
                if target.is_absolute() {
                    done = PathBuf::from("/");
                    meta = fs.lstat(&done).await?;
                }
                for (i, n) in names(&target).enumerate() {
                    todo.insert(i, n);
                }
            }
            Ok(m) => {
                done = next;
                meta = m;
            }
            Err(bashkit::Error::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound && todo.is_empty() =>
            {
                return Ok((next, None));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((done, Some(meta)))
}

fn names(path: &Path) -> impl Iterator<Item = String> + '_ {
    path.to_str()
        .unwrap_or_default()
        .split('/')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}
