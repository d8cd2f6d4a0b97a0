//! Relaying bytes both ways between client and upstream, ended when
//! nothing moved either way for an idle timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Copies `a` to `b` and `b` to `a` until both directions ended (each end
/// shut down its writing side) or nothing moved either way for `idle`.
/// Returns `false` when it ended for idleness.
pub(crate) async fn relay(a: &mut TcpStream, b: &mut TcpStream, idle: Duration) -> bool {
    let start = Instant::now();
    // Milliseconds since `start` at the last byte moved.
    let last = AtomicU64::new(0);
    let (mut ar, mut aw) = a.split();
    let (mut br, mut bw) = b.split();
    let both = async {
        tokio::join!(
            one_way(&mut ar, &mut bw, &last, start),
            one_way(&mut br, &mut aw, &last, start)
        )
    };
    let watchdog = async {
        loop {
            let at = start + Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
            if Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    };
    tokio::select! {
        _ = both => true,
        () = watchdog => false,
    }
}

async fn one_way<R, W>(from: &mut R, to: &mut W, last: &AtomicU64, start: Instant)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}
