//! The door of a listener anyone on the host can reach (the API port, the
//! share port): connections that have not authenticated yet are few and
//! short-lived, so they cannot crowd out the callers who have.
//!
//! Every local user arrives as `127.0.0.1`, so addresses tell nobody
//! apart; the gate goes by what a connection has shown instead:
//! * a connection is **unauthenticated** until a request on it carries
//!   what the port asks for (the agent token on the API port, a valid
//!   link on the share port) and the server calls [`Ticket::authenticated`];
//! * at most [`GateConfig::max_unauthenticated`] connections are
//!   unauthenticated at once: one more closes the oldest of them
//!   (`ECONNRESET` to its client), so a flood cannot hold the door shut
//!   against a caller who authenticates promptly;
//! * an unauthenticated connection is closed when it has not authenticated
//!   within [`GateConfig::auth_deadline`] of its accept, whatever it sent
//!   (an HTTP/2 preface or request headers sent slowly, or nothing);
//! * at most [`GateConfig::max_connections`] connections are open at once;
//!   the rest of that number beyond `max_unauthenticated` is reserved for
//!   authenticated ones, which unauthenticated ones cannot take. At the
//!   limit a new connection closes the oldest unauthenticated one; when
//!   all are authenticated, the new one is closed at once.
//!
//! Where a source address does name a client (in a cluster a sandbox pod's
//! IP is its identity), the gate also bounds each source
//! ([`GateConfig::with_sources`]), checked before the bounds above:
//! * at most [`GateConfig::max_unauthenticated_per_source`] unauthenticated
//!   connections from one address: one more closes that address's oldest
//!   unauthenticated connection, so a source's flood evicts only its own;
//! * at most [`GateConfig::max_per_source`] connections from one address:
//!   past it a new one closes the address's oldest unauthenticated
//!   connection, or, when all of them are authenticated, is closed at once.
//!
//! So one source holds at most `max_per_source` of the listener's
//! descriptors, and only its own unauthenticated connections are closed to
//! make room for it.
//! Accept errors (`EMFILE`, `ENFILE`, `ENOBUFS`...) are logged (at most
//! one line a second) and the listener retries after a short pause, so a
//! descriptor shortage is survived, not spun on.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

/// Bounds of one gate.
#[derive(Debug, Clone, Copy)]
pub struct GateConfig {
    /// Most connections open at once (authenticated or not).
    pub max_connections: usize,
    /// Most unauthenticated connections open at once.
    pub max_unauthenticated: usize,
    /// Time from accept within which a connection must authenticate
    /// (a TLS handshake included: the gate is under it).
    pub auth_deadline: Duration,
    /// Most connections open at once from one source address (the peer's
    /// IP, an IPv4-mapped IPv6 address taken as IPv4); `usize::MAX`: no
    /// bound per source.
    pub max_per_source: usize,
    /// Most unauthenticated connections open at once from one source
    /// address; `usize::MAX`: no bound per source.
    pub max_unauthenticated_per_source: usize,
}

/// Default of [`GateConfig::max_per_source`] where sources are bounded.
pub const DEFAULT_CONNECTIONS_PER_SOURCE: usize = 64;

/// Default of [`GateConfig::max_unauthenticated_per_source`] where sources
/// are bounded.
pub const DEFAULT_UNAUTHENTICATED_PER_SOURCE: usize = 8;

impl Default for GateConfig {
    /// 1024 connections, of which at most 128 unauthenticated, each with
    /// 10 s to authenticate; no bound per source.
    fn default() -> GateConfig {
        GateConfig {
            max_connections: 1024,
            max_unauthenticated: 128,
            auth_deadline: Duration::from_secs(10),
            max_per_source: usize::MAX,
            max_unauthenticated_per_source: usize::MAX,
        }
    }
}

impl GateConfig {
    /// The default bounds, shrunk to fit `descriptors` (the descriptors
    /// this listener may hold): all connections within it, and the
    /// unauthenticated ones within an eighth of it.
    pub fn within(descriptors: usize) -> GateConfig {
        let d = GateConfig::default();
        GateConfig {
            max_connections: d.max_connections.min(descriptors.max(2)),
            max_unauthenticated: d.max_unauthenticated.min((descriptors / 8).max(1)),
            ..d
        }
    }

    /// The same bounds with at most `connections` connections, of which
    /// at most `unauthenticated` unauthenticated, from one source address
    /// (each at least 1; `unauthenticated` at most `connections`).
    pub fn with_sources(self, connections: usize, unauthenticated: usize) -> GateConfig {
        let connections = connections.max(1);
        GateConfig {
            max_per_source: connections,
            max_unauthenticated_per_source: unauthenticated.clamp(1, connections),
            ..self
        }
    }
}

