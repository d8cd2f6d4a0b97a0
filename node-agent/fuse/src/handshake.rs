//! Starting a fuser session on a `/dev/fuse` connection, new or live.
//!
//! The kernel sends `FUSE_INIT` once per connection (fs/fuse/inode.c,
//! `fuse_send_init`), and fuser's `Session::from_fd` insists on reading it
//! before it serves anything. A server that takes over a live connection
//! (the node agent restarted while the mounter or the descriptor holder
//! kept the connection open) never gets another one. So the handshake
//! runs on a private socket pair instead of the device:
//!
//! 1. the `FUSE_INIT` request is written into one end: for a new
//!    connection the one just read from the device (and kept as an
//!    [`InitRecord`]), for a live one the record of its first server;
//! 2. fuser reads it from the other end and answers it there;
//! 3. a new connection's answer goes on to the kernel; a live
//!    connection's is dropped (what was negotiated stays fixed for the
//!    connection's life: `max_write`, capabilities, `default_permissions`);
//! 4. `dup3(2)` turns fuser's descriptor number into the device itself, so
//!    every later request goes straight between the kernel and fuser with
//!    no relay and no copy.
//!
//! After a take-over the kernel is told to send again every request the
//! previous server read and never answered (`FUSE_NOTIFY_RESEND`, Linux
//! 6.9, protocol 7.40; include/uapi/linux/fuse.h).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use fuser::{Config, Session, SessionACL};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};

use crate::server::Server;

/// `FUSE_INIT` (include/uapi/linux/fuse.h, `enum fuse_opcode`).
const FUSE_INIT: u32 = 26;

/// `FUSE_NOTIFY_RESEND` (include/uapi/linux/fuse.h, `enum fuse_notify_code`).
const FUSE_NOTIFY_RESEND: i32 = 7;

/// `sizeof(struct fuse_in_header)`: len, opcode, unique, nodeid, uid, gid,
/// pid, total_extlen, padding.
const IN_HEADER: usize = 40;

/// Largest `FUSE_INIT` request accepted in a record: the header and
/// `struct fuse_init_in` (64 bytes since 7.36) with room to grow.
const MAX_INIT: usize = 4096;

/// Read buffer for the first request: the kernel refuses reads smaller
/// than `FUSE_MIN_READ_BUFFER` (8 KiB) or than one write request of the
/// connection's `max_write` (fs/fuse/dev.c, `fuse_dev_do_read`).
const FIRST_READ: usize = (1 << 20) + 8192;

/// The kernel's `FUSE_INIT` request of one connection, byte for byte as it
/// was read from `/dev/fuse`: what a later server replays to start a fuser
/// session on the same live connection. Opaque to callers; it travels with
/// the connection's descriptor (`as_bytes`, `from_bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitRecord(Vec<u8>);

impl InitRecord {
    /// The request's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Checks and wraps bytes from [`InitRecord::as_bytes`].
    ///
    /// Errors: `InvalidData` unless the bytes are one `FUSE_INIT` request
    /// (header length equal to the byte count, opcode 26) of at most 4 KiB.
    pub fn from_bytes(bytes: Vec<u8>) -> io::Result<InitRecord> {
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a FUSE_INIT record: {why}"),
            )
        };
        if bytes.len() < IN_HEADER || bytes.len() > MAX_INIT {
            return Err(bad("wrong size"));
        }
        let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let opcode = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if len as usize != bytes.len() {
            return Err(bad("length field differs from its size"));
        }
        if opcode != FUSE_INIT {
            return Err(bad("another opcode"));
        }
        Ok(InitRecord(bytes))
    }
}

/// Which `FUSE_INIT` the session starts from.
pub(crate) enum Handshake {
    /// A new connection: read the kernel's request from the device and
    /// answer it.
    Fresh,
    /// A live connection served before: replay its record, tell the
    /// kernel nothing, and ask it to resend the requests in flight.
    Resume(InitRecord),
}

