//! One record with its descriptors over a unix `SOCK_SEQPACKET` socket.
//!
//! A record is one `sendmsg(2)`: its bytes (a JSON object in both
//! protocols) and, as one `SCM_RIGHTS` control message, the descriptors
//! that belong to it. A record of length 0 is the peer closing the
//! connection (its descriptors, if any, are closed). Receiving refuses
//! what would otherwise be silently cut: bytes beyond the record limit
//! (`MSG_TRUNC`) and descriptors beyond the control buffer (`MSG_CTRUNC`,
//! whose descriptors the kernel closes).
//!
//! [`send`] and [`recv`] block on a blocking socket (the holder's single
//! thread and the agent's short calls to it); [`AsyncSeqpacket`] does the
//! same on tokio (the mounter's link).

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr,
    UnixCredentials, accept4, bind, connect, getsockopt, listen, sendmsg, socket, socketpair,
    sockopt,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::unix::AsyncFd;

/// Most descriptors one record may carry (both protocols send one).
pub const MAX_FDS: usize = 4;

/// Why a record could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record is longer than the limit (`max` bytes).
    #[error("record larger than {max} bytes")]
    TooLarge {
        /// The limit, in bytes.
        max: usize,
    },
    /// More descriptors came than a record may carry; the kernel closed
    /// the extra ones.
    #[error("more than {MAX_FDS} descriptors in one record (control message truncated)")]
    ControlTruncated,
    /// The record is not the JSON message expected.
    #[error("bad record: {0}")]
    BadJson(#[from] serde_json::Error),
    /// A socket call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<nix::Error> for RecordError {
    fn from(e: nix::Error) -> Self {
        RecordError::Io(e.into())
    }
}

impl From<RecordError> for io::Error {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        }
    }
}

/// One received record.
#[derive(Debug)]
pub struct Record {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The descriptors that came with it (close-on-exec).
    pub fds: Vec<OwnedFd>,
}

/// Sends `bytes` as one record on `sock`, with `fd` attached when given.
/// `flags` adds to `MSG_NOSIGNAL` (`MSG_DONTWAIT` on a blocking socket).
/// Errors: `TooLarge` past `max` bytes or for an empty record (which
/// would read as the end of the connection), `Io`.
pub fn send(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fd: Option<BorrowedFd<'_>>,
    max: usize,
    flags: MsgFlags,
) -> Result<(), RecordError> {
    if bytes.is_empty() || bytes.len() > max {
        return Err(RecordError::TooLarge { max });
    }
    let raw = fd.map(|f| [f.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage<'_>> = raw.iter().map(|f| ControlMessage::ScmRights(f)).collect();
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(bytes)],
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL | flags,
        None,
    )?;
    Ok(())
}

/// Receives one record of at most `max` bytes: `Ok(None)` when the peer
/// closed the connection. Errors: `TooLarge`, `ControlTruncated`, `Io`
/// (`WouldBlock` with `MSG_DONTWAIT` and nothing queued). Descriptors of
/// a refused record are closed.
pub fn recv(
    sock: BorrowedFd<'_>,
    max: usize,
    flags: MsgFlags,
) -> Result<Option<Record>, RecordError> {
    // One byte more than allowed tells an oversized record from a full one.
    let mut buf = vec![0u8; max + 1];
    // u64 words keep the control buffer aligned for `cmsghdr`.
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no buffers yet).
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = CONTROL_BYTES as _;
    // SAFETY: `hdr` points at `iov` (into `buf`) and `control`, which
    // outlive the call; the lengths given are theirs.
    let len = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut hdr,
            libc::MSG_CMSG_CLOEXEC | flags.bits(),
        )
    };
    if len < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // Every descriptor the kernel installed is taken, so that none leaks
    // whatever is wrong with the record (nix refuses to parse a truncated
    // control message, whose descriptors the kernel did install).
    let mut fds = Vec::new();
    // SAFETY: `hdr` is the header recvmsg filled; the CMSG macros stay
    // within `msg_control`/`msg_controllen`, which the kernel set.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = c.cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
        }
    }
    let len = len as usize;
    if len == 0 {
        return Ok(None);
    }
    if len > max || hdr.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(RecordError::TooLarge { max });
    }
    if hdr.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(RecordError::ControlTruncated);
    }
    buf.truncate(len);
    Ok(Some(Record { bytes: buf, fds }))
}