/// One connection's state, shared by its stream and its [`Ticket`]s.
struct Conn {
    id: u64,
    authenticated: AtomicBool,
    closed: AtomicBool,
    /// Whether it still counts as open (until closed by the gate or
    /// dropped).
    counted: AtomicBool,
    waker: AtomicWaker,
    /// The socket's descriptor while the connection is open (`None` from
    /// the moment its [`Gated`] is dropped, before the descriptor closes).
    fd: Mutex<Option<RawFd>>,
    /// The peer's address, canonical.
    source: IpAddr,
    /// Whether it counts as unauthenticated in its source's count
    /// (changed under the state's lock).
    unauthenticated_counted: AtomicBool,
}

/// What one source address holds.
#[derive(Debug, Default, Clone, Copy)]
struct SourceCount {
    open: usize,
    unauthenticated: usize,
}

struct State {
    /// Unauthenticated connections, oldest first (authenticated and closed
    /// ones are dropped lazily).
    unauthenticated: VecDeque<Arc<Conn>>,
    open: usize,
    next_id: u64,
    /// Counts of the sources that hold connections.
    sources: HashMap<IpAddr, SourceCount>,
}

impl State {
    fn source(&mut self, ip: IpAddr) -> &mut SourceCount {
        self.sources.entry(ip).or_default()
    }

    fn forget_if_empty(&mut self, ip: IpAddr) {
        if self
            .sources
            .get(&ip)
            .is_some_and(|c| c.open == 0 && c.unauthenticated == 0)
        {
            self.sources.remove(&ip);
        }
    }

    /// Counts `conn` out of the unauthenticated connections of its source.
    fn uncount_unauthenticated(&mut self, conn: &Conn) {
        if conn.unauthenticated_counted.swap(false, Ordering::AcqRel) {
            let c = self.source(conn.source);
            c.unauthenticated = c.unauthenticated.saturating_sub(1);
            self.forget_if_empty(conn.source);
        }
    }

    /// Counts `conn` out entirely (closed by the gate, or dropped).
    fn release(&mut self, conn: &Conn) {
        self.uncount_unauthenticated(conn);
        if conn.counted.swap(false, Ordering::AcqRel) {
            self.open = self.open.saturating_sub(1);
            let c = self.source(conn.source);
            c.open = c.open.saturating_sub(1);
            self.forget_if_empty(conn.source);
        }
    }

    /// Closes `conn` to make room: its reads and writes fail from now on.
    fn evict(&mut self, conn: &Conn) {
        self.release(conn);
        conn.closed.store(true, Ordering::Release);
        conn.waker.wake();
    }
}

struct Shared {
    config: GateConfig,
    what: &'static str,
    state: Mutex<State>,
    /// When the last warning was logged, and how many were left out since.
    last_warning: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

impl Shared {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Logs `message` unless a line was logged less than a second ago.
    fn warn(&self, message: &str, error: Option<&io::Error>) {
        let mut last = self.last_warning.lock();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
        match error {
            Some(e) => warn!(listener = self.what, error = %e, unlogged, "{message}"),
            None => warn!(listener = self.what, unlogged, "{message}"),
        }
    }

    /// [`Shared::warn`] naming the source address.
    fn warn_source(&self, message: &str, source: IpAddr) {
        self.warn(&format!("{message} ({source})"), None);
    }

