//! The hand-over protocol between the privileged mounter and the
//! unprivileged node agent: its messages and the agent's end (the
//! mounter's end is `agentcomputer_csi::handover`).
//!
//! # Transport
//!
//! A unix `SOCK_SEQPACKET` socket (default
//! `/var/lib/agentcomputer/run/mounter.sock`). The mounter listens
//! (`agentcomputer_csi::handover::Listener`); the agent connects ([`AgentEnd::connect`]). The mounter
//! accepts a peer only when its `SO_PEERCRED` uid equals the agent's uid
//! (`--agent-uid`; a root peer therefore only when that uid is 0) and keeps
//! one agent at a time: a newly accepted agent replaces the previous
//! connection.
//!
//! # Framing
//!
//! One message is one seqpacket record: a UTF-8 JSON object of at most
//! [`MAX_MESSAGE`] bytes (a longer record is a protocol error and ends the
//! connection). File descriptors travel as one `SCM_RIGHTS` control message
//! on the record they belong to: the requests `serve` and `resume` and the
//! reply `adopt` carry exactly one, nothing else carries any.
//! A record of length 0 is the peer closing the connection.
//!
//! # Messages
//!
//! Every message is `{"type": ..., ...}` ([`Message`]):
//!
//! 1. agent → mounter, first: `{"type":"hello","protocol":3}`.
//! 2. mounter → agent: `{"type":"welcome","protocol":N}` with the agent's
//!    version when the mounter speaks it (1, 2 or 3), or
//!    `{"type":"refused","message":...}` followed by closing (wrong uid,
//!    unsupported protocol). The agent must send `hello` within
//!    [`HELLO_TIMEOUT`].
//! 3. mounter → agent requests `{"type":"request","id":N,"request":{...}}`
//!    ([`Request`]), answered in any order by
//!    `{"type":"reply","id":N,"reply":{...}}` ([`Reply`]):
//!    * `check {volume}` → `known` | `not_found` | `error`: does the agent
//!      have this volume (asked before mounting);
//!    * `serve {volume, uid, gid, readonly, target}` + one `/dev/fuse` descriptor
//!      of a mount made for the volume → `served` once the agent answered
//!      the kernel's `FUSE_INIT` and serves the connection | `not_found` |
//!      `error`; from protocol 2 `served` carries `init`, the hex of the
//!      connection's `FUSE_INIT` request, which the mounter keeps with its
//!      duplicate of the descriptor;
//!    * `resume {volume, uid, gid, readonly, init, target}` + the mounter's kept
//!      descriptor of a live connection (protocol 2): take the connection
//!      over again (`agentcomputer_fuse::resume_connection`) → `served` |
//!      `not_found` | `error`. Sent for every published volume when a new
//!      agent process connects (a restart, or a new version);
//!    * `give {volume, target}` (protocol 3): hand back a duplicate of the
//!      connection served for `volume` at `target` → `adopt {volume, uid,
//!      gid, readonly, init}` + that descriptor | `not_found` | `error`.
//!      Sent by a restarted mounter, which holds no descriptors, for every
//!      target it finds mounted; `target` in `serve` and `resume` (protocol
//!      3, the target path as UTF-8) is how the agent tells its connections
//!      apart;
//!    * `stats {volume}` → `stats {total_bytes, used_bytes,
//!      available_bytes, total_inodes, used_inodes, available_inodes}` from
//!      the engine's counters | `not_found` | `error`.
//!
//!    The mounter waits [`CHECK_TIMEOUT`] for `check`, `give` and `stats` and
//!    [`SERVE_TIMEOUT`] for `serve`; a request that times out or whose
//!    connection ends fails with [`HandoverError`].
//!
//! # Resumption
//!
//! The mounter keeps a duplicate of every served descriptor, so a FUSE
//! connection outlives an agent restart: requests made meanwhile wait in
//! the kernel. When an agent process connects that did not serve a
//! published volume, the mounter sends it `resume` with that descriptor and
//! the `FUSE_INIT` record, and the agent serves the live connection again;
//! the kernel resends the requests the old process had read (Linux 6.9+).
//! An agent speaking protocol 1 cannot resume: the mounter then logs which
//! volumes are left without a server.
//!
//! # Adoption
//!
//! The mounter's table lives in memory. A restarted mounter finds the
//! targets still mounted (`fuse.agentcomputer`, source
//! `agentcomputer:<volume>`) and asks the agent to `give` each connection
//! back; the agent keeps a duplicate of every connection it serves for
//! this. The mounter keeps an adopted descriptor only when it is a
//! `/dev/fuse` descriptor with a live connection and the target is mounted
//! for the volume with the mode and owner the agent names
//! (`crate::adopt`), so an agent cannot plant other descriptors.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::{AsyncSeqpacket, RecordError};

