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
pub const LOCK_FILE: &str = crate::layout::LOCK_FILE;

/// Word a stopping agent adds after its pid in the lock file while it hands
/// its mounts over (SIGUSR2): the next agent waits for such a holder to end
/// instead of refusing to start.
const HANDOVER_MARK: &str = "handover";

/// How long a starting agent waits for a holder that is handing over
/// (its running calls get up to 20 s to finish, its sessions close after).
pub const HANDOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Marks the lock file of `data_dir`, held by this process, as handing
/// over: a node agent started on the same directory from now on waits (up
/// to [`HANDOVER_WAIT`]) for this process to release the lock, so an
/// upgrade can start the new build right after sending SIGUSR2 to the old.
/// Errors: the lock file cannot be written.
pub fn mark_handing_over(data_dir: &Path) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(data_dir.join(LOCK_FILE))?;
    file.write_all(format!("{} {HANDOVER_MARK}\n", std::process::id()).as_bytes())?;
    file.sync_data()
}

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
        /// Whether the holder marked itself as handing over (and still
        /// held the lock after [`HANDOVER_WAIT`]).
        handing_over: bool,
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
}

impl DataDirLock {
    /// Locks `data_dir` (which must exist) for this process and records
    /// this process's pid in [`LOCK_FILE`] (mode 0600). A live holder that
    /// is handing over ([`mark_handing_over`]) is waited for, up to
    /// [`HANDOVER_WAIT`]; any other live holder gets [`LockError::Held`],
    /// naming its pid, at once.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        let deadline = std::time::Instant::now() + HANDOVER_WAIT;
        let mut told = false;
        loop {
            match DataDirLock::try_acquire(data_dir) {
                Err(LockError::Held {
                    pid,
                    handing_over: true,
                    ..
                }) if std::time::Instant::now() < deadline => {
                    if !told {
                        tracing::info!(
                            pid,
                            "waiting for the previous node agent to finish handing over the data directory"
                        );
                        told = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn try_acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
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
                let (pid, handing_over) = read_holder(&mut file);
                return Err(LockError::Held {
                    dir: data_dir.to_path_buf(),
                    pid,
                    handing_over,
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
        Ok(DataDirLock { _file: file })
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
}

/// The pid written in a lock file, if it holds one, and whether its
/// holder marked itself as handing over.
fn read_holder(file: &mut File) -> (Option<u32>, bool) {
    let mut text = String::new();
    if file.seek(SeekFrom::Start(0)).is_err() || file.take(64).read_to_string(&mut text).is_err() {
        return (None, false);
    }
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|w| w.parse().ok());
    (pid, words.next() == Some(HANDOVER_MARK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_naming_the_pid_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
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
    fn a_holder_handing_over_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        mark_handing_over(dir.path()).unwrap();
        let started = std::time::Instant::now();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(first);
        });
        let _second = DataDirLock::acquire(dir.path()).expect("taken once the holder let go");
        assert!(started.elapsed() >= std::time::Duration::from_millis(300));
        releaser.join().unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(
            text.trim(),
            std::process::id().to_string(),
            "the mark is gone"
        );
    }

    #[test]
    fn a_stale_pid_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "999999\n").unwrap();
        let _lock = DataDirLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
    }
}