    fn unauthenticated_count(state: &mut State) -> usize {
        state.unauthenticated.retain(|c| {
            !c.authenticated.load(Ordering::Acquire) && !c.closed.load(Ordering::Acquire)
        });
        state.unauthenticated.len()
    }
}

/// A listener behind a gate. Cheap to share: [`GatedListener::accept`]
/// takes `&self`.
pub struct GatedListener {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl GatedListener {
    /// Puts `listener` behind a gate with `config`; `what` names it in logs
    /// (`api`, `share`).
    pub fn new(listener: TcpListener, config: GateConfig, what: &'static str) -> GatedListener {
        GatedListener {
            listener,
            shared: Arc::new(Shared {
                config,
                what,
                state: Mutex::new(State {
                    unauthenticated: VecDeque::new(),
                    open: 0,
                    next_id: 0,
                    sources: HashMap::new(),
                }),
                last_warning: Mutex::new(None),
                unlogged: AtomicU64::new(0),
            }),
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection the gate lets in. Never fails: accept errors
    /// are logged and retried.
    pub async fn accept(&self) -> (Gated, SocketAddr) {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    self.shared.warn("accept failed; retrying", Some(&e));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let config = self.shared.config;
            let source = peer.ip().to_canonical();
            let mut state = self.shared.lock();
            // The source's own bounds first: only its own connections are
            // closed to make room for it.
            let mut refused = false;
            let mut evicted_own = false;
            loop {
                let mine = state.sources.get(&source).copied().unwrap_or_default();
                if mine.unauthenticated < config.max_unauthenticated_per_source
                    && mine.open < config.max_per_source
                {
                    break;
                }
                let oldest = state
                    .unauthenticated
                    .iter()
                    .position(|c| c.source == source && !c.authenticated.load(Ordering::Acquire));
                match oldest.and_then(|i| state.unauthenticated.remove(i)) {
                    Some(victim) => {
                        state.evict(&victim);
                        evicted_own = true;
                    }
                    None => {
                        refused = true;
                        break;
                    }
                }
            }
            if refused {
                drop(state);
                drop(stream);
                self.shared.warn_source(
                    "connection refused: the address holds its limit of connections",
                    source,
                );
                continue;
            }
            if evicted_own {
                drop(state);
                self.shared.warn_source(
                    "too many connections from one address: closed its oldest unauthenticated one",
                    source,
                );
                state = self.shared.lock();
            }
            let unauthenticated = Shared::unauthenticated_count(&mut state);
            if unauthenticated >= config.max_unauthenticated || state.open >= config.max_connections
            {
                // Room is made at the expense of the oldest unauthenticated
                // connection; authenticated ones are never closed for it.
                let Some(oldest) = state.unauthenticated.pop_front() else {
                    drop(state);
                    self.shared.warn(
                        "connection refused: the listener is at its connection limit",
                        None,
                    );
                    continue;
                };
                state.evict(&oldest);
                // Logged after the state is released.
                drop(state);
                self.shared.warn(
                    "too many unauthenticated connections: closed the oldest",
                    None,
                );
                state = self.shared.lock();
            }
            let id = state.next_id;
            state.next_id += 1;
            let conn = Arc::new(Conn {
                id,
                authenticated: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                counted: AtomicBool::new(true),
                waker: AtomicWaker::new(),
                fd: Mutex::new(Some(stream.as_raw_fd())),
                source,
                unauthenticated_counted: AtomicBool::new(true),
            });
            state.unauthenticated.push_back(Arc::clone(&conn));
            state.open += 1;
            let mine = state.source(source);
            mine.open += 1;
            mine.unauthenticated += 1;
            drop(state);
            let _ = stream.set_nodelay(true);
            let gated = Gated {
                stream,
                ticket: Ticket {
                    conn,
                    peer,
                    shared: Arc::clone(&self.shared),
                },
                deadline: Box::pin(tokio::time::sleep(config.auth_deadline)),
            };
            return (gated, peer);
        }
    }

    /// The accepted connections as a stream (for tonic's
    /// `serve_with_incoming_shutdown`).
    pub fn into_stream(self) -> impl futures::Stream<Item = io::Result<Gated>> + Send + 'static {
        futures::stream::unfold(self, |listener| async move {
            let (gated, _) = listener.accept().await;
            Some((Ok(gated), listener))
        })
    }
}

impl axum::serve::Listener for GatedListener {
    type Io = Gated;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Gated, SocketAddr) {
        GatedListener::accept(self).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        GatedListener::local_addr(self)
    }
}

/// What a server sees of a gated connection (a request extension): its
/// peer, and the switch that marks it authenticated.
#[derive(Clone)]
pub struct Ticket {
    conn: Arc<Conn>,
    peer: SocketAddr,
    shared: Arc<Shared>,
}

impl Ticket {
    /// Marks the connection authenticated: it no longer counts against
    /// the unauthenticated limit and has no deadline.
    pub fn authenticated(&self) {
        if !self.conn.authenticated.swap(true, Ordering::AcqRel) {
            let mut state = self.shared.lock();
            state.unauthenticated.retain(|c| c.id != self.conn.id);
            state.uncount_unauthenticated(&self.conn);
        }
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Bytes the client has acknowledged on this connection so far
    /// (`tcpi_bytes_acked` of `TCP_INFO`, tcp(7)): what it has received,
    /// whatever the server's buffers still hold. `None` once the
    /// connection is closed, or when the kernel does not say.
    pub fn bytes_acked(&self) -> Option<u64> {
        let fd = self.conn.fd.lock();
        // The lock keeps the descriptor open while it is asked:
        // `Gated::drop` clears it under the same lock before the socket
        // closes.
        fd.and_then(tcp_bytes_acked)
    }

    /// Ends the connection at once with a reset: `SO_LINGER` 0 (socket(7)),
    /// so what the server's buffers still hold is discarded rather than
    /// trickled out, and the client gets `ECONNRESET`. For a client that is
    /// being dropped; the server's next read or write on it fails.
    pub fn reset(&self) {
        {
            let fd = self.conn.fd.lock();
            if let Some(fd) = *fd {
                let linger = nix::libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // SAFETY: `fd` is open (held by the lock, see
                // `bytes_acked`) and `linger` is a valid `struct linger`.
                unsafe {
                    nix::libc::setsockopt(
                        fd,
                        nix::libc::SOL_SOCKET,
                        nix::libc::SO_LINGER,
                        (&raw const linger).cast(),
                        std::mem::size_of::<nix::libc::linger>() as nix::libc::socklen_t,
                    );
                }
            }
        }
        self.conn.closed.store(true, Ordering::Release);
        self.conn.waker.wake();
    }
}

/// `tcpi_bytes_acked` of the TCP socket `fd` (Linux 4.1 and later; `None`
/// when `getsockopt` fails or the kernel's `tcp_info` is too short to
/// carry it).
fn tcp_bytes_acked(fd: RawFd) -> Option<u64> {
    let mut info = std::mem::MaybeUninit::<nix::libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<nix::libc::tcp_info>() as nix::libc::socklen_t;
    // SAFETY: `info` is a writable buffer of `len` bytes and `fd` is an
    // open socket (see `Ticket::bytes_acked`).
    let r = unsafe {
        nix::libc::getsockopt(
            fd,
            nix::libc::IPPROTO_TCP,
            nix::libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let needed =
        std::mem::offset_of!(nix::libc::tcp_info, tcpi_bytes_acked) + std::mem::size_of::<u64>();
    if r != 0 || (len as usize) < needed {
        return None;
    }
    // SAFETY: zeroed, then filled by the kernel up to `len`.
    Some(unsafe { info.assume_init() }.tcpi_bytes_acked)
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("peer", &self.peer)
            .field(
                "authenticated",
                &self.conn.authenticated.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl<'a> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'a, GatedListener>>
    for Ticket
{
    fn connect_info(stream: axum::serve::IncomingStream<'a, GatedListener>) -> Ticket {
        stream.io().ticket.clone()
    }
}

/// An accepted connection: reads and writes fail with `ECONNRESET` once
/// the gate closed it, and with `ETIMEDOUT` once its deadline passed
/// unauthenticated.
pub struct Gated {
    stream: TcpStream,
    ticket: Ticket,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Gated {
    /// Why the connection must end now, if it must.
    fn check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let conn = &self.ticket.conn;
        conn.waker.register(cx.waker());
        if conn.closed.load(Ordering::Acquire) {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "closed by the gate",
            ));
        }
        if !conn.authenticated.load(Ordering::Acquire) && self.deadline.as_mut().poll(cx).is_ready()
        {
            conn.closed.store(true, Ordering::Release);
            return Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "not authenticated within the deadline",
            ));
        }
        None
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let conn = &self.ticket.conn;
        // Before `stream` closes the descriptor (fields drop after this).
        *conn.fd.lock() = None;
        conn.closed.store(true, Ordering::Release);
        let mut state = self.ticket.shared.lock();
        state.release(conn);
        state.unauthenticated.retain(|c| c.id != conn.id);
    }
}

use std::future::Future;

impl AsyncRead for Gated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Registered so that a writer waiting on a full socket hears of
        // the gate closing the connection too.
        self.ticket.conn.waker.register(cx.waker());
        if self.ticket.conn.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.ticket.conn.waker.register(cx.waker());
        if self.ticket.conn.closed.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Gated {
    type ConnectInfo = Ticket;

    fn connect_info(&self) -> Ticket {
        self.ticket.clone()
    }
}

/// The gate's ticket of the request's connection, over TLS or not.
pub fn ticket_of(extensions: &http::Extensions) -> Option<&Ticket> {
    extensions.get::<Ticket>().or_else(|| {
        extensions
            .get::<tonic::transport::server::TlsConnectInfo<Ticket>>()
            .map(|tls| tls.get_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Accepts every connection and echoes what each sends until the gate
    /// ends it; sends the tickets out so the test can authenticate them.
    async fn echo(
        config: GateConfig,
    ) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Ticket>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gated = GatedListener::new(listener, config, "test");
        let addr = gated.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = gated.accept().await;
                let _ = tx.send(conn.ticket.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = conn.read(&mut buf).await {
                        if conn.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, rx)
    }

    /// Whether the server still echoes on `s`.
    async fn alive(s: &mut TcpStream) -> bool {
        if s.write_all(b"x").await.is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
            Ok(Ok(1))
        )
    }

    #[tokio::test]
    async fn the_oldest_unauthenticated_connection_makes_room_and_authenticated_ones_stay() {
        let config = GateConfig {
            max_connections: 3,
            max_unauthenticated: 2,
            auth_deadline: Duration::from_secs(60),
            ..GateConfig::default()
        };
        let (addr, mut tickets) = echo(config).await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        tickets.recv().await.unwrap().authenticated();
        let mut second = TcpStream::connect(addr).await.unwrap();
        let _ = tickets.recv().await.unwrap();
        let mut third = TcpStream::connect(addr).await.unwrap();
        let third_ticket = tickets.recv().await.unwrap();
        // Three open, the limit: the fourth closes the oldest
        // unauthenticated one, the second.
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        let fourth_ticket = tickets.recv().await.unwrap();
        assert!(
            !alive(&mut second).await,
            "the oldest unauthenticated connection was kept"
        );
        assert!(alive(&mut first).await && alive(&mut third).await && alive(&mut fourth).await);
        // All three authenticated: nothing may be closed for a newcomer,
        // which is closed at once.
        third_ticket.authenticated();
        fourth_ticket.authenticated();
        let mut fifth = TcpStream::connect(addr).await.unwrap();
        assert!(
            !alive(&mut fifth).await,
            "a connection past the limit was kept"
        );
        assert!(alive(&mut first).await && alive(&mut third).await && alive(&mut fourth).await);
    }

    #[tokio::test]
    async fn unauthenticated_connections_end_at_the_deadline() {
        let config = GateConfig {
            auth_deadline: Duration::from_millis(300),
            ..GateConfig::default()
        };
        let (addr, mut tickets) = echo(config).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let _ = tickets.recv().await.unwrap();
        let mut trusted = TcpStream::connect(addr).await.unwrap();
        tickets.recv().await.unwrap().authenticated();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut b = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut b)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a silent connection outlived its deadline: {read:?}"
        );
        assert!(
            alive(&mut trusted).await,
            "an authenticated connection was ended"
        );
    }

    /// A connection to `addr` from source address `from` (loopback).
    async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        socket.connect(addr).await.unwrap()
    }

