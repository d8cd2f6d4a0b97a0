//! The container runtime as the agent runs it: for each run, the
//! computer's FUSE mount in a private directory, the network its egress
//! policy allows (none, or a namespace whose only way out is an egress
//! proxy serving just this computer), then the run itself on a
//! [`Backend`] (in local mode, the bubblewrap sandbox of
//! `agentcomputer-container`).
//!
//! Layout under the data directory: `run/` (mode 0700) holds one
//! mountpoint per running exec (`run/exec/<64 random hex digits>/`, named
//! by no counter or computer name, so nothing a caller knows names it),
//! which is unmounted and removed when the run ends; a killed agent's
//! leftovers are detached and removed by [`Containers::cleanup_stale`] at
//! the next start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentcomputer_container::local::{LocalSandbox, SANDBOX_GID, SANDBOX_UID};
use agentcomputer_container::netns::{PROXY_PORT, ProxyNetns};
use agentcomputer_container::{
    Backend, Limits, Network, Outcome, OutputChunk, RunSpec, Unavailable,
};
use agentcomputer_egress::Mode;
use agentcomputer_fs::{Fs, ROOT_INO, SetAttr};
use agentcomputer_fuse::MountOptions;
use agentcomputer_proxy::{Caller, ConnectionLimits, Credentials, Denials, Fixed, Metrics, Proxy};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::container_runtime::{ContainerRun, ContainerRuntime};
use crate::blocking::blocking;

/// `NO_PROXY` inside the sandbox: its own loopback services are reached
/// directly.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

#[tonic::async_trait]
impl ContainerRuntime for Containers {
    fn unavailable_reason(&self) -> Option<String> {
        self.backend.as_ref().err().map(ToString::to_string)
    }

    fn egress_denials(&self) -> Option<Denials> {
        Some(self.denials.clone())
    }

    async fn run(
        &self,
        run: ContainerRun,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome {
        Containers::run(self, run, out, cancel).await
    }
}

/// The container runtime of one agent: a backend, or why there is none.
pub struct Containers {
    backend: Result<Arc<dyn Backend>, Unavailable>,
    run_dir: PathBuf,
    metrics: Metrics,
    credentials: Credentials,
    /// Connections all of this agent's proxies may hold, per computer and
    /// together.
    limits: ConnectionLimits,
    /// The refusals of every proxy of this runtime.
    denials: Denials,
}

/// The key the host-side proxy listener's connections are counted under
/// (a name no computer can have).
const HOST_SIDE_KEY: &str = "host-side listener";

impl Containers {
    /// Local mode: the bubblewrap sandbox, when this host can build all of
    /// its walls; otherwise a runtime that refuses every run with the
    /// reason (logged now as a warning).
    pub fn local(data_dir: &Path) -> Containers {
        let run_dir = data_dir.join(crate::layout::RUN_DIR);
        if let Err(e) = private_dir(&run_dir) {
            warn!(path = %run_dir.display(), error = %e, "cannot prepare the container runtime's directory");
        }
        let backend = LocalSandbox::probe().map(|sandbox| {
            info!(cgroup_controllers = ?sandbox.controllers(), "container runtime: bubblewrap sandbox ready");
            if let Some(weaker) = sandbox.weaker_walls() {
                warn!("container runtime: {weaker}");
            }
            if let Some(account) = sandbox.host_account_of_sandbox_uid() {
                warn!(
                    "container runtime: the sandbox user, uid {SANDBOX_UID}, is also the host account \
                     {account:?}: processes of that account can read the environment and files of running \
                     container runs and signal or trace them (docs/security.md, \"Privilege boundaries\"); \
                     on a shared host, run the agent where uid {SANDBOX_UID} is no one's account"
                );
            }
            Arc::new(sandbox) as Arc<dyn Backend>
        });
        if let Err(why) = &backend {
            warn!("{why}");
        }
        Containers::with_backend(backend, run_dir)
    }

