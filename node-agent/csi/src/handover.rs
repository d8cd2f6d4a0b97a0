//! The mounter's end of the hand-over link to the node agent: it listens,
//! admits one agent at a time and sends it requests. The messages, the
//! framing and the agent's end are `agentcomputer_handover::mounter`,
//! whose documentation describes the whole protocol.

use parking_lot::Mutex;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use agentcomputer_handover::mounter::{
    CHECK_TIMEOUT, DEFAULT_SOCKET, HELLO_TIMEOUT, HandoverError, MAX_MESSAGE, Message,
    OLDEST_PROTOCOL, PROTOCOL_VERSION, Reply, Request, SERVE_TIMEOUT, VolumeStats,
};
use agentcomputer_handover::mounter::{recv, send};
use agentcomputer_handover::record::{AsyncSeqpacket, AsyncSeqpacketListener};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

// ---------------------------------------------------------------- mounter end

/// How long a refused peer gets to read the refusal and close.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// Sends `refused` and waits (at most [`REFUSE_LINGER`]) for the peer to
/// close, reading what it sent: closing a unix socket with unread data
/// resets the connection, and the peer would see `ECONNRESET` instead of
/// the reason.
async fn refuse(sock: &AsyncSeqpacket, message: String) {
    if send(sock, &Message::Refused { message }, None)
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        while let Ok(Some(_)) = recv(sock).await {}
    })
    .await;
}

/// The mounter's end: listens for the agent and sends it requests.
pub struct Listener {
    listener: AsyncSeqpacketListener,
    agent_uid: u32,
    current: Mutex<Option<Arc<AgentConn>>>,
    /// Called with the process id of each newly accepted agent.
    on_connect: Box<dyn Fn(Option<i32>) + Send + Sync>,
}

/// Where a reply and the descriptors that came with it go.
type ReplySender = oneshot::Sender<(Reply, Vec<OwnedFd>)>;

/// One accepted agent connection (mounter side).
pub struct AgentConn {
    sock: AsyncSeqpacket,
    pending: Mutex<std::collections::HashMap<u64, ReplySender>>,
    next_id: AtomicU64,
    closed: CancellationToken,
    pid: Option<i32>,
    protocol: u32,
}

impl Listener {
    /// Binds the hand-over socket at `path` (a stale socket file there is
    /// removed first), mode 0600 owned by `agent_uid:agent_gid` so that
    /// only the agent (and root) can connect. `on_connect` runs each time
    /// an agent is accepted, with its process id (`SO_PEERCRED`, in the
    /// mounter's pid namespace). Errors: the `bind(2)`/`chown(2)` error.
    pub fn bind(
        path: &Path,
        agent_uid: u32,
        agent_gid: u32,
        on_connect: Box<dyn Fn(Option<i32>) + Send + Sync>,
    ) -> std::io::Result<Listener> {
        crate::sockets::remove_stale(path)?;
        let listener = AsyncSeqpacketListener::bind(path)?;
        crate::sockets::restrict(path, Some((agent_uid, agent_gid)))?;
        Ok(Listener {
            listener,
            agent_uid,
            current: Mutex::new(None),
            on_connect,
        })
    }

    /// The connected agent, if any.
    pub fn agent(&self) -> Option<Arc<AgentConn>> {
        self.current
            .lock()
            .as_ref()
            .filter(|c| !c.closed.is_cancelled())
            .cloned()
    }

    /// Whether an agent is connected now.
    pub fn is_connected(&self) -> bool {
        self.agent().is_some()
    }