    #[tokio::test]
    async fn one_source_is_bounded_and_evicts_only_its_own() {
        let config = GateConfig {
            auth_deadline: Duration::from_secs(60),
            ..GateConfig::default()
        }
        .with_sources(4, 2);
        let (addr, mut tickets) = echo(config).await;
        // Another source connects first and stays unauthenticated.
        let mut other = connect_from("127.0.0.3", addr).await;
        let _ = tickets.recv().await.unwrap();
        // The flooding source: its own oldest unauthenticated connection
        // makes room for its next, so it never holds more than 2.
        let mut flood = Vec::new();
        for _ in 0..10 {
            flood.push(connect_from("127.0.0.2", addr).await);
            let _ = tickets.recv().await.unwrap();
        }
        let mut alive_count = 0;
        for s in &mut flood {
            if alive(s).await {
                alive_count += 1;
            }
        }
        assert_eq!(alive_count, 2, "unauthenticated connections of one source");
        assert!(
            alive(&mut other).await,
            "another source's connection was closed"
        );
        // Authenticated ones count against the source's 4 too: with 4
        // authenticated, a fifth is closed at once.
        let mut kept = Vec::new();
        for _ in 0..4 {
            let mut s = connect_from("127.0.0.4", addr).await;
            tickets.recv().await.unwrap().authenticated();
            assert!(alive(&mut s).await);
            kept.push(s);
        }
        let mut fifth = connect_from("127.0.0.4", addr).await;
        assert!(!alive(&mut fifth).await, "a source went past its limit");
        for s in &mut kept {
            assert!(alive(s).await, "an authenticated connection was closed");
        }
        // Closing one gives the source its place back.
        drop(kept.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut again = connect_from("127.0.0.4", addr).await;
        assert!(
            alive(&mut again).await,
            "the freed place was not given back"
        );
    }

    #[test]
    fn bounds_fit_the_descriptors() {
        let small = GateConfig::within(192);
        assert_eq!(
            (small.max_connections, small.max_unauthenticated),
            (192, 24)
        );
        let large = GateConfig::within(100_000);
        assert_eq!(
            (large.max_connections, large.max_unauthenticated),
            (1024, 128)
        );
    }
}
