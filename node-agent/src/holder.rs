//! The descriptor holder of local mode: a very small process that keeps a
//! duplicate of every host mount's FUSE connection, so that the mounts
//! outlive the node agent (a crash, a `kill -9`, an upgrade to a newer
//! build) and the next agent takes them over
//! (`agentcomputer_fuse::resume_connection`). It is the local counterpart
//! of the cluster's mounter, which keeps the descriptors of published
//! volumes (docs/csi.md).
//!
//! # Process
//!
//! `node-agent fuse-holder --socket <data-dir>/fuse-holder.sock`, started
//! by the agent when none answers, in a session of its own (so that a
//! signal to the agent's process group spares it). It never reads or
//! writes a FUSE descriptor and never opens a database: it only holds
//! descriptors and hands duplicates back. It drops a descriptor when its
//! connection ends (the device reports `POLLERR`: unmounted), and when no
//! agent has been connected for the grace period (`--grace`, default
//! [`DEFAULT_GRACE`]) it closes them all: the connections abort and
//! processes using those mounts get `ENOTCONN` instead of waiting forever.
//! It exits when it holds nothing and no agent is connected. An agent
//! whose holder dies starts a new one and hands it its connections again
//! (`Registry::watch_holder`).
//!
//! # Protocol
//!
//! `agentcomputer_handover::holder`: one agent at a time; a new connection
//! replaces the previous one only once the previous agent's connection is
//! closed (a second one while it is open is refused); a peer whose
//! `SO_PEERCRED` uid differs from the holder's is refused.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentcomputer_handover::holder::{KeptConnection, Message, recv, send};
use agentcomputer_handover::record;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{SockFlag, accept4, getsockopt, sockopt};
use tracing::{info, warn};

/// File name of the holder's socket inside the data directory.
pub const SOCKET_FILE: &str = "fuse-holder.sock";

/// How long the holder keeps connections with no agent connected.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

// ------------------------------------------------------------ the process

/// Runs the holder on `socket` until it holds nothing and no agent is
/// connected (or after closing everything at the end of `grace`).
/// Errors: binding the socket.
pub fn run(socket_path: &Path, grace: Duration) -> io::Result<()> {
    let _ = std::fs::remove_file(socket_path);
    let listener = record::listen_blocking(socket_path, 4)?;
    std::fs::set_permissions(
        socket_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    info!(socket = %socket_path.display(), ?grace, "FUSE descriptor holder serving");
    let me = nix::unistd::geteuid().as_raw();
    let mut held: HashMap<PathBuf, (KeptConnection, OwnedFd)> = HashMap::new();
    let mut agent: Option<OwnedFd> = None;
    let mut agent_pid: Option<i32> = None;
    let mut alone_since = Some(Instant::now());
    loop {
        // Which held connections ended: POLLERR with no events asked for.
        let keys: Vec<PathBuf> = held.keys().cloned().collect();
        let mut fds: Vec<PollFd<'_>> = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        if let Some(a) = &agent {
            fds.push(PollFd::new(a.as_fd(), PollFlags::POLLIN));
        }
        let first_held = fds.len();
        for k in &keys {
            fds.push(PollFd::new(held[k].1.as_fd(), PollFlags::empty()));
        }
        let wait = match alone_since {
            Some(t) => grace
                .saturating_sub(t.elapsed())
                .min(Duration::from_secs(1)),
            None => Duration::from_secs(1),
        };
        match poll(
            &mut fds,
            PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let revents: Vec<PollFlags> = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()))
            .collect();
        drop(fds);
        for (i, k) in keys.iter().enumerate() {
            if revents[first_held + i].intersects(PollFlags::POLLERR | PollFlags::POLLHUP) {
                info!(path = %k.display(), "held FUSE connection ended (unmounted); dropped");
                held.remove(k);
            }
        }
        if revents[0].contains(PollFlags::POLLIN) {
            match accept4(&listener, SockFlag::SOCK_CLOEXEC) {
                Ok(conn) => match getsockopt(&conn, sockopt::PeerCredentials) {
                    // While the connected agent's connection is open, no one
                    // else takes its place (a stray client of the same user
                    // would cut the agent off its mounts). A dead agent's
                    // socket is closed at its exit, zombie or not.
                    Ok(c) if c.uid() == me && agent.as_ref().is_some_and(|a| !hung_up(a)) => {
                        warn!(pid = c.pid(), agent = ?agent_pid, "refused a second connection while the node agent is connected");
                    }
                    Ok(c) if c.uid() == me => {
                        if agent.replace(conn).is_some() {
                            info!("a new node agent connection replaces the previous one");
                        }
                        agent_pid = Some(c.pid());
                        info!(pid = c.pid(), "node agent connected");
                        alone_since = None;
                    }
                    Ok(c) => warn!(uid = c.uid(), "refused a peer of another uid"),
                    Err(e) => warn!(error = %e, "cannot read a peer's credentials"),
                },
                Err(e) => warn!(error = %e, "accept failed"),
            }
        } else if agent.is_some() && revents.get(1).is_some_and(|r| !r.is_empty()) {
            let a = agent.take().expect("checked");
            match serve_one(a.as_fd(), &mut held) {
                Ok(true) => agent = Some(a),
                Ok(false) => {
                    info!(held = held.len(), "node agent disconnected");
                    alone_since = Some(Instant::now());
                }
                Err(e) => {
                    warn!(error = %e, "node agent connection failed");
                    alone_since = Some(Instant::now());
                }
            }
        }
        if let Some(t) = alone_since {
            if held.is_empty() {
                info!("nothing held and no node agent: exiting");
                break;
            }
            if t.elapsed() >= grace {
                let paths: Vec<String> = held.keys().map(|p| p.display().to_string()).collect();
                warn!(mounts = %paths.join(", "), ?grace, "no node agent came back: closing the held connections (their mounts fail with ENOTCONN until mounted again or unmounted)");
                held.clear();
                break;
            }
        }
    }
    let _ = std::fs::remove_file(socket_path);
    Ok(())
}

