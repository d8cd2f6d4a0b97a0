//! The egress proxy: HTTP `CONNECT` tunnels (for HTTPS and anything else
//! spoken over TCP to a port the policy allows) and plain HTTP forward
//! proxying (absolute-form requests), each decided by the computer's
//! egress policy exactly as the in-process runtimes decide their own
//! connections: the target is looked up once, every address is checked,
//! and the proxy connects to exactly an address it checked
//! ([`agentcomputer_egress::resolve`]).
//!
//! Who is calling is never taken from the client: an [`Identify`] maps the
//! connection (the listener it came in on, its source address, or a
//! credential the agent issued) to a computer; a connection it cannot map
//! gets `407` and nothing else, so the proxy is not open to anything it
//! does not know. Wrong credentials are bounded per source address
//! ([`GuessLimits`]): past the budget a source gets `429` and its
//! credentials are not checked until the budget refills.
//!
//! Every decision is logged (`tracing`, target `agentcomputer_proxy`) and
//! counted ([`Metrics`]).

mod connection;
mod denials;
mod identify;
mod limits;
mod metrics;
mod relay;
mod target;
mod throttle;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub use denials::Denials;
pub use identify::{
    BySource, Caller, CredentialGuard, Credentials, Fixed, Identify, basic_password,
};
pub use limits::{Admitted, ConnectionLimits, DEFAULT_PER_COMPUTER, Refusal};
pub use metrics::Metrics;
pub use target::{TargetError, parse_authority};
pub use throttle::GuessLimits;
use throttle::Throttle;

/// Limits of one proxied connection.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Longest request head accepted (bytes).
    pub max_head_bytes: usize,
    /// Time a client has to send its request head.
    pub head_timeout: std::time::Duration,
    /// Time to connect to one upstream address.
    pub connect_timeout: std::time::Duration,
    /// Bounds on wrong credentials per source ([`GuessLimits`]).
    pub guesses: GuessLimits,
    /// A tunnel or forwarded request in which nothing moved either way for
    /// this long is closed.
    pub idle_timeout: std::time::Duration,
}

impl Default for Settings {
    /// 64 KiB heads, 10 s to send one, 10 s to connect, the default
    /// [`GuessLimits`], 5 minutes idle.
    fn default() -> Settings {
        Settings {
            max_head_bytes: 64 * 1024,
            head_timeout: std::time::Duration::from_secs(10),
            connect_timeout: std::time::Duration::from_secs(10),
            guesses: GuessLimits::default(),
            idle_timeout: std::time::Duration::from_secs(300),
        }
    }
}

/// A proxy: how it identifies callers and where it counts decisions.
#[derive(Clone)]
pub struct Proxy {
    identify: Arc<dyn Identify>,
    metrics: Metrics,
    settings: Settings,
    throttle: Arc<Throttle>,
    limits: ConnectionLimits,
    /// The key this listener's connections are counted under.
    key: Arc<str>,
    /// Connections counted by source address too, from accept
    /// ([`Proxy::with_source_limits`]).
    sources: Option<ConnectionLimits>,
    /// Connections counted by the computer they were identified as
    /// ([`Proxy::with_computer_limits`]).
    computers: Option<ConnectionLimits>,
    accept_log: Arc<parking_lot::Mutex<Option<std::time::Instant>>>,
    /// Where refusals are recorded for the exec that made them.
    denials: Denials,
}

impl Proxy {
    /// A proxy whose callers are identified by `identify`.
    pub fn new(identify: Arc<dyn Identify>, metrics: Metrics) -> Proxy {
        Proxy {
            identify,
            metrics,
            settings: Settings::default(),
            throttle: Arc::new(Throttle::new(GuessLimits::default())),
            limits: ConnectionLimits::default(),
            key: Arc::from("proxy"),
            sources: None,
            computers: None,
            accept_log: Arc::default(),
            denials: Denials::new(),
        }
    }

