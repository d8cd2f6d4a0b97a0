//! One process per database.
//!
//! Open-file tracking and the orphan purge at open assume that a single
//! [`crate::Fs`] serves a database: a second process opening it would free
//! files the first still has open. [`ProcessLock`] takes a POSIX write lock
//! (`fcntl(2)`, `F_SETLK`) on `<database>-lock`, a file next to the
//! database, for as long as the `Fs` lives; the kernel drops it when the
//! process dies, so a crash never leaves a stale lock. A clean close removes
//! the file, so a closed computer stays one file; a taker checks after
//! locking that the path still names the file it locked, so it never
//! holds a lock on a file someone just removed.
//!
//! A separate file, because SQLite holds POSIX locks on the database
//! itself, and closing any descriptor of a file drops all of a process's
//! POSIX locks on it (fcntl(2), "Advisory record locking"). POSIX locks do
//! not conflict within one process; keeping to one `Fs` per database in a
//! process is the caller's part (the node agent's registry does).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{Errno, Error, Result};

/// The lock file of database `db`: its path with `-lock` appended.
fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-lock");
    PathBuf::from(p)
}

/// Holds the process's lock on one database until dropped; dropping
/// removes the lock file, then releases the lock.
#[derive(Debug)]
pub(crate) struct ProcessLock {
    path: PathBuf,
    file: File,
}

impl Drop for ProcessLock {
    fn drop(&mut self) {
        // While still locked: whoever opened the old file sees it replaced.
        // Only our own file: the path may name a newer database's lock by
        // now (the directory was replaced while this engine was still open).
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Attempts before giving up when the lock file keeps being replaced.
const ATTEMPTS: usize = 8;

impl ProcessLock {
    /// Locks database `db` for this process.
    ///
    /// Errors: `EBUSY` naming the process that holds it; `EIO` if the lock
    /// file cannot be opened or locked.
    pub(crate) fn acquire(db: &Path) -> Result<ProcessLock> {
        let path = lock_path(db);
        for _ in 0..ATTEMPTS {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| io(&path, e))?;
            let mut fl = whole_file(libc::F_WRLCK);
            // SAFETY: a valid descriptor and a properly initialised flock.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } != 0 {
                let err = std::io::Error::last_os_error();
                if !matches!(err.raw_os_error(), Some(libc::EACCES | libc::EAGAIN)) {
                    return Err(io(&path, err));
                }
                // SAFETY: as above; F_GETLK fills in the holder.
                let got = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
                // A holder in another PID namespace shows as pid 0.
                let holder = if got == 0 && fl.l_type != libc::F_UNLCK as i16 && fl.l_pid > 0 {
                    format!("process {}", fl.l_pid)
                } else {
                    "another process".to_string()
                };
                return Err(Error::Errno {
                    errno: Errno::EBUSY,
                    context: Some(format!(
                        "{} is open in {holder}; a database is served by one process at a time",
                        db.display()
                    )),
                });
            }
            if same_file(&file, &path) {
                return Ok(ProcessLock { path, file });
            }
            // Removed by a closing holder after we opened it: try again.
        }
        Err(io(
            &path,
            std::io::Error::other("the lock file kept being replaced"),
        ))
    }
}

/// Whether `path` still names the open `file`.
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn whole_file(kind: i32) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Errno {
        errno: Errno::EIO,
        context: Some(format!("lock file {}: {e}", path.display())),
    }
}
