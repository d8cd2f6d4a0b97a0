//! A TCP proxy on loopback in front of the API server, so that a test can
//! make the server unreachable for one client only: `hang` keeps every
//! connection open and answers nothing (a partition) until `resume` lets
//! new connections through again, `close` closes them and refuses new ones
//! (a dead server).

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) struct Proxy {
    pub addr: SocketAddr,
    /// Cancelled by `hang`: connections stop forwarding; `resume` puts a
    /// fresh one in place for the connections accepted from then on.
    cut: Arc<Mutex<CancellationToken>>,
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Forwards 127.0.0.1:<some port> to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(Mutex::new(CancellationToken::new()));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let (cut, conns) = (cut.clone(), conns.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let now = cut.lock().clone();
                    let task = tokio::spawn(serve(client, upstream, now));
                    conns.lock().push(task);
                }
            }
        });
        Proxy {
            addr,
            cut,
            accept,
            conns,
        }
    }

    /// `https://127.0.0.1:<port>`: the URL a client uses to go through it.
    pub(crate) fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// From now on nothing reaches the server and nothing comes back, but
    /// connections stay open: requests hang.
    pub(crate) fn hang(&self) {
        self.cut.lock().cancel();
    }

    /// Ends a `hang` for the connections made from now on; those open
    /// during it stay silent (their clients give up on them).
    #[allow(dead_code)] // not every test that includes this module resumes
    pub(crate) fn resume(&self) {
        *self.cut.lock() = CancellationToken::new();
    }

    /// Closes every connection and the listener: requests fail at once.
    pub(crate) fn close(&self) {
        self.accept.abort();
        for task in self.conns.lock().drain(..) {
            task.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.close();
    }
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, cut: CancellationToken) {
    if !cut.is_cancelled() {
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            return;
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = cut.cancelled() => {}
        }
    }
    // Cut: swallow what the client sends, answer nothing, never close.
    let mut buf = [0u8; 4096];
    while let Ok(n) = client.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    std::future::pending::<()>().await;
}
