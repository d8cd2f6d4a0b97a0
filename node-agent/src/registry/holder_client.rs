//! The agent's side of the link to its descriptor holder (local mode; the
//! holder process is [`crate::local::holder`], the protocol
//! `agentcomputer_handover::holder`): hand it duplicates of host mount
//! connections, take them back after a restart, and notice when it dies.

use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentcomputer_handover::holder::{KeptConnection, Message, recv, send};
use agentcomputer_handover::record;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// The agent's connection to its holder. Calls are short and blocking;
/// one at a time. When the holder dies (the link breaks,
/// [`Client::wait_broken`]), [`Client::restart`] starts a new one and
/// connects to it; the caller then hands it its connections again.
pub struct Client {
    sock: Mutex<OwnedFd>,
    /// How to start a holder: data directory, executable, grace.
    start: (PathBuf, PathBuf, Duration),
}

impl Client {
    /// Connects to the holder of `data_dir`, starting one (`exe
    /// fuse-holder`, the node agent's executable, in its own session, logging to
    /// `<data_dir>/fuse-holder.log`) when none answers. Errors: starting
    /// it, or no socket within 5 s.
    pub fn connect_or_start(data_dir: &Path, exe: &Path, grace: Duration) -> io::Result<Client> {
        let sock = Client::connect_or_spawn(data_dir, exe, grace)?;
        Ok(Client {
            sock: Mutex::new(sock),
            start: (data_dir.to_path_buf(), exe.to_path_buf(), grace),
        })
    }

    /// Connects to a holder again after the link broke, starting a new one
    /// as [`Client::connect_or_start`] does, and uses that connection for
    /// later calls. The new holder holds nothing: the caller `keep`s its
    /// connections again. Errors: as [`Client::connect_or_start`].
    pub fn restart(&self) -> io::Result<()> {
        let (data_dir, exe, grace) = &self.start;
        let sock = Client::connect_or_spawn(data_dir, exe, *grace)?;
        *self.sock.lock() = sock;
        Ok(())
    }

    /// Waits up to `timeout` for the link to the holder to break (the
    /// holder closed it or died: `POLLHUP`/`POLLERR` on the socket; the
    /// holder never ends the link of a connected agent otherwise).
    /// Returns whether it broke. Without a descriptor to spare for the
    /// duplicate it waits on, it checks the link without waiting and then
    /// sleeps `timeout`. Errors: duplicating the socket, `poll(2)`.
    pub fn wait_broken(&self, timeout: Duration) -> io::Result<bool> {
        // A duplicate, so that calls are not held up while this waits.
        let dup = self.sock.lock().try_clone();
        let sock = match dup {
            Ok(sock) => sock,
            // No descriptor to spare (EMFILE, ENFILE): that says nothing
            // about the holder. Look at the link itself without waiting,
            // under the lock, then wait without it.
            Err(e) if is_descriptor_shortage(&e) => {
                let broken = {
                    let sock = self.sock.lock();
                    link_broken(sock.as_fd(), PollTimeout::ZERO)?
                };
                if !broken {
                    std::thread::sleep(timeout);
                }
                return Ok(broken);
            }
            Err(e) => return Err(e),
        };
        link_broken(
            sock.as_fd(),
            PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX),
        )
    }

    /// A connected socket to the holder of `data_dir`, starting one when
    /// none answers.
    fn connect_or_spawn(data_dir: &Path, exe: &Path, grace: Duration) -> io::Result<OwnedFd> {
        let path = data_dir.join(crate::layout::HOLDER_SOCKET_FILE);
        if let Ok(c) = Client::connect(&path) {
            return Ok(c);
        }
        let log = crate::private::create_file(&data_dir.join(crate::layout::HOLDER_LOG_FILE))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("fuse-holder")
            .arg("--socket")
            .arg(&path)
            .arg("--grace")
            .arg(format!("{}s", grace.as_secs().max(1)))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Its own session: signals to the agent's process group or from
        // its terminal do not reach it.
        // SAFETY: setsid(2) is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(c) = Client::connect(&path) {
                // Reaped by init once this process exits; a zombie until then
                // only if it ends first, which try_wait collects.
                std::thread::spawn(move || child.wait());
                return Ok(c);
            }
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "the FUSE descriptor holder exited ({status}); see {}",
                    data_dir.join(crate::layout::HOLDER_LOG_FILE).display()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the FUSE descriptor holder did not open its socket within 5 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn connect(path: &Path) -> io::Result<OwnedFd> {
        record::connect_blocking(path)
    }

    fn call(&self, msg: &Message, with: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let sock = self.sock.lock();
        send(sock.as_fd(), msg, with)?;
        match recv(sock.as_fd())? {
            Some((Message::Ok, _)) => Ok(()),
            Some((Message::Error { message }, _)) => Err(io::Error::other(message)),
            Some((other, _)) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected answer {other:?}"),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the holder closed the connection",
            )),
        }
    }

    /// Hands a duplicate of connection `fd` (mounted at `held.path`) to the
    /// holder. Errors: the socket's.
    pub fn keep(&self, held: &KeptConnection, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.call(&Message::Keep(held.clone()), Some(fd))
    }

    /// Tells the holder to let the connection at `path` go (unmounted).
    pub fn drop_path(&self, path: &Path) -> io::Result<()> {
        self.call(
            &Message::Drop {
                path: path.to_path_buf(),
            },
            None,
        )
    }

    /// Every held connection, each with a duplicate of its descriptor.
    pub fn list(&self) -> io::Result<Vec<(KeptConnection, OwnedFd)>> {
        let sock = self.sock.lock();
        send(sock.as_fd(), &Message::List, None)?;
        let mut out = Vec::new();
        loop {
            match recv(sock.as_fd())? {
                Some((Message::Entry(h), Some(fd))) => out.push((h, fd)),
                Some((Message::End, _)) => return Ok(out),
                Some((other, _)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected answer {other:?}"),
                    ));
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the holder closed the connection",
                    ));
                }
            }
        }
    }
}