/// Builds a fuser session for `server` that serves the connection `dev`.
/// For [`Handshake::Fresh`] the caller has waited until `dev` is readable.
///
/// Returns the session and the connection's [`InitRecord`].
///
/// Errors: `InvalidData` when the first request of a new connection is not
/// `FUSE_INIT`, `NotConnected` when the connection ended, fuser's errors,
/// or those of the socket pair and `dup3(2)`.
pub(crate) fn start_session(
    server: Server,
    dev: OwnedFd,
    config: Config,
    how: Handshake,
) -> io::Result<(Session<Server>, InitRecord)> {
    let (init, fresh) = match how {
        Handshake::Fresh => (read_init(dev.as_fd())?, true),
        Handshake::Resume(init) => (init, false),
    };
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    write_all_one(ours.as_fd(), init.as_bytes())?;
    let session = Session::from_fd(server, theirs, SessionACL::All, config)?;
    let mut answer = vec![0u8; MAX_INIT];
    let n = nix::unistd::read(&ours, &mut answer)?;
    answer.truncate(n);
    if fresh {
        write_all_one(dev.as_fd(), &answer).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                // The kernel gave up on the request: the connection ended.
                io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the FUSE connection ended during FUSE_INIT",
                )
            } else {
                e
            }
        })?;
    }
    // fuser's descriptor number now names the device: no thread reads it
    // yet (`run` has not started), so the switch is seen by all of them.
    let slot = session.as_fd().as_raw_fd();
    // SAFETY: both numbers are open descriptors of this process; dup3
    // atomically closes the socket behind `slot` and reopens `slot` as the
    // device. fuser keeps owning `slot` and closes it when the session ends.
    let r = unsafe { libc::dup3(dev.as_raw_fd(), slot, libc::O_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(dev);
    if !fresh {
        ask_resend(session.as_fd());
    }
    Ok((session, init))
}

/// Reads the first request of a new connection, which must be `FUSE_INIT`.
fn read_init(dev: BorrowedFd<'_>) -> io::Result<InitRecord> {
    let mut buf = vec![0u8; FIRST_READ];
    let n = loop {
        match nix::unistd::read(dev, &mut buf) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::ENODEV) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the FUSE connection ended before FUSE_INIT",
                ));
            }
            Err(e) => return Err(e.into()),
        }
    };
    buf.truncate(n);
    InitRecord::from_bytes(buf)
}

/// Writes `bytes` as one message (a FUSE reply, or one seqpacket).
fn write_all_one(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let n = nix::unistd::write(fd, bytes)?;
    if n != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short FUSE write"));
    }
    Ok(())
}

/// Sends `FUSE_NOTIFY_RESEND`: the kernel puts every request a previous
/// server read and never answered back in the queue, marked with the
/// `FUSE_UNIQUE_RESEND` bit (fs/fuse/dev.c, `fuse_resend`). Without it
/// (kernels before 6.9) those requests wait forever; that is logged.
fn ask_resend(dev: BorrowedFd<'_>) {
    let mut msg = [0u8; 16];
    msg[0..4].copy_from_slice(&16u32.to_le_bytes());
    msg[4..8].copy_from_slice(&FUSE_NOTIFY_RESEND.to_le_bytes());
    if let Err(e) = write_all_one(dev, &msg) {
        tracing::warn!(error = %e, "the kernel refused FUSE_NOTIFY_RESEND (Linux 6.9+): requests the previous server read but never answered stay unanswered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_bytes(len: u32, opcode: u32, total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total];
        b[0..4].copy_from_slice(&len.to_le_bytes());
        b[4..8].copy_from_slice(&opcode.to_le_bytes());
        b
    }

    #[test]
    fn records_hold_one_init_request_only() {
        assert!(InitRecord::from_bytes(init_bytes(104, 26, 104)).is_ok());
        assert!(
            InitRecord::from_bytes(init_bytes(104, 1, 104)).is_err(),
            "LOOKUP"
        );
        assert!(
            InitRecord::from_bytes(init_bytes(100, 26, 104)).is_err(),
            "length"
        );
        assert!(
            InitRecord::from_bytes(init_bytes(8, 26, 8)).is_err(),
            "short"
        );
        assert!(
            InitRecord::from_bytes(init_bytes(5000, 26, 5000)).is_err(),
            "long"
        );
    }
}
