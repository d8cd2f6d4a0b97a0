//! Local mode: the node agent with no cluster, serving the API on loopback
//! over the computers of one data directory.
//!
//! The data directory is private to the agent's user ([`crate::private`]) and
//! every call must carry the agent token kept in it ([`crate::local::token`]); with
//! a certificate the API is served over TLS ([`crate::tls`]).

pub mod containers;
pub mod holder;
mod token;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::InterceptorLayer;
use tonic::transport::ServerTlsConfig;
use tracing::{info, warn};

use std::sync::Arc;

use crate::admission::{Admission, AdmissionConfig};
use crate::api::Service;
use crate::descriptors::Descriptors;
use crate::gate::{GateConfig, GatedListener};
use crate::local::containers::Containers;
use crate::local::token::AgentToken;
use crate::registry::Registry;
use crate::share::{ShareConfig, Sharer, Unbound};

/// Default address of the API in local mode.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7433";

/// How long a shutdown waits for running calls before it stops anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Settings of local mode.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Directory holding `computers/<name>/`.
    pub data_dir: PathBuf,
    /// Idle time after which an unused computer's engine is closed.
    pub idle_timeout: Duration,
    /// Serve the API over TLS with this identity ([`crate::tls::server_tls`]);
    /// `None` serves plain HTTP/2.
    pub tls: Option<ServerTlsConfig>,
    /// The listener where the egress proxy also serves host-side clients
    /// holding a running container exec's credential, bound before the
    /// agent announces itself ([`bind_optional`]); `None`: nowhere
    /// (sandboxes reach the proxy inside their own network namespace
    /// either way, at [`agentcomputer_container::netns::PROXY_PORT`]).
    pub proxy_listen: Option<Arc<std::net::TcpListener>>,
    /// Bounds on Read and Write streams.
    pub streams: crate::api::streams::StreamLimits,
    /// Limits on running execs ([`AdmissionConfig::for_node`] fits the
    /// machine).
    pub admission: AdmissionConfig,
    /// Keep host mounts alive across restarts of the agent through a
    /// descriptor holder process ([`crate::local::holder`]); `None`: host mounts
    /// end with the agent. Needs root (the agent mounts with `mount(2)`).
    pub fuse_holder: Option<FuseHolder>,
    /// Where share links are served ([`crate::share`]); `None`: nowhere,
    /// and `Share` calls fail with `FAILED_PRECONDITION`.
    pub share: Option<LocalShare>,
    /// Where every computer is backed up continuously ([`crate::backup`]),
    /// opened and probed ([`crate::backup::open_checked`]); `None`:
    /// nowhere, and `Sync` fails with `FAILED_PRECONDITION`.
    pub backup: Option<Arc<crate::backup::BackupTarget>>,
}

/// How local mode keeps its host mounts across restarts.
#[derive(Debug, Clone)]
pub struct FuseHolder {
    /// The `node-agent` executable, run as `node-agent fuse-holder`.
    pub exe: PathBuf,
    /// How long the holder keeps connections while no agent is connected.
    pub grace: Duration,
    /// Set before the shutdown future completes to hand the mounts over
    /// (leave them to the holder for the next agent) instead of
    /// unmounting them.
    pub hand_over: Arc<std::sync::atomic::AtomicBool>,
}

/// Default address of the share server in local mode: loopback only.
pub const DEFAULT_SHARE_LISTEN: &str = "127.0.0.1:7434";

/// The share server of local mode.
#[derive(Debug, Clone)]
pub struct LocalShare {
    /// Its listener, bound before the agent announces itself so that links
    /// work as soon as clients know the agent ([`LocalShare::bind`]).
    pub listener: Arc<std::net::TcpListener>,
    /// Where links point; `None`: `http://ADDR/` with the bound address.
    pub base_url: Option<url::Url>,
    /// Most downloads at once ([`crate::share::ShareConfig::max_downloads`]).
    pub max_downloads: usize,
    /// Most downloads of one computer at once
    /// ([`crate::share::ShareConfig::max_downloads_per_computer`]).
    pub max_downloads_per_computer: Option<usize>,
    /// Bytes a second a download must move
    /// ([`crate::share::ShareConfig::min_rate`]).
    pub min_rate: u64,
}

impl LocalShare {
    /// The share server listening on `addr` (port 0 picks a free port),
    /// with links pointing at it. Errors: the address cannot be bound
    /// (named in the message).
    pub fn bind(addr: std::net::SocketAddr) -> anyhow::Result<LocalShare> {
        Ok(LocalShare::on(bind_optional(
            addr,
            true,
            "share links",
            "--share-listen",
        )?))
    }

    /// The share server on a listener already bound ([`bind_optional`]),
    /// with links pointing at it.
    pub fn on(listener: std::net::TcpListener) -> LocalShare {
        LocalShare {
            listener: Arc::new(listener),
            base_url: None,
            max_downloads: crate::share::DEFAULT_MAX_DOWNLOADS,
            max_downloads_per_computer: None,
            min_rate: crate::share::DEFAULT_MIN_RATE,
        }
    }
}