    /// The same proxy counting its connections in `limits` (shared with
    /// the agent's other proxies) under `key` (the computer whose listener
    /// this is, or a name for a shared listener). Past a limit a new
    /// connection is closed at once, counted as
    /// `denied/too-many-connections` and logged (at most one line a
    /// second per proxy).
    pub fn with_limits(mut self, limits: ConnectionLimits, key: &str) -> Proxy {
        self.limits = limits;
        self.key = Arc::from(key);
        self
    }

    /// The same proxy counting each connection also under its source
    /// address (the peer's IP, canonical) in `limits`, from its accept:
    /// for a listener many computers share where an address names one
    /// client (a sandbox pod's IP in a cluster). Past the per-key limit a
    /// new connection from that address is closed at once, before a byte
    /// of it is read.
    pub fn with_source_limits(mut self, limits: ConnectionLimits) -> Proxy {
        self.sources = Some(limits);
        self
    }

    /// The same proxy recording each policy refusal in `denials`, under
    /// the caller's [`Caller::key`], for the exec that made it to report.
    pub fn with_denials(mut self, denials: Denials) -> Proxy {
        self.denials = denials;
        self
    }

    /// The same proxy counting each connection also under the computer it
    /// is identified as, in `limits`, from its identification to its end:
    /// for a listener many computers share. Past the per-key limit the
    /// request is answered `429 Too Many Requests` and the connection
    /// closed, counted as `denied/too-many-connections`.
    pub fn with_computer_limits(mut self, limits: ConnectionLimits) -> Proxy {
        self.computers = Some(limits);
        self
    }

    /// Logs `message` at `WARN` unless this proxy logged one in the last
    /// second.
    fn warn_limited(&self, message: &str, error: Option<&std::io::Error>) {
        let mut last = self.accept_log.lock();
        if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
            return;
        }
        *last = Some(std::time::Instant::now());
        match error {
            Some(e) => warn!(listener = %self.key, error = %e, "{message}"),
            None => warn!(listener = %self.key, "{message}"),
        }
    }

    /// The same proxy with other limits.
    pub fn with_settings(mut self, settings: Settings) -> Proxy {
        self.settings = settings;
        self.throttle = Arc::new(Throttle::new(settings.guesses));
        self
    }

    /// Accepts connections on `listener` until `stop` is cancelled; each
    /// connection is served on a task of its own, and tunnels already open
    /// end when `stop` is cancelled too.
    pub async fn serve(self, listener: TcpListener, stop: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let admitted = match self.limits.admit(&self.key) {
                        Ok(a) => a,
                        Err(why) => {
                            // Closed at once: the descriptor is back.
                            drop(stream);
                            self.metrics.count("denied", "too-many-connections");
                            let message = match why {
                                Refusal::PerComputer => {
                                    "egress proxy: connection refused: the computer holds its limit of proxy connections"
                                }
                                Refusal::Total => {
                                    "egress proxy: connection refused: the proxies hold the agent's limit of connections"
                                }
                            };
                            self.warn_limited(message, None);
                            continue;
                        }
                    };
                    let by_source = match &self.sources {
                        None => None,
                        Some(sources) => {
                            let key: Arc<str> = Arc::from(peer.ip().to_canonical().to_string());
                            match sources.admit(&key) {
                                Ok(a) => Some(a),
                                Err(_) => {
                                    drop(stream);
                                    self.metrics.count("denied", "too-many-connections");
                                    self.warn_limited(
                                        "egress proxy: connection refused: the source address holds its limit of proxy connections",
                                        None,
                                    );
                                    continue;
                                }
                            }
                        }
                    };
                    let proxy = self.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        let _admitted = (admitted, by_source);
                        tokio::select! {
                            () = stop.cancelled() => {}
                            () = connection::serve(&proxy, stream, peer) => {}
                        }
                    });
                }
                Err(e) => {
                    // EMFILE and its kind: wait for descriptors to come
                    // back rather than spin.
                    self.warn_limited("egress proxy: accept failed; retrying", Some(&e));
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}
