//! What can go wrong with an archive, for callers to report in their own
//! words (a gRPC status, a `tar:` line).

use std::fmt;

/// A failure packing, unpacking or listing an archive.
#[derive(Debug)]
pub enum ArchiveError {
    /// An entry the guard does not unpack: `name` as the archive gives it,
    /// `why` in words ("a `..` component", "devices and FIFOs cannot be
    /// made in a computer").
    Refused {
        /// The entry's name, lossily decoded.
        name: String,
        /// Why it was refused.
        why: String,
    },
    /// Not a tar archive, one broken or cut short, or one whose headers
    /// pass the metadata budget; `name` is the entry being read when it
    /// broke, if any.
    Malformed {
        /// The entry being read, if the failure is inside one.
        name: Option<String>,
        /// What was wrong ("the stream ended after 1000 of its 4096 bytes").
        detail: String,
    },
    /// The engine failed on `name` (`ENOSPC`, `EISDIR`, `ENOTDIR`, ...);
    /// `name` is the entry's name in the archive, `.` for the top.
    Fs {
        /// The entry (or tree member) the engine failed on.
        name: String,
        /// The engine's error.
        error: agentcomputer_fs::Error,
    },
    /// Reading the archive's source or writing to its sink failed (a
    /// client that left, a closed pipe); the caller's own error comes back.
    Io(std::io::Error),
}

impl ArchiveError {
    pub(crate) fn refused(name: &str, why: impl Into<String>) -> ArchiveError {
        ArchiveError::Refused {
            name: name.to_string(),
            why: why.into(),
        }
    }

    pub(crate) fn fs(name: &str) -> impl Fn(agentcomputer_fs::Error) -> ArchiveError + '_ {
        move |error| ArchiveError::Fs {
            name: name.to_string(),
            error,
        }
    }

    /// The error of a read or write through the tar crate: the engine's
    /// error if one was carried through `std::io` ([`carry`]), else the
    /// caller's stream error as it came.
    pub(crate) fn from_io(e: std::io::Error) -> ArchiveError {
        if e.get_ref().is_some_and(|i| i.is::<Carried>()) {
            let inner = e.into_inner().expect("checked above");
            let carried = inner.downcast::<Carried>().expect("checked above");
            return ArchiveError::Fs {
                name: carried.name,
                error: carried.error,
            };
        }
        ArchiveError::Io(e)
    }
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Refused { name, why } => {
                write!(f, "archive entry {name:?} refused: {why}")
            }
            ArchiveError::Malformed {
                name: Some(name),
                detail,
            } => write!(f, "bad tar archive at {name:?}: {detail}"),
            ArchiveError::Malformed { name: None, detail } => {
                write!(f, "bad tar archive: {detail}")
            }
            ArchiveError::Fs { name, error } => write!(f, "{name}: {error}"),
            ArchiveError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ArchiveError {}

/// An engine error on `name` carried through `std::io::Error` (the tar
/// crate reads file data through `Read`).
#[derive(Debug)]
struct Carried {
    name: String,
    error: agentcomputer_fs::Error,
}

impl fmt::Display for Carried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.error)
    }
}

impl std::error::Error for Carried {}

/// `error` on `name` as a `std::io::Error` that [`ArchiveError::from_io`]
/// turns back into [`ArchiveError::Fs`].
pub(crate) fn carry(name: &str, error: agentcomputer_fs::Error) -> std::io::Error {
    std::io::Error::other(Carried {
        name: name.to_string(),
        error,
    })
}