/// Binds the listener of an optional service of local mode (share links,
/// the egress proxy), non-blocking, for `what` set by `flag`. An address
/// the user gave (`explicit`) must be bound as given: taken, it is an
/// error naming the address and the flag. A default address that is taken
/// (another agent's, or Squid's 3128) does not stop the agent: the service
/// takes a free port on the same host address instead, and a warning says
/// where it is and which flag chooses one.
pub fn bind_optional(
    addr: std::net::SocketAddr,
    explicit: bool,
    what: &str,
    flag: &str,
) -> anyhow::Result<std::net::TcpListener> {
    let listener = match std::net::TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            let any = std::net::SocketAddr::new(addr.ip(), 0);
            let l = std::net::TcpListener::bind(any)
                .with_context(|| format!("cannot listen on {any} for {what} ({flag})"))?;
            warn!(
                "port {} is taken: {what} listening on {} instead (choose with {flag} ADDR, or {flag} off)",
                addr.port(),
                l.local_addr()?,
            );
            l
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot listen on {addr} for {what} ({flag})"));
        }
    };
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Makes the data directory ready for clients before the agent announces
/// its address: creates it or makes it private to this user
/// ([`crate::private::secure_data_dir`], logging what it tightened), and
/// loads or makes the agent token `<data_dir>/token`. Calling it again is
/// harmless: the token is kept. Errors name the directory or file.
pub fn prepare(data_dir: &std::path::Path) -> anyhow::Result<AgentToken> {
    crate::private::secure_data_dir(data_dir)?;
    Ok(AgentToken::load_or_create(data_dir)?)
}

/// Default address of the egress proxy in local mode: loopback only.
pub const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:3128";

/// The default data directory: `$XDG_DATA_HOME/agentcomputer`, else
/// `~/.local/share/agentcomputer` (the `dirs` crate's `data_dir`, XDG Base
/// Directory spec). `None` when no home directory is known.
pub fn default_data_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("agentcomputer"))
}

/// Removes what a killed previous run on `data_dir` left mounted inside
/// the data directory (the container runs' workspaces). Its host mounts are
/// not removed: the registry keeps them dead until they are mounted again
/// or unmounted ([`crate::registry::mount_records::recheck_recorded`]). Failures are logged:
/// they must not stop the agent from starting.
pub fn cleanup_stale_mounts(data_dir: &std::path::Path) {
    Containers::cleanup_stale(data_dir);
}

