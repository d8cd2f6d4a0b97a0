//! The protocol between the node agent and its descriptor holder in local
//! mode (the holder process itself is the agent's `fuse-holder`
//! subcommand, docs/fuse.md).
//!
//! A unix `SOCK_SEQPACKET` socket, mode 0600 in the private data
//! directory; one JSON object per record ([`Message`]); a descriptor
//! travels as `SCM_RIGHTS` on the record it belongs to ([`crate::record`]):
//! * `keep {path, computer, init[, dev]}` + descriptor → `ok`: hold it
//!   (`path` is the key; a second `keep` for a path replaces the first);
//! * `drop {path}` → `ok`;
//! * `list` → one `entry {path, computer, init[, dev]}` + a duplicate
//!   descriptor per kept connection, then `end`.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::record::{self, RecordError};

/// Largest record, in bytes of JSON (an `init` record is at most 8 KiB of
/// hex).
pub const MAX_MESSAGE: usize = 64 * 1024;

/// One record of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Message {
    /// Agent → holder, with a descriptor.
    Keep(KeptConnection),
    /// Agent → holder: stop keeping a connection.
    Drop {
        /// The host directory it is mounted at, as in its `keep`.
        path: PathBuf,
    },
    /// Agent → holder.
    List,
    /// Holder → agent, with a descriptor (answering `list`).
    Entry(KeptConnection),
    /// Holder → agent: the end of a `list`.
    End,
    /// Holder → agent: `keep` or `drop` done.
    Ok,
    /// Holder → agent: the request failed.
    Error {
        /// Why, in words.
        message: String,
    },
}

/// What the holder knows of one connection it keeps for the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptConnection {
    /// The host directory the connection is mounted at (the key).
    pub path: PathBuf,
    /// The computer it serves.
    pub computer: String,
    /// The connection's `FUSE_INIT` record ([`crate::init`]).
    pub init: String,
    /// The mount's device (`st_dev`), by which the next agent finds the
    /// mount's root again without following the path
    /// (`agentcomputer_fuse::find_mount_root`); absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<u64>,
}

/// Sends `msg` on the blocking socket `sock`, with `fd` when given.
pub fn send(
    sock: BorrowedFd<'_>,
    msg: &Message,
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    Ok(record::send_json(sock, msg, fd, MAX_MESSAGE)?)
}

/// Receives one record from the blocking socket `sock`: `None` at the end
/// of the connection. Errors (`InvalidData`): an oversized or malformed
/// record, more than one descriptor.
pub fn recv(sock: BorrowedFd<'_>) -> std::io::Result<Option<(Message, Option<OwnedFd>)>> {
    let Some((msg, fds)) = record::recv_json(sock, MAX_MESSAGE)? else {
        return Ok(None);
    };
    let mut fds = fds.into_iter();
    let fd = fds.next();
    if fds.next().is_some() {
        return Err(RecordError::ControlTruncated.into());
    }
    Ok(Some((msg, fd)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn records_have_the_documented_json_shape() {
        let keep = Message::Keep(KeptConnection {
            path: "/m".into(),
            computer: "demo".into(),
            init: "28".into(),
            dev: None,
        });
        assert_eq!(
            serde_json::to_string(&keep).unwrap(),
            r#"{"op":"keep","path":"/m","computer":"demo","init":"28"}"#
        );
        assert_eq!(
            serde_json::to_string(&Message::End).unwrap(),
            r#"{"op":"end"}"#
        );
    }

    #[test]
    fn a_kept_connection_travels_with_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sock");
        let listener = record::listen_blocking(&path, 1).unwrap();
        let agent = record::connect_blocking(&path).unwrap();
        let holder =
            nix::sys::socket::accept4(&listener, nix::sys::socket::SockFlag::SOCK_CLOEXEC).unwrap();
        let file = tempfile::tempfile().unwrap();
        let kept = KeptConnection {
            path: "/m".into(),
            computer: "demo".into(),
            init: "28".into(),
            dev: Some(7),
        };
        send(
            agent.as_fd(),
            &Message::Keep(kept.clone()),
            Some(file.as_fd()),
        )
        .unwrap();
        let (msg, fd) = recv(holder.as_fd()).unwrap().unwrap();
        assert_eq!(msg, Message::Keep(kept));
        assert!(fd.is_some());
        drop(agent);
        assert!(recv(holder.as_fd()).unwrap().is_none());
    }
}