    /// Accepts agents until `stop` is cancelled. Each accepted peer is
    /// checked (uid, `hello`) on its own task, so a silent peer cannot hold
    /// up the next one.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let sock = tokio::select! {
                _ = stop.cancelled() => break,
                r = self.listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        warn!(error = %e, "accepting on the hand-over socket failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let this = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move { this.admit(sock, stop).await });
        }
        if let Some(c) = self.current.lock().take() {
            c.closed.cancel();
        }
    }

    async fn admit(self: Arc<Self>, sock: AsyncSeqpacket, stop: CancellationToken) {
        let peer = match sock.peer_credentials() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read the hand-over peer's credentials; closing");
                return;
            }
        };
        // Pid 0: an agent in a pid namespace the mounter cannot see, as
        // in a pod; two such agents must not look like the same process.
        let pid = agentcomputer_handover::record::visible_pid(peer.pid());
        if peer.uid() != self.agent_uid {
            let message = format!(
                "peer uid {} is not the node agent's uid {}",
                peer.uid(),
                self.agent_uid
            );
            warn!(pid = ?pid, "hand-over connection refused: {message}");
            refuse(&sock, message).await;
            return;
        }
        let hello = tokio::time::timeout(HELLO_TIMEOUT, recv(&sock)).await;
        let protocol = match hello {
            Ok(Ok(Some((Message::Hello { protocol }, _)))) => protocol,
            Ok(Ok(Some((other, _)))) => {
                warn!(message = ?other, "hand-over peer did not start with hello; closing");
                return;
            }
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                warn!(error = %e, "hand-over peer failed before hello; closing");
                return;
            }
            Err(_) => {
                warn!(timeout = ?HELLO_TIMEOUT, "hand-over peer sent no hello; closing");
                return;
            }
        };
        if !(OLDEST_PROTOCOL..=PROTOCOL_VERSION).contains(&protocol) {
            let message = format!(
                "protocol {protocol} is not supported; this mounter speaks {OLDEST_PROTOCOL} to {PROTOCOL_VERSION}"
            );
            warn!("hand-over connection refused: {message}");
            refuse(&sock, message).await;
            return;
        }
        if let Err(e) = send(&sock, &Message::Welcome { protocol }, None).await {
            warn!(error = %e, "hand-over welcome failed; closing");
            return;
        }
        let conn = Arc::new(AgentConn {
            sock,
            pending: Mutex::new(Default::default()),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            pid,
            protocol,
        });
        let previous = self.current.lock().replace(conn.clone());
        if let Some(p) = previous {
            info!("a new node agent connection replaces the previous one");
            p.closed.cancel();
        }
        info!(pid = ?pid, uid = peer.uid(), "node agent connected");
        (self.on_connect)(pid);
        conn.read_replies(stop).await;
        info!("node agent disconnected");
    }
}

impl AgentConn {
    /// The agent's process id (`SO_PEERCRED`), if the kernel reported one.
    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    /// The protocol version agreed with this agent.
    pub fn protocol(&self) -> u32 {
        self.protocol
    }

    /// Reads replies and hands them to the waiting requests until the
    /// connection ends (EOF, error, replaced, or `stop`).
    async fn read_replies(&self, stop: CancellationToken) {
        loop {
            let r = tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.closed.cancelled() => break,
                r = recv(&self.sock) => r,
            };
            match r {
                Ok(Some((Message::Reply { id, reply }, fds))) => {
                    // Descriptors go to the request; unused ones are closed.
                    match self.pending.lock().remove(&id) {
                        Some(tx) => {
                            let _ = tx.send((reply, fds));
                        }
                        None => warn!(id, "reply to no pending request (timed out?)"),
                    }
                }
                Ok(Some((other, _))) => {
                    warn!(message = ?other, "unexpected message from the node agent; closing");
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(error = %e, "hand-over connection failed");
                    break;
                }
            }
        }
        self.closed.cancel();
        // Waiting requests fail with `Disconnected`.
        self.pending.lock().clear();
    }

    /// Sends `request` (with `fd` for `Serve` and `Resume`) and waits up
    /// to `timeout` for its reply. A descriptor that comes with the reply
    /// is closed (logged). Errors: `Disconnected`, `TimedOut`, `Io`,
    /// `Protocol`.
    pub async fn request(
        &self,
        request: Request,
        fd: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> Result<Reply, HandoverError> {
        let (reply, fds) = self.exchange(request, fd, timeout).await?;
        if !fds.is_empty() {
            warn!(reply = ?reply, "the node agent sent descriptors with a reply that takes none; closed them");
        }
        Ok(reply)
    }

    /// Sends `request` (`Give`) and waits up to `timeout` for its reply and
    /// the descriptors that came with it (the caller checks how many).
    /// Errors: as [`AgentConn::request`].
    pub async fn request_descriptor(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<(Reply, Vec<OwnedFd>), HandoverError> {
        self.exchange(request, None, timeout).await
    }

    async fn exchange(
        &self,
        request: Request,
        fd: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> Result<(Reply, Vec<OwnedFd>), HandoverError> {
        if self.closed.is_cancelled() {
            return Err(HandoverError::Disconnected);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        // The timeout covers the send too: a peer that stops reading fills
        // the socket's buffer.
        let exchange = async {
            send(&self.sock, &Message::Request { id, request }, fd).await?;
            rx.await.map_err(|_| HandoverError::Disconnected)
        };
        let result = tokio::select! {
            r = exchange => r,
            _ = tokio::time::sleep(timeout) => Err(HandoverError::TimedOut(timeout)),
            _ = self.closed.cancelled() => Err(HandoverError::Disconnected),
        };
        self.pending.lock().remove(&id);
        result
    }
}
