//! The errors a git command ends with, and the exit code and message real
//! git gives each (git `usage.c`: `die` exits 128, usage errors 129).

use agentcomputer_fs::Errno;

/// Result of this crate's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a git command stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What real git reports with `die()`: printed as `fatal: …`, exit 128.
    #[error("fatal: {0}")]
    Fatal(String),
    /// A bad option or argument: printed as given, exit 129.
    #[error("{0}")]
    Usage(String),
    /// An engine call failed on `path` (`ENOSPC` when the quota is full).
    #[error("fatal: {path}: {}", .errno.desc())]
    Engine {
        /// Engine-absolute path, lossily decoded; empty when unknown.
        path: String,
        /// The engine's errno.
        errno: Errno,
    },
    /// Another git holds `path` (a `.lock` file exists).
    #[error(
        "fatal: Unable to create '{0}': File exists.\n\nAnother git process seems to be running in this repository, or the lock file may be left over from a process that crashed. Remove the file manually to continue."
    )]
    Locked(String),
    /// A repository file is not what git writes.
    #[error("fatal: {0}")]
    Corrupt(String),
    /// A command-specific failure: `message` printed as is, exit `code`.
    #[error("{message}")]
    Failed {
        /// Exit status.
        code: i32,
        /// What is printed on stderr (may be empty).
        message: String,
    },
    /// A file or object larger than the exec may hold in memory.
    #[error(
        "fatal: {what} of {bytes} bytes is more than this exec may hold in memory ({limit} bytes); raise the exec's memory limit, or use real git in the container runtime"
    )]
    TooLarge {
        /// What it was (`a file`, `object 1234abc`).
        what: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The exec was cancelled or ran out of time; nothing more was written.
    #[error("git: stopped")]
    Stopped,
}

impl Error {
    /// An engine error met at `path`.
    pub fn engine(path: &[u8], e: agentcomputer_fs::Error) -> Self {
        Error::Engine {
            path: String::from_utf8_lossy(path).into_owned(),
            errno: e.errno(),
        }
    }

    /// The same error, naming `path` if it named none.
    pub fn at(self, path: &[u8]) -> Self {
        match self {
            Error::Engine { path: p, errno } if p.is_empty() => Error::Engine {
                path: String::from_utf8_lossy(path).into_owned(),
                errno,
            },
            other => other,
        }
    }

    /// Shorthand for [`Error::Fatal`].
    pub fn fatal(message: impl Into<String>) -> Self {
        Error::Fatal(message.into())
    }

    /// The exit status real git gives this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 129,
            Error::Stopped => 130,
            Error::Failed { code, .. } => *code,
            _ => 128,
        }
    }
}