/// Serves the API on `listener` until `shutdown` completes. Then running
/// execs are cancelled, calls get [`SHUTDOWN_GRACE`] to finish, and every
/// computer is unmounted and closed cleanly (its usage recorded). Call
/// [`cleanup_stale_mounts`] before, so a killed previous run's container mounts are gone,
/// and [`prepare`] before printing the address, so clients find the token.
/// Every call must carry the agent token. Errors: the data directory or the
/// token cannot be prepared, or the server fails.
pub async fn serve<S>(listener: TcpListener, config: LocalConfig, shutdown: S) -> anyhow::Result<()>
where
    S: Future<Output = ()> + Send + 'static,
{
    let token = prepare(&config.data_dir)?;
    let descriptors = Descriptors::raise();
    // The holder's live mounts are resumed before anything probes them (a
    // probe of a mount nobody serves would wait).
    let holder = match &config.fuse_holder {
        Some(h) => {
            let (dir, exe, grace) = (config.data_dir.clone(), h.exe.clone(), h.grace);
            let started = tokio::task::spawn_blocking(move || {
                let client = crate::registry::HolderClient::connect_or_start(&dir, &exe, grace)?;
                let held = client.list()?;
                Ok::<_, std::io::Error>((client, held))
            })
            .await?;
            match started {
                Ok(c) => Some(c),
                Err(e) => {
                    warn!(error = %e, "no FUSE descriptor holder: host mounts will end with this process");
                    None
                }
            }
        }
        None => None,
    };
    let held_paths: Vec<PathBuf> = holder
        .as_ref()
        .map(|(_, held)| held.iter().map(|(h, _)| h.path.clone()).collect())
        .unwrap_or_default();
    let registry = Registry::new_with_held(&config.data_dir, config.idle_timeout, &held_paths)
        .with_context(|| {
            format!(
                "cannot prepare data directory {}",
                config.data_dir.display()
            )
        })?;
    if let Some(target) = config.backup.clone() {
        info!(target = ?target, "backing up every computer");
        registry.set_backup(target, crate::registry::BackupIds::Random);
    }
    if let Some((client, held)) = holder {
        registry.set_holder(Arc::new(client));
        if !held.is_empty() {
            let n = held.len();
            let resumed = registry.resume_mounts(held).await;
            info!(
                resumed,
                of = n,
                "host mounts of the previous run taken over"
            );
        }
    }
    let addr = listener.local_addr()?;
    info!(%addr, data_dir = %config.data_dir.display(), idle_timeout = ?config.idle_timeout, tls = config.tls.is_some(), admission = ?config.admission, "node agent serving");

    let stop = CancellationToken::new();
    // Half the descriptors outside connections may hold go to the egress
    // proxies, a quarter each to the API and share ports.
    let containers = Arc::new(Containers::local(&config.data_dir).with_connection_limits(
        agentcomputer_proxy::ConnectionLimits::within(descriptors.outside() / 2),
    ));
    if let Some(proxy) = &config.proxy_listen {
        let proxy_listener =
            TcpListener::from_std(proxy.try_clone()?).context("cannot serve the egress proxy")?;
        info!(addr = %proxy_listener.local_addr()?, "egress proxy serving");
        crate::control_addresses::add_own_port(proxy_listener.local_addr()?.port());
        let containers = Arc::clone(&containers);
        let stop = stop.clone();
        tokio::spawn(async move { containers.serve_proxy(proxy_listener, stop).await });
    }
    let mut sharer = None;
    if let Some(share) = &config.share {
        let listener = TcpListener::from_std(share.listener.try_clone()?)
            .context("cannot serve share links")?;
        let bound = listener.local_addr()?;
        let base_url = match &share.base_url {
            Some(url) => url.clone(),
            None => url::Url::parse(&format!("http://{bound}/"))
                .context("cannot make the base URL of share links")?,
        };
        info!(addr = %bound, base_url = %base_url, "share links serving");
        let mut share_config = ShareConfig::new(base_url);
        share_config.max_downloads = share.max_downloads;
        share_config.max_downloads_per_computer = share.max_downloads_per_computer;
        share_config.min_rate = share.min_rate;
        share_config.gate = GateConfig::within(descriptors.outside() / 4);
        let made = Sharer::new(registry.clone(), Arc::new(Unbound), share_config);
        tokio::spawn(crate::share::http::serve(
            listener,
            made.clone(),
            stop.clone(),
        ));
        sharer = Some(made);
    }
    tokio::spawn(registry.clone().run_sweeper(stop.clone()));
    // A killed holder is replaced, so the mounts keep surviving this process.
    tokio::spawn(registry.clone().watch_holder(stop.clone()));
    // Compile the JavaScript built-ins now rather than in the first exec.
    tokio::task::spawn_blocking(agentcomputer_js::warm_up);

    let on_signal = {
        let registry = registry.clone();
        let stop = stop.clone();
        async move {
            shutdown.await;
            info!("shutting down: cancelling running execs");
            registry.cancel_all();
            stop.cancel();
        }
    };
    let incoming = GatedListener::new(
        listener,
        GateConfig::within(descriptors.outside() / 4),
        "api",
    )
    .into_stream();
    let mut builder = tonic::transport::Server::builder()
        // Authenticated connections whose peer is gone end too.
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    if let Some(tls) = config.tls {
        builder = builder
            .tls_config(tls)
            .context("cannot set up TLS for the API")?;
    }
    let token = Arc::new(token);
    let token_for_gate = Arc::clone(&token);
    let mut service = Service::new(registry.clone(), token)
        .with_containers(containers)
        .with_stream_limits(config.streams)
        .with_admission(Admission::new(config.admission.clone()));
    if let Some(sharer) = sharer {
        service = service.with_sharer(sharer);
    }
    let server = builder
        .layer(InterceptorLayer::new(AuthenticatedConnections(Arc::clone(
            &token_for_gate,
        ))))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, on_signal);
    let forced = async {
        stop.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => result.context("gRPC server failed")?,
        _ = forced => warn!("calls still running after the shutdown grace period; stopping anyway"),
    }
    stop.cancel();
    let hand_over = config
        .fuse_holder
        .as_ref()
        .is_some_and(|h| h.hand_over.load(std::sync::atomic::Ordering::SeqCst));
    if hand_over {
        let left = registry.leave_mounts();
        info!(
            mounts = left,
            "handing host mounts over to the next agent process (the descriptor holder keeps them)"
        );
    }
    registry.close_all().await;
    info!("node agent stopped");
    Ok(())
}

/// Marks a connection authenticated ([`crate::gate`]) once a request on it
/// carries the agent token; refuses nothing itself (every call checks the
/// token again).
#[derive(Clone)]
struct AuthenticatedConnections(Arc<AgentToken>);

impl tonic::service::Interceptor for AuthenticatedConnections {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if self
            .0
            .check(crate::auth::bearer_token(req.metadata()))
            .is_ok()
            && let Some(ticket) = crate::gate::ticket_of(req.extensions())
        {
            ticket.authenticated();
        }
        Ok(req)
    }
}
