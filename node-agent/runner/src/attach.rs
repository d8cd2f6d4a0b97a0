//! The stream to the node agent: attach, take commands, reconnect.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_client::SandboxRunnerClient;
use pb::runner_command::Command as Cmd;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::reaper::Reaper;
use crate::{Config, log};

/// First wait after a broken stream; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A stream that lasted this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);
/// Events buffered ahead of the agent; past that runs wait (and so do
/// their scripts, once the pipes fill).
const EVENT_BUFFER: usize = 64;

/// The node agent will not take this runner: it answered the attach with
/// FAILED_PRECONDITION (an attach protocol revision it does not serve).
/// Carries the agent's message.
#[derive(Debug)]
pub(crate) struct Refused(pub String);

/// Why one stream ended.
enum Failure {
    /// Worth another attempt (unreachable agent, broken stream, ...).
    Retry(String),
    /// The agent refuses this runner; another attempt gets the same answer.
    Refused(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Retry(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Self {
        Failure::Retry(e.to_string())
    }
}

/// Attaches to the agent again and again, until the agent refuses this
/// runner's protocol revision.
pub(crate) async fn serve(config: Config, reaper: Arc<Reaper>) -> Refused {
    let mut backoff = MIN_BACKOFF;
    loop {
        let began = Instant::now();
        match session(&config, &reaper).await {
            Ok(()) => log!("the node agent ended the stream; reconnecting"),
            Err(Failure::Retry(e)) => log!("{e}; retrying in {backoff:?}"),
            Err(Failure::Refused(why)) => return Refused(why),
        }
        if began.elapsed() >= STABLE {
            backoff = MIN_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One Attach stream, until it ends. Every run started on it is cancelled
/// (its process group killed) when it ends.
async fn session(config: &Config, reaper: &Arc<Reaper>) -> Result<(), Failure> {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint =
        Endpoint::from_shared(format!("{scheme}://{}", config.agent)).map_err(|e| {
            format!(
                "AGENTCOMPUTER_AGENT {:?} is not HOST:PORT: {e}",
                config.agent
            )
        })?;
    if let Some(tls) = &config.tls {
        // The agent is dialled by pod IP; its certificate names it by
        // `server_name` (a DaemonSet's pods share one certificate).
        let tls_config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .domain_name(tls.server_name.clone());
        endpoint = endpoint
            .tls_config(tls_config)
            .map_err(|e| format!("cannot set up TLS to the node agent: {e}"))?;
    }
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        // A node agent that went away without closing the connection is
        // noticed within about 30 s.
        .http2_keep_alive_interval(Duration::from_secs(15))
        .keep_alive_timeout(Duration::from_secs(15))
        .keep_alive_while_idle(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot reach the node agent at {}: {e}", config.agent))?;
    let mut client = SandboxRunnerClient::new(channel)
        .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES);
    let (events, rx) = mpsc::channel(EVENT_BUFFER);
    let hello = pb::RunnerEvent {
        event: Some(pb::runner_event::Event::Hello(pb::RunnerHello {
            computer: config.computer.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: agentcomputer_proto::RUNNER_PROTOCOL,
        })),
    };
    events.send(hello).await.map_err(|_| "the stream closed")?;
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    let bearer = format!("Bearer {}", config.token)
        .parse()
        .map_err(|_| "AGENTCOMPUTER_TOKEN has characters a header cannot carry")?;
    req.metadata_mut().insert("authorization", bearer);
    let mut commands = client
        .attach(req)
        .await
        .map_err(|s| match s.code() {
            tonic::Code::FailedPrecondition => Failure::Refused(s.message().to_string()),
            code => Failure::Retry(format!("attach refused: {code:?}: {}", s.message())),
        })?
        .into_inner();
    log!("attached to the node agent at {}", config.agent);
    let runs: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
    // Streamed stdin of the runs started with `stdin_stream`. Unbounded:
    // the agent keeps at most its window unacknowledged per run.
    let stdins: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<pb::RunnerStdin>>>> = Arc::default();
    let ended = loop {
        let cmd = match commands.message().await {
            Ok(Some(cmd)) => cmd,
            Ok(None) => break Ok(()),
            Err(s) => break Err(format!("the stream broke: {:?}: {}", s.code(), s.message())),
        };
        match cmd.command {
            Some(Cmd::Start(start)) => {
                let id = start.run_id;
                let (cancel, cancelled) = oneshot::channel();
                runs.lock().insert(id, cancel);
                let input = start.stdin_stream.then(|| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    stdins.lock().insert(id, tx);
                    rx
                });
                let (reaper, events, runs) = (reaper.clone(), events.clone(), runs.clone());
                let stdins = stdins.clone();
                let workspace = config.workspace.clone();
                tokio::spawn(async move {
                    crate::run::run(start, input, workspace, reaper, events, cancelled).await;
                    runs.lock().remove(&id);
                    stdins.lock().remove(&id);
                });
            }
            Some(Cmd::Stdin(stdin)) => {
                let id = stdin.run_id;
                let end = stdin.end;
                let mut open = stdins.lock();
                if let Some(tx) = open.get(&id) {
                    let _ = tx.send(stdin);
                }
                if end {
                    open.remove(&id);
                }
            }
            Some(Cmd::Cancel(c)) => {
                let cancel = runs.lock().remove(&c.run_id);
                if let Some(cancel) = cancel {
                    let _ = cancel.send(());
                }
            }
            None => log!("ignoring an empty command"),
        }
    };
    // Dropping the senders cancels every run of this stream.
    let left = std::mem::take(&mut *runs.lock());
    if !left.is_empty() {
        log!("killing {} run(s) of the lost stream", left.len());
    }
    drop(left);
    stdins.lock().clear();
    ended.map_err(Failure::Retry)
}
