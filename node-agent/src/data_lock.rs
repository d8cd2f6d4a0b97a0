//! One node agent per data directory.
//!
//! Two agents on one data directory would each clean up the other's mounts,
//! scratch space and half-made computers, and open the same databases. The
//! agent therefore holds an advisory lock, flock(2) `LOCK_EX | LOCK_NB`, on
//! `<data-dir>/agent.lock` for its whole life and writes its pid into that
//! file. The kernel drops the lock when the process ends however it ends
//! (SIGKILL, crash), so a lock file left by a dead agent never blocks a
//! restart; only a live holder does. The file is opened close-on-exec, so
//! the processes the agent starts (container runs) do not keep it locked.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// File name of the lock inside the data directory.
pub const LOCK_FILE: &str = "agent.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the lock. `pid` is the pid it wrote into
    /// the lock file (`None` if it has not written it yet or it is
    /// unreadable).
    #[error(
        "data directory {} is in use by another node agent ({}); one data directory serves one agent: stop that agent first, or give this one another --data-dir",
        dir.display(),
        match pid { Some(p) => format!("pid {p}"), None => "pid unknown".to_string() }
    )]
    Held {
        /// The data directory.
        dir: PathBuf,
        /// The holder's pid, as written in the lock file.
        pid: Option<u32>,
    },
    /// The lock file cannot be opened, locked or written.
    #[error("cannot lock data directory {}: {source}", dir.display())]
    Io {
        /// The data directory.
        dir: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the data directory (the file stays,
/// its pid then stale and ignored).
#[derive(Debug)]
pub struct DataDirLock {
    _file: Flock<File>,
    path: PathBuf,
}

impl DataDirLock {
    /// Locks `data_dir` (which must exist) for this process and records
    /// this process's pid in [`LOCK_FILE`] (mode 0600). Does not wait:
    /// [`LockError::Held`] names the live holder's pid at once.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            dir: data_dir.to_path_buf(),
            source,
        };
        // Not truncated on open: a holder's pid stays readable for the
        // message of the one that is refused.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                return Err(LockError::Held {
                    dir: data_dir.to_path_buf(),
                    pid: read_pid(&mut file),
                });
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        let pid = std::process::id();
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(format!("{pid}\n").as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(io)?;
        Ok(DataDirLock { _file: file, path })
    }

    /// Creates `data_dir` if missing (mode 0700, [`crate::private::ensure_dir`])
    /// and locks it as [`DataDirLock::acquire`] does.
    pub fn create_and_acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        crate::private::ensure_dir(data_dir).map_err(|source| LockError::Io {
            dir: data_dir.to_path_buf(),
            source,
        })?;
        DataDirLock::acquire(data_dir)
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid written in a lock file, if it holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_naming_the_pid_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(first.path()).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        // flock conflicts between open file descriptions, in one process too.
        match DataDirLock::acquire(dir.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("second lock: {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(dir.path()).expect("free again after the holder let go");
    }

    #[test]
    fn a_stale_pid_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "999999\n").unwrap();
        let lock = DataDirLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
    }
}
