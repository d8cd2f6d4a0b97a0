//! A network namespace whose only way out is the egress proxy.
//!
//! The namespace has a loopback interface and nothing else: no other
//! interface, no route. Inside it, on `127.0.0.1:PORT`, is a listening
//! socket that belongs to the agent (a socket keeps the namespace it was
//! made in, whoever accepts on it). A sandbox that joins the namespace can
//! reach that port and its own loopback services, nothing more: every
//! outbound HTTP and HTTPS request goes through the proxy, which serves
//! exactly one computer on that socket, so it knows the computer without
//! trusting anything the client says. Other protocols (raw TCP, UDP, DNS,
//! ICMP) have no route out.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sched::{CloneFlags, unshare};

/// Port of the proxy inside the namespace (the cluster's NetworkPolicy
/// admits the same port on the node agent).
pub const PROXY_PORT: u16 = 3128;

/// A fresh network namespace with the proxy's listening socket inside.
#[derive(Debug)]
pub struct ProxyNetns {
    namespace: OwnedFd,
    listener: TcpListener,
}

impl ProxyNetns {
    /// Makes the namespace, brings `lo` up and listens on
    /// `127.0.0.1:port` in it. The caller's own namespace is untouched (the
    /// work happens on a short-lived thread). Errors: `EPERM` without
    /// `CAP_SYS_ADMIN`, or the kernel's errors for the steps.
    pub fn new(port: u16) -> io::Result<ProxyNetns> {
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || -> io::Result<ProxyNetns> {
                // Namespaces are per thread: this thread alone moves, and
                // it ends right after.
                unshare(CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                loopback_up()?;
                let namespace: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")?.into();
                let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
                listener.set_nonblocking(true)?;
                Ok(ProxyNetns {
                    namespace,
                    listener,
                })
            })?
            .join()
            .map_err(|_| io::Error::other("the network namespace thread panicked"))?
    }

    /// The namespace, for `setns(2)` in the sandbox's first process.
    pub fn namespace(&self) -> BorrowedFd<'_> {
        self.namespace.as_fd()
    }

    /// Splits into the namespace descriptor and the listening socket
    /// (non-blocking, ready for `tokio::net::TcpListener::from_std`).
    pub fn into_parts(self) -> (OwnedFd, TcpListener) {
        (self.namespace, self.listener)
    }
}

/// `ip link set lo up` in the calling thread's namespace (SIOCSIFFLAGS).
fn loopback_up() -> io::Result<()> {
    // SAFETY: plain socket and ioctl calls on a zeroed ifreq we own.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut result = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if result == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            result = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        let err = io::Error::last_os_error();
        libc::close(fd);
        if result != 0 {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn the_listener_is_reachable_only_from_inside() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED: making a network namespace needs root");
            return;
        }
        let ns = ProxyNetns::new(PROXY_PORT).unwrap();
        let (namespace, listener) = ns.into_parts();
        listener.set_nonblocking(false).unwrap();
        // From inside: a thread that joins the namespace connects.
        let inside = std::thread::spawn(move || {
            nix::sched::setns(&namespace, CloneFlags::CLONE_NEWNET).unwrap();
            let mut s = std::net::TcpStream::connect(("127.0.0.1", PROXY_PORT)).unwrap();
            s.write_all(b"ping").unwrap();
            // Nothing else is routed.
            let out = std::net::TcpStream::connect_timeout(
                &"192.0.2.1:80".parse().unwrap(),
                std::time::Duration::from_secs(1),
            );
            out.unwrap_err().raw_os_error()
        });
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        assert_eq!(inside.join().unwrap(), Some(libc::ENETUNREACH));
    }
}
