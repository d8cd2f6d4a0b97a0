//! Errors of shipping and restoring.

/// Why shipping or a restore failed. Keys are object names in the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another shipper wrote this position first: this one stopped, so the
    /// log never forks. Its database may hold transactions the log lacks.
    #[error(
        "backup position {key} was written by another shipper; this shipper stopped (another node ships this database now)"
    )]
    Fenced {
        /// The object at that position.
        key: String,
    },
    /// The store's log is past every position this database's shippers
    /// wrote: another writer extended it since, so this copy is older than
    /// the log and must be replaced by a restore, never shipped over it.
    #[error(
        "the backup log is at position {store}, past position {known} this copy of the database reached: another node wrote it since; restore from the log instead of shipping this copy"
    )]
    Stale {
        /// The store's latest position.
        store: u64,
        /// The latest position this copy's shippers wrote.
        known: u64,
    },
    /// An object fails its checks (checksum, length, chain, position).
    #[error("backup object {key} is corrupt: {reason}")]
    Corrupt {
        /// The object.
        key: String,
        /// Which check failed.
        reason: String,
    },
    /// Bringing a copy forward met a rewind (a restore of the log to an
    /// earlier position): the copy cannot be patched in place and must be
    /// restored whole.
    #[error(
        "backup object {key} rewinds the log to an earlier position; this copy must be restored whole"
    )]
    Rewound {
        /// The rewind.
        key: String,
    },
    /// A position between the snapshot used and the latest one has no object.
    #[error("backup object {key} is missing")]
    Missing {
        /// The object's name, which the store does not have.
        key: String,
    },
    /// The prefix holds no backup (no object, or no snapshot under the latest).
    #[error("no backup under {prefix}: {reason}")]
    NoBackup {
        /// The prefix looked under.
        prefix: String,
        /// What was missing there.
        reason: String,
    },
    /// The restore destination exists; a restore never overwrites.
    #[error("restore destination {0} exists; a restore never replaces a file")]
    DestinationExists(String),
    /// The restored database failed `PRAGMA integrity_check` or the engine's check.
    #[error("restored database failed its check: {0}")]
    Check(String),
    /// The database is not in WAL mode, or its WAL or file could not be read.
    #[error("database {path}: {reason}")]
    Database {
        /// The database file.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The shipper has stopped (after [`crate::Shipper::stop`] or an earlier error).
    #[error("shipper stopped: {0}")]
    Stopped(String),
    /// The shipper cannot run here (a single-threaded Tokio runtime).
    #[error("{0}")]
    Unsupported(String),
    /// A call on the object store failed (network, credentials, bucket).
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// SQLite failed on the database or on a restored copy.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The filesystem engine's check of a restored database could not run.
    #[error("engine: {0}")]
    Engine(#[from] agentcomputer_fs::Error),
    /// Reading the database or its WAL, or writing a restore, failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A result whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