/// Room for the control message of [`MAX_FDS`] descriptors
/// (`CMSG_SPACE`: a 16-byte header and the descriptors, 8-byte aligned),
/// in bytes and in aligned words.
const CONTROL_BYTES: usize = 16 + 8 * MAX_FDS.div_ceil(2);
const CONTROL_WORDS: usize = CONTROL_BYTES / 8;

/// Sends `msg` as one JSON record (see [`send`]).
pub fn send_json<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
    max: usize,
) -> Result<(), RecordError> {
    send(sock, &serde_json::to_vec(msg)?, fd, max, MsgFlags::empty())
}

/// Receives one JSON record (see [`recv`]): `Ok(None)` at the end of the
/// connection. Errors: as [`recv`], and `BadJson`.
pub fn recv_json<T: DeserializeOwned>(
    sock: BorrowedFd<'_>,
    max: usize,
) -> Result<Option<(T, Vec<OwnedFd>)>, RecordError> {
    decode(recv(sock, max, MsgFlags::empty())?)
}

fn decode<T: DeserializeOwned>(
    record: Option<Record>,
) -> Result<Option<(T, Vec<OwnedFd>)>, RecordError> {
    match record {
        None => Ok(None),
        Some(r) => Ok(Some((serde_json::from_slice(&r.bytes)?, r.fds))),
    }
}