/// The hand-over socket's default path.
pub const DEFAULT_SOCKET: &str = "/var/lib/agentcomputer/run/mounter.sock";

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 3;

/// The oldest protocol version both ends still accept (1 has no `resume`,
/// 2 no `give`).
pub const OLDEST_PROTOCOL: u32 = 1;

/// Largest message, in bytes of JSON.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// How long the mounter waits for an accepted peer's `hello`, and the agent
/// for the mounter's `welcome`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the mounter waits for the answer to `check`, `give` or `stats`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the mounter waits for the answer to `serve` (opening the
/// engine, if hibernated, and the `FUSE_INIT` exchange).
pub const SERVE_TIMEOUT: Duration = Duration::from_secs(30);

/// One protocol message (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Agent → mounter, first message.
    Hello {
        /// The protocol revision the agent speaks.
        protocol: u32,
    },
    /// Mounter → agent: accepted.
    Welcome {
        /// The agent's revision, which the mounter speaks too.
        protocol: u32,
    },
    /// Mounter → agent: not accepted; the mounter closes the connection.
    Refused {
        /// Why (a wrong uid, an unsupported protocol).
        message: String,
    },
    /// Mounter → agent.
    Request {
        /// Chosen by the mounter; the reply carries it back.
        id: u64,
        /// What is asked.
        request: Request,
    },
    /// Agent → mounter, answering the request with the same id.
    Reply {
        /// The id of the request answered.
        id: u64,
        /// The answer.
        reply: Reply,
    },
}

/// What the mounter asks the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Does the agent have this volume? Answer: `Known` or `NotFound`.
    Check {
        /// The CSI volume id (the computer's uid).
        volume: String,
    },
    /// Serve the FUSE connection whose descriptor comes with this message.
    /// `uid`/`gid` are the mount's owner, `readonly` whether it is mounted
    /// read-only. Answer: `Served` (after `FUSE_INIT`) or `NotFound`.
    /// `target` (protocol 3) is the mount's target path, which names the
    /// connection in a later `Give`.
    Serve {
        /// The CSI volume id (the computer's uid).
        volume: String,
        /// The mount's owning user.
        uid: u32,
        /// The mount's owning group.
        gid: u32,
        /// Whether the mount is read-only.
        readonly: bool,
        /// The mount's target path (protocol 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Take over again the live FUSE connection whose descriptor comes
    /// with this message, served before by an earlier agent process;
    /// `init` is the hex of its `FUSE_INIT` record (from `served`).
    /// Answer: `Served`, `NotFound` or `Error`. Protocol 2; `target` as in
    /// `Serve` (protocol 3).
    Resume {
        /// The CSI volume id (the computer's uid).
        volume: String,
        /// The mount's owning user.
        uid: u32,
        /// The mount's owning group.
        gid: u32,
        /// Whether the mount is read-only.
        readonly: bool,
        /// The connection's `FUSE_INIT` record, hex.
        init: String,
        /// The mount's target path (protocol 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Hand back a duplicate of the descriptor of the connection the agent
    /// serves for `volume` at `target` (the mounter restarted and holds
    /// none). Answer: `Adopt` with the descriptor, `NotFound` (no such live
    /// connection) or `Error`. Protocol 3.
    Give {
        /// The CSI volume id (the computer's uid).
        volume: String,
        /// The mount's target path.
        target: String,
    },
    /// The engine's usage counters of the volume. Answer: `Stats`.
    Stats {
        /// The CSI volume id (the computer's uid).
        volume: String,
    },
}

impl Request {
    /// The volume the request is about.
    pub fn volume(&self) -> &str {
        match self {
            Request::Check { volume }
            | Request::Serve { volume, .. }
            | Request::Resume { volume, .. }
            | Request::Give { volume, .. }
            | Request::Stats { volume } => volume,
        }
    }
}

/// Usage of one volume, from the engine's O(1) counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStats {
    /// The quota, in bytes.
    pub total_bytes: u64,
    /// Bytes held by file contents.
    pub used_bytes: u64,
    /// Quota minus used, in bytes (0 when over).
    pub available_bytes: u64,
    /// The inode quota.
    pub total_inodes: u64,
    /// Inodes in use.
    pub used_inodes: u64,
    /// Inode quota minus used.
    pub available_inodes: u64,
}