    /// A runtime over any backend (`Err`: refuse every run with that
    /// reason); mountpoints go below `run_dir/exec`.
    pub fn with_backend(
        backend: Result<Arc<dyn Backend>, Unavailable>,
        run_dir: PathBuf,
    ) -> Containers {
        Containers {
            backend,
            run_dir,
            metrics: Metrics::new(),
            credentials: Credentials::new(),
            limits: ConnectionLimits::new(usize::MAX, agentcomputer_proxy::DEFAULT_PER_COMPUTER),
            denials: Denials::new(),
        }
    }

    /// The same runtime with its proxies' connections bounded by `limits`
    /// ([`ConnectionLimits::within`] the descriptors the agent gives them).
    pub fn with_connection_limits(mut self, limits: ConnectionLimits) -> Containers {
        self.limits = limits;
        self
    }

    /// Serves the egress proxy on `listener` for host-side clients that
    /// present a running exec's credential (`Proxy-Authorization: Basic`,
    /// the credential sandboxes get in `HTTP_PROXY`), until `stop`.
    pub async fn serve_proxy(&self, listener: tokio::net::TcpListener, stop: CancellationToken) {
        let proxy = Proxy::new(Arc::new(self.credentials.clone()), self.metrics.clone())
            .with_limits(self.limits.clone(), HOST_SIDE_KEY)
            .with_denials(self.denials.clone());
        proxy.serve(listener, stop).await
    }

    /// Detaches and removes the exec mountpoints a killed agent left in
    /// `data_dir/run/exec`. Failures are logged.
    pub fn cleanup_stale(data_dir: &Path) {
        let exec_dir = data_dir.join(crate::layout::RUN_DIR).join("exec");
        let Ok(entries) = std::fs::read_dir(&exec_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
            if let Err(e) = std::fs::remove_dir(&path) {
                warn!(path = %path.display(), error = %e, "could not remove a stale container mountpoint");
            }
        }
    }

    /// Runs `run` to its end, sending its output to `out`. Refused runs
    /// (no backend) end at once with the reason as their error.
    pub async fn run(
        &self,
        run: ContainerRun,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome {
        let backend = match &self.backend {
            Ok(b) => Arc::clone(b),
            Err(why) => {
                return Outcome {
                    exit_code: agentcomputer_container::EXIT_START_FAILED,
                    error: Some(why.to_string()),
                };
            }
        };
        // A name nobody can guess: the directory is the computer's files
        // on the host while the run lasts.
        let mountpoint = self
            .run_dir
            .join(crate::layout::EXEC_RUN_DIR)
            .join(random_token());
        let failed = |what: String| Outcome {
            exit_code: agentcomputer_container::EXIT_START_FAILED,
            error: Some(format!("container: cannot start the sandbox: {what}")),
        };
        let mount = {
            let fs = run.fs.clone();
            let dir = mountpoint.clone();
            let run_dir = self.run_dir.clone();
            let computer = run.computer.clone();
            blocking(move || mount_workspace(fs, &run_dir, &dir, &computer)).await
        };
        let mount = match mount {
            Ok(m) => m,
            Err(e) => return failed(format!("cannot mount the computer's files: {e}")),
        };

        let stop_proxy = CancellationToken::new();
        let mut env = Vec::new();
        let mut _credential = None;
        let network = match run.egress.config().mode {
            Mode::DenyAll => Network::None,
            // allow-all too goes through the proxy: on a shared host network
            // the metadata and node-local exclusions could not be enforced.
            Mode::AllowAll | Mode::AllowList => {
                let caller = Caller {
                    computer: run.computer.clone(),
                    key: run.computer.clone(),
                    policy: Arc::clone(&run.egress),
                };
                let netns = match blocking(|| ProxyNetns::new(PROXY_PORT)).await {
                    Ok(ns) => ns,
                    Err(e) => {
                        unmount(mount, &mountpoint).await;
                        return failed(format!("cannot make the network namespace: {e}"));
                    }
                };
                let (namespace, listener) = netns.into_parts();
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        unmount(mount, &mountpoint).await;
                        return failed(format!("cannot serve the egress proxy: {e}"));
                    }
                };
                let proxy = Proxy::new(Arc::new(Fixed(caller.clone())), self.metrics.clone())
                    .with_limits(self.limits.clone(), &run.computer)
                    .with_denials(self.denials.clone());
                tokio::spawn(proxy.serve(listener, stop_proxy.clone()));
                let token = random_token();
                _credential = Some(self.credentials.issue(token.clone(), caller));
                let url = format!("http://computer:{token}@127.0.0.1:{PROXY_PORT}");
                for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                    env.push((name.to_string(), url.clone()));
                }
                for name in ["NO_PROXY", "no_proxy"] {
                    env.push((name.to_string(), NO_PROXY.to_string()));
                }
                Network::Namespace(namespace)
            }
        };
        // The caller's variables come last and win.
        env.extend(run.env);
        let spec = RunSpec {
            computer: run.computer.clone(),
            workspace: mountpoint.clone(),
            script: run.script,
            cwd: run.cwd,
            env,
            stdin: run.stdin,
            stdin_stream: run.stdin_stream,
            timeout: run.timeout,
            max_output_bytes: run.max_output_bytes,
            network,
            limits: Limits {
                memory_bytes: match run.memory_limit_bytes {
                    0 => Limits::default().memory_bytes,
                    n => n,
                },
                ..Limits::default()
            },
        };
        let outcome = backend.run(spec, out, cancel).await;
        stop_proxy.cancel();
        unmount(mount, &mountpoint).await;
        outcome
    }
}

