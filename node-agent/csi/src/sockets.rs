//! Unix socket files: removing a stale one before binding, and restricting
//! who may connect.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// Removes a socket file left at `path` by a previous run, so that `bind(2)`
/// does not fail with `EADDRINUSE`. Anything other than a socket there is
/// left alone and reported (`AlreadyExists`), so a wrong path never deletes
/// a user's file. A missing parent directory is created (mode 0755).
pub fn remove_stale(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
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
pub fn restrict(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Parses a CSI endpoint: `unix:///abs/path` or a plain absolute path.
/// Errors: any other scheme, or a relative path.
pub fn endpoint_path(endpoint: &str) -> Result<std::path::PathBuf, String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.contains("://") || !path.starts_with('/') {
        return Err(format!(
            "CSI endpoint {endpoint:?}: expected unix:///absolute/path or an absolute path"
        ));
    }
    Ok(std::path::PathBuf::from(path))
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
}
