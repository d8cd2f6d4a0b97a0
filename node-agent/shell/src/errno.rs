//! Engine errors as the I/O errors bashkit's builtins understand.
//!
//! bashkit prints a custom `io::Error` message verbatim (see its
//! `error::io_error_reason`), and decides control flow on the
//! `io::ErrorKind` (`rm -f` ignores `NotFound`, `mkdir -p` accepts
//! `AlreadyExists`, symlink following retries on most kinds). So each errno
//! becomes an error whose kind is the std mapping of that errno and whose
//! message is the C library's `strerror` text ("No such file or directory"),
//! which is what bash and coreutils print.

use agentcomputer_fs::Errno;
use agentcomputer_fs::Error as EngineError;
use std::io::{Error as IoError, ErrorKind};

/// The `io::ErrorKind` matching `errno`, as std maps raw OS errors
/// (`std::sys::pal::unix::decode_error_kind`).
pub(crate) fn kind_of(errno: Errno) -> ErrorKind {
    match errno {
        Errno::ENOENT => ErrorKind::NotFound,
        Errno::EEXIST => ErrorKind::AlreadyExists,
        Errno::EPERM | Errno::EACCES => ErrorKind::PermissionDenied,
        Errno::ENOTDIR => ErrorKind::NotADirectory,
        Errno::EISDIR => ErrorKind::IsADirectory,
        Errno::ENOTEMPTY => ErrorKind::DirectoryNotEmpty,
        Errno::ENOSPC | Errno::EDQUOT => ErrorKind::StorageFull,
        Errno::EFBIG => ErrorKind::FileTooLarge,
        Errno::EROFS => ErrorKind::ReadOnlyFilesystem,
        Errno::EXDEV => ErrorKind::CrossesDevices,
        Errno::EBUSY => ErrorKind::ResourceBusy,
        Errno::EINVAL => ErrorKind::InvalidInput,
        Errno::ENAMETOOLONG => ErrorKind::InvalidFilename,
        Errno::EMLINK => ErrorKind::TooManyLinks,
        Errno::ENOTSUP | Errno::ENOSYS => ErrorKind::Unsupported,
        Errno::ETIMEDOUT => ErrorKind::TimedOut,
        _ => ErrorKind::Other,
    }
}

/// An `io::Error` for `errno` carrying the `strerror(3)` text as message.
pub(crate) fn io_error(errno: Errno) -> IoError {
    IoError::new(kind_of(errno), strerror(errno))
}

/// The C library's text for `errno` ("Input/output error"), without the
/// " (os error N)" suffix std adds.
fn strerror(errno: Errno) -> String {
    let text = IoError::from_raw_os_error(errno as i32).to_string();
    match text.rsplit_once(" (os error ") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}

/// The bashkit error for `errno`.
pub(crate) fn errno_error(errno: Errno) -> bashkit::Error {
    io_error(errno).into()
}

/// Converts an engine error. The engine's context string is dropped: shell
/// messages name the path themselves. Storage failures are logged, since
/// the script only sees `EIO`.
pub(crate) fn from_engine(err: EngineError) -> bashkit::Error {
    if let EngineError::Storage(e) = &err {
        tracing::warn!(error = %e, "filesystem engine storage error during shell exec");
    }
    errno_error(err.errno())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_strerror_text() {
        assert_eq!(
            io_error(Errno::ENOENT).to_string(),
            "No such file or directory"
        );
        assert_eq!(
            io_error(Errno::ENOSPC).to_string(),
            "No space left on device"
        );
        assert_eq!(io_error(Errno::EISDIR).to_string(), "Is a directory");
        assert_eq!(
            io_error(Errno::ENOTEMPTY).to_string(),
            "Directory not empty"
        );
    }

    #[test]
    fn kinds_drive_bashkit_control_flow() {
        assert_eq!(io_error(Errno::ENOENT).kind(), ErrorKind::NotFound);
        assert_eq!(io_error(Errno::EEXIST).kind(), ErrorKind::AlreadyExists);
        assert_eq!(io_error(Errno::EACCES).kind(), ErrorKind::PermissionDenied);
        assert_eq!(io_error(Errno::EIO).kind(), ErrorKind::Other);
    }

    #[test]
    fn storage_errors_become_eio() {
        let err = from_engine(EngineError::Storage(rusqlite::Error::InvalidQuery));
        assert_eq!(err.to_string(), "io error: Input/output error");
    }
}