/// Mounts `fs` at `dir` (made here, below `run_dir` of mode 0700). The
/// root directory is given to the sandbox user when it still has the
/// engine's initial owner, root, so that `/workspace` is writable inside.
fn mount_workspace(
    fs: Fs,
    run_dir: &Path,
    dir: &Path,
    computer: &str,
) -> std::io::Result<agentcomputer_fuse::MountHandle> {
    private_dir(run_dir)?;
    private_dir(&run_dir.join(crate::layout::EXEC_RUN_DIR))?;
    std::fs::create_dir(dir)?;
    let root = fs.getattr(ROOT_INO).map_err(std::io::Error::other)?;
    if root.uid == 0 && root.gid == 0 {
        fs.setattr(
            ROOT_INO,
            &SetAttr {
                uid: Some(SANDBOX_UID),
                gid: Some(SANDBOX_GID),
                ..SetAttr::default()
            },
        )
        .map_err(std::io::Error::other)?;
    }
    let opts = MountOptions {
        fsname: agentcomputer_handover::fsname::source(computer),
        ..MountOptions::default()
    };
    match agentcomputer_fuse::mount(fs, dir, opts) {
        Ok(m) => Ok(m),
        Err(e) => {
            let _ = std::fs::remove_dir(dir);
            Err(e)
        }
    }
}

/// Makes `dir` (and missing parents) and sets it to mode 0700, as
/// everything in the data directory is.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

async fn unmount(mount: agentcomputer_fuse::MountHandle, dir: &Path) {
    let dir = dir.to_path_buf();
    let result = blocking(move || {
        mount.unmount()?;
        std::fs::remove_dir(&dir)
    })
    .await;
    if let Err(e) = result {
        warn!(error = %e, "could not unmount a container run's workspace");
    }
}

/// 64 hex characters from the OS's CSPRNG (`rand`'s thread RNG, reseeded
/// from it).
fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The proxy's address as given on the command line, or `None` for `off`.
pub fn parse_proxy_listen(text: &str) -> Result<Option<SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| format!("--proxy-listen takes ADDR:PORT or off, not {text:?}"))
}