/// Whether `fd` reports a hang-up or error within `wait`.
fn link_broken(fd: BorrowedFd<'_>, wait: PollTimeout) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    match poll(&mut fds, wait) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(fds[0]
        .revents()
        .unwrap_or(PollFlags::empty())
        .intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// Whether `e` is the process or the system running out of descriptors
/// (`EMFILE`, `ENFILE`): a shortage, not a fault of what was asked.
pub fn is_descriptor_shortage(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// With no descriptor to spare (soft `RLIMIT_NOFILE` at the lowest
    /// free descriptor), watching the link still tells a live holder from
    /// a gone one instead of failing with `EMFILE`. Runs in a forked child:
    /// the limit is the process's.
    #[test]
    fn the_link_is_watched_without_a_spare_descriptor() {
        use nix::sys::wait::{WaitStatus, waitpid};
        use nix::unistd::{ForkResult, fork};
        let (ours, holders) = std::os::unix::net::UnixStream::pair().unwrap();
        let client = Client {
            sock: Mutex::new(OwnedFd::from(ours)),
            start: (PathBuf::new(), PathBuf::new(), Duration::from_secs(1)),
        };
        // SAFETY: the child only makes system calls on descriptors it
        // already has and exits without returning to the test harness.
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                let lowest_free = std::fs::File::open("/dev/null").unwrap();
                let limit = lowest_free.as_raw_fd() as u64;
                drop(lowest_free);
                let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
                rlimit::setrlimit(rlimit::Resource::NOFILE, limit, hard).unwrap();
                let code = match client.wait_broken(Duration::from_millis(50)) {
                    Ok(false) => {
                        drop(holders);
                        match client.wait_broken(Duration::from_millis(50)) {
                            Ok(true) => 0,
                            Ok(false) => 3,
                            Err(_) => 4,
                        }
                    }
                    Ok(true) => 1,
                    Err(e) if is_emfile(&e) => 2,
                    Err(_) => 5,
                };
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => {
                drop(holders);
                let status = waitpid(child, None).unwrap();
                assert_eq!(
                    status,
                    WaitStatus::Exited(child, 0),
                    "exit 2: EMFILE from watching the link; 1: a live link taken for broken; 3, 4: a closed link not seen"
                );
            }
        }
    }

    fn is_emfile(e: &io::Error) -> bool {
        e.raw_os_error() == Some(nix::libc::EMFILE)
    }
}