/// A new blocking, close-on-exec `SOCK_SEQPACKET` socket.
pub fn seqpacket() -> io::Result<OwnedFd> {
    Ok(socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// A blocking socket connected to the listener at `path`.
pub fn connect_blocking(path: &Path) -> io::Result<OwnedFd> {
    let sock = seqpacket()?;
    connect(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
    Ok(sock)
}

/// Binds and listens on `path` (blocking socket). The caller removes a
/// stale socket file first and sets the file's mode and owner.
pub fn listen_blocking(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    let sock = seqpacket()?;
    bind(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
    listen(&sock, Backlog::new(backlog).map_err(io::Error::from)?)?;
    Ok(sock)
}

/// The credentials (`SO_PEERCRED`) of the peer of a connected socket.
pub fn peer_credentials(sock: BorrowedFd<'_>) -> io::Result<UnixCredentials> {
    Ok(getsockopt(&sock, sockopt::PeerCredentials)?)
}

/// Registers `fd` with tokio's reactor. Errors: the registration's.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns `fd`, which stays open and the same
    // descriptor until the `AsyncFd` is dropped (an `OwnedFd`'s raw
    // descriptor never changes).
    unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

/// A pid from `SO_PEERCRED`, `None` for 0 (`unix(7)`: the peer's pid in
/// the receiver's pid namespace, 0 when it has none there).
pub fn visible_pid(pid: i32) -> Option<i32> {
    (pid > 0).then_some(pid)
}

/// A `SOCK_SEQPACKET` socket on tokio: [`send`] and [`recv`] without
/// blocking a runtime thread. Sending and receiving may run at once from
/// different tasks (each record is one system call).
#[derive(Debug)]
pub struct AsyncSeqpacket {
    fd: AsyncFd<OwnedFd>,
}

/// How long [`AsyncSeqpacket::connect`] retries while the listener's
/// backlog is full before giving up.
const CONNECT_RETRY: Duration = Duration::from_secs(5);

impl AsyncSeqpacket {
    /// Wraps a non-blocking socket. Errors: registering it with tokio.
    fn new(fd: OwnedFd) -> io::Result<AsyncSeqpacket> {
        Ok(AsyncSeqpacket { fd: register(fd)? })
    }

    /// Connects to the listener at `path`. A full backlog (`EAGAIN`) is
    /// retried for up to 5 s. Errors: `connect(2)`'s (`ENOENT`,
    /// `ECONNREFUSED`, `EACCES`).
    pub async fn connect(path: &Path) -> io::Result<AsyncSeqpacket> {
        let sock = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )?;
        let addr = UnixAddr::new(path)?;
        let deadline = tokio::time::Instant::now() + CONNECT_RETRY;
        loop {
            match connect(sock.as_raw_fd(), &addr) {
                Ok(()) => return AsyncSeqpacket::new(sock),
                Err(nix::errno::Errno::EAGAIN) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A connected pair (tests, and processes handing one end to a child).
    pub fn pair() -> io::Result<(AsyncSeqpacket, AsyncSeqpacket)> {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )?;
        Ok((AsyncSeqpacket::new(a)?, AsyncSeqpacket::new(b)?))
    }

    /// The peer's credentials (`SO_PEERCRED`).
    pub fn peer_credentials(&self) -> io::Result<UnixCredentials> {
        peer_credentials(self.fd.get_ref().as_fd())
    }

    /// The peer's process id as this process sees it, `None` when the
    /// kernel reports 0: a peer in a pid namespace this one cannot see
    /// (pods: the agent's container beside the mounter's), whose pid tells
    /// two peers apart no better than nothing does.
    pub fn peer_pid(&self) -> io::Result<Option<i32>> {
        Ok(visible_pid(self.peer_credentials()?.pid()))
    }

    /// Sends one record (see [`send`]), waiting while the socket's buffer
    /// is full.
    pub async fn send(
        &self,
        bytes: &[u8],
        fd: Option<BorrowedFd<'_>>,
        max: usize,
    ) -> Result<(), RecordError> {
        loop {
            let mut ready = self.fd.writable().await?;
            let sent = ready.try_io(|inner| {
                send(
                    inner.get_ref().as_fd(),
                    bytes,
                    fd,
                    max,
                    MsgFlags::MSG_DONTWAIT,
                )
                .map_err(io::Error::from)
            });
            match sent {
                Ok(result) => return result.map_err(RecordError::from),
                Err(_would_block) => continue,
            }
        }
    }

    /// Receives one record (see [`recv`]).
    pub async fn recv(&self, max: usize) -> Result<Option<Record>, RecordError> {
        loop {
            let mut ready = self.fd.readable().await?;
            let mut refused = None;
            let got = ready.try_io(|inner| {
                match recv(inner.get_ref().as_fd(), max, MsgFlags::MSG_DONTWAIT) {
                    Ok(r) => Ok(r),
                    Err(RecordError::Io(e)) => Err(e),
                    Err(other) => {
                        refused = Some(other);
                        Ok(None)
                    }
                }
            });
            match got {
                Ok(result) => {
                    if let Some(e) = refused {
                        return Err(e);
                    }
                    return Ok(result?);
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends `msg` as one JSON record.
    pub async fn send_json<T: Serialize>(
        &self,
        msg: &T,
        fd: Option<BorrowedFd<'_>>,
        max: usize,
    ) -> Result<(), RecordError> {
        self.send(&serde_json::to_vec(msg)?, fd, max).await
    }

    /// Receives one JSON record: `Ok(None)` at the end of the connection.
    pub async fn recv_json<T: DeserializeOwned>(
        &self,
        max: usize,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, RecordError> {
        decode(self.recv(max).await?)
    }
}

/// A listening `SOCK_SEQPACKET` socket on tokio.
#[derive(Debug)]
pub struct AsyncSeqpacketListener {
    fd: AsyncFd<OwnedFd>,
}

impl AsyncSeqpacketListener {
    /// Binds and listens on `path` (the caller removes a stale socket file
    /// first and sets the file's mode and owner). Errors: `bind(2)`'s.
    pub fn bind(path: &Path) -> io::Result<AsyncSeqpacketListener> {
        let sock = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )?;
        bind(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
        listen(&sock, Backlog::new(16).map_err(io::Error::from)?)?;
        Ok(AsyncSeqpacketListener {
            fd: register(sock)?,
        })
    }

    /// The next connection. Errors: `accept4(2)`'s (`EMFILE`...).
    pub async fn accept(&self) -> io::Result<AsyncSeqpacket> {
        loop {
            let mut ready = self.fd.readable().await?;
            let accepted = ready.try_io(|inner| {
                Ok(accept4(
                    inner.get_ref(),
                    SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                )?)
            });
            match accepted {
                Ok(conn) => return AsyncSeqpacket::new(conn?),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::RawFd;

    fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
        let (a, b) = (
            nix::sys::stat::fstat(a).unwrap(),
            nix::sys::stat::fstat(b).unwrap(),
        );
        (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    }

    #[test]
    fn a_peer_outside_our_pid_namespace_has_no_pid() {
        // Two agents in other pods both report pid 0: they must not look
        // like one process to the mounter.
        assert_eq!(visible_pid(0), None);
        assert_eq!(visible_pid(4242), Some(4242));
    }

    #[test]
    fn a_descriptor_travels_with_its_record() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let file = tempfile::tempfile().unwrap();
        send(a.as_fd(), b"{}", Some(file.as_fd()), 16, MsgFlags::empty()).unwrap();
        let got = recv(b.as_fd(), 16, MsgFlags::empty()).unwrap().unwrap();
        assert_eq!(got.bytes, b"{}");
        assert_eq!(got.fds.len(), 1);
        assert!(same_file(file.as_fd(), got.fds[0].as_fd()));
        drop(a);
        assert!(recv(b.as_fd(), 16, MsgFlags::empty()).unwrap().is_none());
    }

    #[test]
    fn oversized_records_and_too_many_descriptors_are_refused() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        assert!(matches!(
            send(a.as_fd(), &[b'x'; 17], None, 16, MsgFlags::empty()),
            Err(RecordError::TooLarge { max: 16 })
        ));
        assert!(matches!(
            send(a.as_fd(), b"", None, 16, MsgFlags::empty()),
            Err(RecordError::TooLarge { .. })
        ));
        // A peer that sends more than the receiver's limit.
        send(a.as_fd(), &[b'x'; 64], None, 64, MsgFlags::empty()).unwrap();
        assert!(matches!(
            recv(b.as_fd(), 16, MsgFlags::empty()),
            Err(RecordError::TooLarge { max: 16 })
        ));
        // More descriptors than a record may carry.
        let files: Vec<std::fs::File> = (0..MAX_FDS + 4)
            .map(|_| tempfile::tempfile().unwrap())
            .collect();
        let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        sendmsg::<()>(
            a.as_raw_fd(),
            &[IoSlice::new(b"{}")],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let got = recv(b.as_fd(), 16, MsgFlags::empty());
        assert!(matches!(got, Err(RecordError::ControlTruncated)), "{got:?}");
        // The connection still works afterwards.
        send(a.as_fd(), b"{}", None, 16, MsgFlags::empty()).unwrap();
        assert_eq!(
            recv(b.as_fd(), 16, MsgFlags::empty())
                .unwrap()
                .unwrap()
                .bytes,
            b"{}"
        );
    }

    #[tokio::test]
    async fn async_records_cross_a_listener_with_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = AsyncSeqpacketListener::bind(&path).unwrap();
        let (client, server) = tokio::join!(AsyncSeqpacket::connect(&path), listener.accept());
        let (client, server) = (client.unwrap(), server.unwrap());
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(server.peer_credentials().unwrap().uid(), me);
        assert_eq!(server.peer_pid().unwrap(), Some(std::process::id() as i32));
        let file = tempfile::tempfile().unwrap();
        client
            .send_json(&serde_json::json!({"op": "keep"}), Some(file.as_fd()), 64)
            .await
            .unwrap();
        let (msg, fds): (serde_json::Value, _) = server.recv_json(64).await.unwrap().unwrap();
        assert_eq!(msg["op"], "keep");
        assert!(same_file(file.as_fd(), fds[0].as_fd()));
        client.send(b"{not json", None, 64).await.unwrap();
        assert!(matches!(
            server.recv_json::<serde_json::Value>(64).await,
            Err(RecordError::BadJson(_))
        ));
        drop(client);
        assert!(server.recv(64).await.unwrap().is_none());
    }
}