/// The agent's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Reply {
    /// `Check`: the agent has the volume.
    Known,
    /// `Serve`, `Resume`: the connection is served. `init` (protocol 2)
    /// is the hex of the connection's `FUSE_INIT` record, for `resume`.
    Served {
        /// The connection's `FUSE_INIT` record, hex (protocol 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        init: Option<String>,
    },
    /// `Stats`: the counters.
    Stats(VolumeStats),
    /// `Give`: the connection of `volume`, mounted with owner `uid`/`gid`
    /// and `readonly`, whose `FUSE_INIT` record is `init` (hex); its
    /// `/dev/fuse` descriptor comes with this record. Protocol 3.
    Adopt {
        /// The CSI volume id (the computer's uid).
        volume: String,
        /// The mount's owning user.
        uid: u32,
        /// The mount's owning group.
        gid: u32,
        /// Whether the mount is read-only.
        readonly: bool,
        /// The connection's `FUSE_INIT` record, hex.
        init: String,
    },
    /// The agent has no such volume.
    NotFound,
    /// The request failed; `message` says why.
    Error {
        /// Why, in words.
        message: String,
    },
}

/// Why a hand-over exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// No agent is connected to the mounter.
    #[error("node agent not connected")]
    NotConnected,
    /// The connection ended before the answer came.
    #[error("node agent disconnected before answering")]
    Disconnected,
    /// No answer within the timeout.
    #[error("node agent did not answer within {0:?}")]
    TimedOut(Duration),
    /// The peer broke the protocol (bad JSON, oversized or unexpected message).
    #[error("hand-over protocol error: {0}")]
    Protocol(String),
    /// The peer refused the connection.
    #[error("refused by the mounter: {0}")]
    Refused(String),
    /// A socket call failed.
    #[error("hand-over socket: {0}")]
    Io(#[from] std::io::Error),
}

impl From<RecordError> for HandoverError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Io(e) => HandoverError::Io(e),
            other => HandoverError::Protocol(other.to_string()),
        }
    }
}

/// Sends `msg` as one record, with `fd` attached when given. Errors:
/// `Protocol` past [`MAX_MESSAGE`], `Io`.
pub async fn send(
    sock: &AsyncSeqpacket,
    msg: &Message,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), HandoverError> {
    Ok(sock.send_json(msg, fd, MAX_MESSAGE).await?)
}

/// Receives one record: `Ok(None)` when the peer closed the connection.
/// Errors: `Protocol` (oversized, truncated control message, bad JSON),
/// `Io`.
pub async fn recv(sock: &AsyncSeqpacket) -> Result<Option<(Message, Vec<OwnedFd>)>, HandoverError> {
    Ok(sock.recv_json(MAX_MESSAGE).await?)
}

// ------------------------------------------------------------------ agent end

/// The agent's end of an established hand-over connection.
pub struct AgentEnd {
    sock: AsyncSeqpacket,
    protocol: u32,
}

/// One request received by the agent: answer it with [`AgentEnd::reply`].
#[derive(Debug)]
pub struct Incoming {
    /// Pass back to [`AgentEnd::reply`].
    pub id: u64,
    /// What the mounter asks.
    pub request: Request,
    /// The descriptor that came with `Serve` or `Resume` (`None` for other
    /// requests, or when the mounter sent none, which the agent must
    /// refuse).
    pub fd: Option<OwnedFd>,
}

impl AgentEnd {
    /// Connects to the mounter at `path` and exchanges `hello`/`welcome`
    /// (waiting at most [`HELLO_TIMEOUT`]). Errors: `Io` (no socket,
    /// permission), `Refused`, `TimedOut`, `Disconnected`, `Protocol`.
    pub async fn connect(path: &Path) -> Result<AgentEnd, HandoverError> {
        let sock = AsyncSeqpacket::connect(path).await?;
        let hello = send(
            &sock,
            &Message::Hello {
                protocol: PROTOCOL_VERSION,
            },
            None,
        )
        .await;
        if let Err(e) = hello {
            // A refusing mounter may have closed before the hello arrived;
            // its reason is still queued for us.
            if let Ok(Ok(Some((Message::Refused { message }, _)))) =
                tokio::time::timeout(Duration::from_millis(100), recv(&sock)).await
            {
                return Err(HandoverError::Refused(message));
            }
            return Err(e);
        }
        let answer = tokio::time::timeout(HELLO_TIMEOUT, recv(&sock))
            .await
            .map_err(|_| HandoverError::TimedOut(HELLO_TIMEOUT))??;
        match answer {
            Some((Message::Welcome { protocol }, _))
                if (OLDEST_PROTOCOL..=PROTOCOL_VERSION).contains(&protocol) =>
            {
                Ok(AgentEnd { sock, protocol })
            }
            Some((Message::Welcome { protocol }, _)) => Err(HandoverError::Protocol(format!(
                "mounter speaks protocol {protocol}, this agent {PROTOCOL_VERSION}"
            ))),
            Some((Message::Refused { message }, _)) => Err(HandoverError::Refused(message)),
            Some((other, _)) => Err(HandoverError::Protocol(format!(
                "expected welcome, got {other:?}"
            ))),
            None => Err(HandoverError::Disconnected),
        }
    }

