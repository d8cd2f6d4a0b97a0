//! Bounds on the streaming calls (Read, Write): how long a stream may sit
//! idle or stalled, and how many may be open per client connection and per
//! computer.
//!
//! A stream that passes its idle timeout ends with `DEADLINE_EXCEEDED` and
//! lets go of what it holds: its lease on the computer (so the computer can
//! hibernate), its open file handle, and for an upload the unnamed file with
//! the bytes received so far (so they stop counting against the quota).
//! Opening a stream past a cap fails at once with `RESOURCE_EXHAUSTED`
//! naming the cap.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

/// Default for [`StreamLimits::idle_timeout`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for [`StreamLimits::per_client`].
pub const DEFAULT_STREAMS_PER_CLIENT: usize = 32;
/// Default for [`StreamLimits::per_computer`].
pub const DEFAULT_STREAMS_PER_COMPUTER: usize = 64;

/// The limits on streaming calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Longest wait for the next message of an upload, or for a client to
    /// take the next chunk of a read.
    pub idle_timeout: Duration,
    /// Most Read and Write streams open at once on one client connection
    /// (its remote address and port).
    pub per_client: usize,
    /// Most Read and Write streams open at once on one computer, over all
    /// clients.
    pub per_computer: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            per_client: DEFAULT_STREAMS_PER_CLIENT,
            per_computer: DEFAULT_STREAMS_PER_COMPUTER,
        }
    }
}

/// Counts open streams against [`StreamLimits`]. Cheap to clone.
#[derive(Clone, Default)]
pub struct StreamGate {
    limits: StreamLimits,
    open: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    by_client: HashMap<String, usize>,
    by_computer: HashMap<String, usize>,
}

/// One open stream's place under the caps; given back when dropped.
pub struct StreamPermit {
    open: Arc<Mutex<Counts>>,
    client: String,
    computer: String,
}

impl StreamGate {
    /// A gate enforcing `limits`.
    pub fn new(limits: StreamLimits) -> StreamGate {
        StreamGate {
            limits,
            open: Arc::default(),
        }
    }

    /// The limits enforced.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    /// Takes a place for one stream of `client` (a connection's identity)
    /// on `computer`. Errors: `RESOURCE_EXHAUSTED` when either cap is
    /// reached.
    pub fn admit(&self, client: &str, computer: &str) -> Result<StreamPermit, Status> {
        let mut c = self.open.lock();
        let by_client = c.by_client.get(client).copied().unwrap_or(0);
        if by_client >= self.limits.per_client {
            return Err(Status::resource_exhausted(format!(
                "this connection already has {by_client} open Read/Write streams, the most allowed \
                 per client; finish or cancel one first"
            )));
        }
        let by_computer = c.by_computer.get(computer).copied().unwrap_or(0);
        if by_computer >= self.limits.per_computer {
            return Err(Status::resource_exhausted(format!(
                "computer \"{computer}\" already has {by_computer} open Read/Write streams, the \
                 most allowed per computer; finish or cancel one first"
            )));
        }
        *c.by_client.entry(client.to_string()).or_default() += 1;
        *c.by_computer.entry(computer.to_string()).or_default() += 1;
        Ok(StreamPermit {
            open: self.open.clone(),
            client: client.to_string(),
            computer: computer.to_string(),
        })
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        fn release(map: &mut HashMap<String, usize>, key: &str) {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
        let mut c = self.open.lock();
        release(&mut c.by_client, &self.client);
        release(&mut c.by_computer, &self.computer);
    }
}

/// The identity of a request's client connection for the per-client cap:
/// its remote address and port, or "local" when the transport has none.
pub fn client_of<T>(req: &tonic::Request<T>) -> String {
    req.remote_addr()
        .or_else(|| crate::gate::ticket_of(req.extensions()).map(|t| t.peer()))
        .map(|a| a.to_string())
        .unwrap_or_else(|| "local".to_string())
}

/// The error of a stream that passed its idle timeout.
pub fn idle_error(what: &str, timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "{what}: nothing moved for {}; the stream was ended and what it held released",
        humantime::format_duration(timeout)
    ))
}

/// The stream of a server-streaming call fed by a task: the items as the
/// task sends them, then the error that ended it early, if the task left
/// one in `failure` (it could not queue it behind a full channel of a
/// stalled client). Holds the stream's place under the stream caps until
/// dropped.
pub struct PermitStream<T> {
    rx: tokio::sync::mpsc::Receiver<Result<T, Status>>,
    failure: Arc<Mutex<Option<Status>>>,
    _permit: StreamPermit,
}

impl<T> PermitStream<T> {
    /// A stream of what `rx` receives, then `failure`'s status if set,
    /// holding `permit`.
    pub fn new(
        rx: tokio::sync::mpsc::Receiver<Result<T, Status>>,
        failure: Arc<Mutex<Option<Status>>>,
        permit: StreamPermit,
    ) -> PermitStream<T> {
        PermitStream {
            rx,
            failure,
            _permit: permit,
        }
    }
}

impl<T> tokio_stream::Stream for PermitStream<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(None) => {
                let failure = self.failure.lock().take();
                std::task::Poll::Ready(failure.map(Err))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_client_and_per_computer() {
        let gate = StreamGate::new(StreamLimits {
            idle_timeout: Duration::from_secs(1),
            per_client: 2,
            per_computer: 3,
        });
        let a1 = gate.admit("a", "c").unwrap();
        let _a2 = gate.admit("a", "c").unwrap();
        let e = gate.admit("a", "c").err().unwrap();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("per client"), "{}", e.message());
        let _b1 = gate.admit("b", "c").unwrap();
        let e = gate.admit("b", "c").err().unwrap();
        assert!(e.message().contains("per computer"), "{}", e.message());
        // Another computer is not affected by this one's streams.
        let _b2 = gate.admit("b", "d").unwrap();
        // Finishing a stream frees its place under both caps.
        drop(a1);
        let _e1 = gate.admit("e", "c").unwrap();
    }
}