/// Whether the peer of the connected socket `fd` has closed it.
fn hung_up(fd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .unwrap_or(PollFlags::empty())
            .intersects(PollFlags::POLLHUP | PollFlags::POLLERR),
        Err(_) => true,
    }
}

/// Answers one record of the agent; false when it closed the connection.
fn serve_one(
    agent: BorrowedFd<'_>,
    held: &mut HashMap<PathBuf, (KeptConnection, OwnedFd)>,
) -> io::Result<bool> {
    let Some((msg, fd)) = recv(agent)? else {
        return Ok(false);
    };
    match (msg, fd) {
        (Message::Keep(h), Some(fd)) => {
            info!(path = %h.path.display(), computer = %h.computer, "holding a FUSE connection");
            held.insert(h.path.clone(), (h, fd));
            send(agent, &Message::Ok, None)?;
        }
        (Message::Drop { path }, None) => {
            held.remove(&path);
            send(agent, &Message::Ok, None)?;
        }
        (Message::List, None) => {
            for (h, fd) in held.values() {
                send(agent, &Message::Entry(h.clone()), Some(fd.as_fd()))?;
            }
            send(agent, &Message::End, None)?;
        }
        (other, _) => {
            send(
                agent,
                &Message::Error {
                    message: format!("unexpected record {other:?}"),
                },
                None,
            )?;
        }
    }
    Ok(true)
}

// ------------------------------------------------------------- the agent

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
        *self.sock.lock().unwrap_or_else(|p| p.into_inner()) = sock;
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
        let dup = self
            .sock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_clone();
        let sock = match dup {
            Ok(sock) => sock,
            // No descriptor to spare (EMFILE, ENFILE): that says nothing
            // about the holder. Look at the link itself without waiting,
            // under the lock, then wait without it.
            Err(e) if is_descriptor_shortage(&e) => {
                let broken = {
                    let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
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
        let path = data_dir.join(SOCKET_FILE);
        if let Ok(c) = Client::connect(&path) {
            return Ok(c);
        }
        let log = crate::private::create_file(&data_dir.join("fuse-holder.log"))?;
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
                    data_dir.join("fuse-holder.log").display()
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
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
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
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
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
