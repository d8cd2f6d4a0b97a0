//! Node-style fs errors: `code`, negative `errno`, `syscall`, `path`, and
//! libuv's message text (the `UV_ERRNO_MAP` strings of libuv's `uv.h`, which
//! is what Node prints, e.g. `ENOENT: no such file or directory, open '/x'`).

use agentcomputer_fs::Error as FsError;
use nix::errno::Errno;

/// An error of one fs call, before it becomes a JS `Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SysError {
    pub errno: Errno,
    pub syscall: &'static str,
    pub path: Option<String>,
    pub dest: Option<String>,
}

impl SysError {
    pub(crate) fn new(errno: Errno, syscall: &'static str, path: &str) -> SysError {
        SysError {
            errno,
            syscall,
            path: Some(path.to_string()),
            dest: None,
        }
    }

    pub(crate) fn from_fs(err: &FsError, syscall: &'static str, path: &str) -> SysError {
        SysError::new(err.errno(), syscall, path)
    }

    pub(crate) fn with_dest(mut self, dest: &str) -> SysError {
        self.dest = Some(dest.to_string());
        self
    }

    /// The errno's symbolic name (`ENOENT`), Node's `err.code`.
    pub(crate) fn code(&self) -> String {
        // nix's Debug output is the C macro name.
        format!("{:?}", self.errno)
    }

    /// `ENOENT: no such file or directory, open '/workspace/x'`.
    pub(crate) fn message(&self) -> String {
        let mut m = format!("{}: {}, {}", self.code(), uv_text(self.errno), self.syscall);
        if let Some(p) = &self.path {
            m.push_str(&format!(" '{p}'"));
        }
        if let Some(d) = &self.dest {
            m.push_str(&format!(" -> '{d}'"));
        }
        m
    }
}

/// libuv's text for an errno (`uv_strerror`).
pub(crate) fn uv_text(errno: Errno) -> &'static str {
    match errno {
        Errno::EPERM => "operation not permitted",
        Errno::ENOENT => "no such file or directory",
        Errno::EIO => "i/o error",
        Errno::EBADF => "bad file descriptor",
        Errno::EACCES => "permission denied",
        Errno::EEXIST => "file already exists",
        Errno::EXDEV => "cross-device link not permitted",
        Errno::ENOTDIR => "not a directory",
        Errno::EISDIR => "illegal operation on a directory",
        Errno::EINVAL => "invalid argument",
        Errno::EFBIG => "file too large",
        Errno::ENOSPC => "no space left on device",
        Errno::EROFS => "read-only file system",
        Errno::EMLINK => "too many links",
        Errno::ERANGE => "result too large",
        Errno::ENAMETOOLONG => "name too long",
        Errno::ENOTEMPTY => "directory not empty",
        Errno::ELOOP => "too many symbolic links encountered",
        Errno::ENOTSUP => "operation not supported on socket",
        Errno::EBUSY => "resource busy or locked",
        Errno::ENOSYS => "function not implemented",
        Errno::E2BIG => "argument list too long",
        Errno::EAGAIN => "resource temporarily unavailable",
        Errno::ETIMEDOUT => "connection timed out",
        Errno::ECANCELED => "operation canceled",
        Errno::EOVERFLOW => "value too large for defined data type",
        Errno::EDQUOT => "disk quota exceeded",
        Errno::ENODATA => "no data available",
        other => other.desc(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_message_shape() {
        let e = SysError::new(Errno::ENOENT, "open", "/workspace/x");
        assert_eq!(
            e.message(),
            "ENOENT: no such file or directory, open '/workspace/x'"
        );
        let e = SysError::new(Errno::EXDEV, "rename", "/tmp/a").with_dest("/workspace/b");
        assert_eq!(
            e.message(),
            "EXDEV: cross-device link not permitted, rename '/tmp/a' -> '/workspace/b'"
        );
        assert_eq!(e.code(), "EXDEV");
    }
}