    /// The protocol version the mounter agreed to.
    pub fn protocol(&self) -> u32 {
        self.protocol
    }

    /// The next request: `Ok(None)` when the mounter closed the connection.
    /// Errors: `Io`, `Protocol` (the connection should then be dropped).
    pub async fn next(&self) -> Result<Option<Incoming>, HandoverError> {
        match recv(&self.sock).await? {
            None => Ok(None),
            Some((Message::Request { id, request }, fds)) => {
                let mut fds = fds.into_iter();
                let fd = fds.next();
                if fds.next().is_some() {
                    return Err(HandoverError::Protocol(
                        "more than one descriptor in a request".into(),
                    ));
                }
                Ok(Some(Incoming { id, request, fd }))
            }
            Some((other, _)) => Err(HandoverError::Protocol(format!(
                "expected a request, got {other:?}"
            ))),
        }
    }

    /// Answers request `id`, with `fd` attached for `Adopt`. Safe to call
    /// from several tasks at once (each reply is one record). Errors: `Io`,
    /// `TimedOut` when the mounter has not made room in the socket within
    /// [`CHECK_TIMEOUT`].
    pub async fn reply(
        &self,
        id: u64,
        reply: Reply,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(), HandoverError> {
        tokio::time::timeout(
            CHECK_TIMEOUT,
            send(&self.sock, &Message::Reply { id, reply }, fd),
        )
        .await
        .map_err(|_| HandoverError::TimedOut(CHECK_TIMEOUT))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_documented_json_shape() {
        let m = Message::Request {
            id: 7,
            request: Request::Serve {
                volume: "v".into(),
                uid: 1000,
                gid: 1000,
                readonly: false,
                target: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"request","id":7,"request":{"op":"serve","volume":"v","uid":1000,"gid":1000,"readonly":false}}"#
        );
        let give = Message::Request {
            id: 8,
            request: Request::Give {
                volume: "v".into(),
                target: "/t".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&give).unwrap(),
            r#"{"type":"request","id":8,"request":{"op":"give","volume":"v","target":"/t"}}"#
        );
        let adopt = Message::Reply {
            id: 8,
            reply: Reply::Adopt {
                volume: "v".into(),
                uid: 1000,
                gid: 1001,
                readonly: true,
                init: "00ff".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&adopt).unwrap(),
            r#"{"type":"reply","id":8,"reply":{"result":"adopt","volume":"v","uid":1000,"gid":1001,"readonly":true,"init":"00ff"}}"#
        );
        // A protocol 2 peer's serve (no target) still parses.
        let old: Message = serde_json::from_str(
            r#"{"type":"request","id":1,"request":{"op":"resume","volume":"v","uid":1,"gid":1,"readonly":false,"init":"00"}}"#,
        )
        .unwrap();
        assert!(matches!(
            old,
            Message::Request {
                request: Request::Resume { target: None, .. },
                ..
            }
        ));
        let r = Message::Reply {
            id: 7,
            reply: Reply::Error {
                message: "x".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"type":"reply","id":7,"reply":{"result":"error","message":"x"}}"#
        );
    }

    #[tokio::test]
    async fn a_descriptor_travels_with_its_record_and_oversized_records_are_refused() {
        let (a, b) = AsyncSeqpacket::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        use std::os::fd::AsFd;
        let msg = Message::Request {
            id: 1,
            request: Request::Stats { volume: "v".into() },
        };
        send(&a, &msg, Some(file.as_fd())).await.unwrap();
        let (got, fds) = recv(&b).await.unwrap().unwrap();
        assert_eq!(got, msg);
        assert_eq!(fds.len(), 1);
        let st_sent = nix::sys::stat::fstat(file.as_fd()).unwrap();
        let st_got = nix::sys::stat::fstat(fds[0].as_fd()).unwrap();
        assert_eq!(
            (st_sent.st_dev, st_sent.st_ino),
            (st_got.st_dev, st_got.st_ino)
        );

        a.send(&vec![b'x'; MAX_MESSAGE + 1], None, 2 * MAX_MESSAGE)
            .await
            .unwrap();
        assert!(matches!(recv(&b).await, Err(HandoverError::Protocol(_))));
        a.send(b"{not json", None, MAX_MESSAGE).await.unwrap();
        assert!(matches!(recv(&b).await, Err(HandoverError::Protocol(_))));
        drop(a);
        assert!(recv(&b).await.unwrap().is_none());
    }
}
