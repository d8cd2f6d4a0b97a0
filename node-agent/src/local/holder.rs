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
//! agent has been connected for the grace period (`--grace`, which
//! the agent sets from its `--mount-grace`) it closes them all: the connections abort and
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
use std::time::{Duration, Instant};

use agentcomputer_handover::holder::{KeptConnection, Message, recv, send};
use agentcomputer_handover::record;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{SockFlag, accept4, getsockopt, sockopt};
use tracing::{info, warn};

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
