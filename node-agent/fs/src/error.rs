//! Errors of the engine: every failure maps to one POSIX errno.

pub use nix::errno::Errno;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An engine error.
///
/// `Errno` variants are the POSIX answers a caller expects (`ENOENT`,
/// `ENOSPC`, ...); `Storage` wraps a SQLite failure and maps to `EIO`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A POSIX error, with an optional context string (never a host path).
    #[error("{}{}", .errno.desc(), .context.as_deref().map(|c| format!(": {c}")).unwrap_or_default())]
    Errno {
        /// The POSIX error number.
        errno: Errno,
        /// What was being done or named, for the message.
        context: Option<String>,
    },
    /// The database failed underneath us (I/O error, corruption, ...).
    #[error("storage error: {0}")]
    Storage(#[from] rusqlite::Error),
}

impl Error {
    /// The errno this error maps to. Storage failures are `EIO`, except a
    /// full host disk (`SQLITE_FULL`: `ENOSPC`), a read-only database file
    /// (`SQLITE_READONLY`: `EROFS`) and a lock held too long by another
    /// process (`SQLITE_BUSY`: `EBUSY`).
    pub fn errno(&self) -> Errno {
        match self {
            Error::Errno { errno, .. } => *errno,
            Error::Storage(rusqlite::Error::SqliteFailure(e, _)) => match e.code {
                rusqlite::ErrorCode::DiskFull => Errno::ENOSPC,
                rusqlite::ErrorCode::ReadOnly => Errno::EROFS,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
                    Errno::EBUSY
                }
                _ => Errno::EIO,
            },
            Error::Storage(_) => Errno::EIO,
        }
    }

    /// The symbolic errno name, such as `"ENOENT"`.
    pub fn errno_name(&self) -> &'static str {
        errno_name(self.errno())
    }

    /// Adds a context string (for example the path involved).
    pub fn context(self, context: impl Into<String>) -> Self {
        match self {
            Error::Errno { errno, .. } => Error::Errno {
                errno,
                context: Some(context.into()),
            },
            other => other,
        }
    }
}

impl From<Errno> for Error {
    fn from(errno: Errno) -> Self {
        Error::Errno {
            errno,
            context: None,
        }
    }
}

/// The symbolic name of an errno (`Errno::ENOENT` -> `"ENOENT"`).
pub fn errno_name(errno: Errno) -> &'static str {
    // nix's Debug output is exactly the C macro name.
    match errno {
        Errno::EPERM => "EPERM",
        Errno::ENOENT => "ENOENT",
        Errno::EIO => "EIO",
        Errno::EBADF => "EBADF",
        Errno::EACCES => "EACCES",
        Errno::EEXIST => "EEXIST",
        Errno::EXDEV => "EXDEV",
        Errno::ENOTDIR => "ENOTDIR",
        Errno::EISDIR => "EISDIR",
        Errno::EINVAL => "EINVAL",
        Errno::EFBIG => "EFBIG",
        Errno::ENOSPC => "ENOSPC",
        Errno::EROFS => "EROFS",
        Errno::EMLINK => "EMLINK",
        Errno::ERANGE => "ERANGE",
        Errno::ENAMETOOLONG => "ENAMETOOLONG",
        Errno::ENOTEMPTY => "ENOTEMPTY",
        Errno::ELOOP => "ELOOP",
        Errno::ENODATA => "ENODATA",
        Errno::ENOTSUP => "ENOTSUP",
        Errno::EDQUOT => "EDQUOT",
        Errno::EBUSY => "EBUSY",
        Errno::ENOSYS => "ENOSYS",
        Errno::E2BIG => "E2BIG",
        Errno::EAGAIN => "EAGAIN",
        Errno::ETIMEDOUT => "ETIMEDOUT",
        Errno::ECANCELED => "ECANCELED",
        Errno::EOVERFLOW => "EOVERFLOW",
        Errno::ESTALE => "ESTALE",
        _ => "EIO",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_map_to_errnos() {
        let full = Error::Storage(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        ));
        assert_eq!(full.errno_name(), "ENOSPC");
        let ro = Error::Storage(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
            None,
        ));
        assert_eq!(ro.errno(), Errno::EROFS);
        let other = Error::Storage(rusqlite::Error::InvalidQuery);
        assert_eq!(other.errno(), Errno::EIO);
        assert_eq!(Error::from(Errno::ENOENT).errno_name(), "ENOENT");
    }
}
