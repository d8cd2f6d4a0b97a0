//! Unix socket files: removing a stale one before binding, and restricting
//! who may connect.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Removes a socket file (or a symlink) left at `path` by a previous run,
/// so that `bind(2)` does not fail with `EADDRINUSE`. Anything else there is
/// left alone and reported (`AlreadyExists`), so a wrong path never deletes
/// a user's file. A missing parent directory is created (mode 0755).
pub fn remove_stale(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() || m.file_type().is_symlink() => {
            std::fs::remove_file(path)
        }
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; not replacing it",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the socket at `path` mode 0600 and, when `owner` is given, owned
/// by that uid and gid (connecting to a unix socket needs write permission
/// on it, unix(7)).
///
/// The socket is opened with `O_PATH | O_NOFOLLOW` and changed through
/// `/proc/self/fd`, so a symlink planted at `path` by whoever can write its
/// directory (the agent owns the hand-over socket's directory) never makes
/// the mounter change another file. Errors: `InvalidInput` when `path` is
/// no longer a socket, or the error of `open`, `chown` or `chmod`.
pub fn restrict(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = nix::sys::stat::fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} was replaced by something else than a socket",
                path.display()
            ),
        ));
    }
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&by_fd, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(&by_fd, std::fs::Permissions::from_mode(0o600))
}

/// Parses a CSI endpoint: `unix:///abs/path` or a plain absolute path.
/// Errors: any other scheme, or a relative path.
pub fn endpoint_path(endpoint: &str) -> Result<PathBuf, String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.contains("://") || !path.starts_with('/') {
        return Err(format!(
            "CSI endpoint {endpoint:?}: expected unix:///absolute/path or an absolute path"
        ));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint_path("unix:///a/b.sock").unwrap(),
            Path::new("/a/b.sock")
        );
        assert_eq!(endpoint_path("/a/b.sock").unwrap(), Path::new("/a/b.sock"));
        assert!(endpoint_path("tcp://1.2.3.4:5").is_err());
        assert!(endpoint_path("unix://rel.sock").is_err());
    }

    #[test]
    fn stale_socket_removed_other_files_kept() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(l);
        remove_stale(&sock).unwrap();
        assert!(!sock.exists());
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(
            remove_stale(&file).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert!(file.exists());
    }

    #[test]
    fn restrict_changes_the_socket_and_never_a_symlink_target() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        restrict(&sock, None).unwrap();
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("planted.sock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(restrict(&link, None).is_err());
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "the symlink's target was changed");
        // A planted symlink is removed before binding, its target kept.
        remove_stale(&link).unwrap();
        assert!(std::fs::symlink_metadata(&link).is_err() && victim.exists());
    }
}
