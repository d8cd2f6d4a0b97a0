//! `agentcomputer-runner`: the container runtime's side inside a computer's
//! sandbox pod (cluster mode).
//!
//! ```text
//! agentcomputer-runner install DIR          copy this executable to DIR/agentcomputer-runner
//! agentcomputer-runner serve [--workspace DIR]
//! ```
//!
//! `install` is what the sandbox pod's init container runs (from the node
//! agent's image) to put the runner into an `emptyDir` the sandbox
//! container mounts; the binary is static, so it runs in any image.
//!
//! `serve` is the sandbox container's main process. It dials the node agent
//! (`SandboxRunner.Attach`, see proto/agentcomputer/v1/agentcomputer.proto),
//! runs the container execs the agent sends, streams their output back,
//! reconnects with bounded backoff whenever the stream breaks, and exits
//! on SIGTERM or SIGINT (killing its runs first), or with status 3
//! ([`agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE`]) when the agent
//! refuses its attach protocol revision (FAILED_PRECONDITION), after
//! writing the agent's message to the container's termination message
//! file, where the operator reads it; or with status 4
//! ([`agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST`]) when the workspace
//! mount has ended for good (its node agent did not come back within the
//! mounter's grace period: `workspace.rs`), after writing
//! "workspace mount lost: ..." there. Environment:
//!
//! * `AGENTCOMPUTER_AGENT`: `HOST:PORT` of the node agent's gRPC API;
//! * `AGENTCOMPUTER_COMPUTER`: the computer (its uid);
//! * `AGENTCOMPUTER_TOKEN`: the computer's token, sent as
//!   `authorization: Bearer <token>`;
//! * `AGENTCOMPUTER_WORKSPACE` (or `--workspace`): where the computer's
//!   files are, default `/workspace`; a run's `/workspace/...` paths are
//!   taken below it.
//!
//! * `AGENTCOMPUTER_TERMINATION_LOG`: the termination message file,
//!   default `/dev/termination-log` (the kubelet's default
//!   `terminationMessagePath`); written only if it exists.
//!
//! These variables are removed from the runs' environment.

mod attach;
mod procs;
mod reaper;
mod run;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Name of the executable `install` writes.
pub const EXE_NAME: &str = "agentcomputer-runner";

/// Variables of the runner itself, never passed to a run.
pub const OWN_VARS: [&str; 7] = [
    "AGENTCOMPUTER_AGENT",
    "AGENTCOMPUTER_AGENT_CA",
    "AGENTCOMPUTER_AGENT_TLS_NAME",
    "AGENTCOMPUTER_COMPUTER",
    "AGENTCOMPUTER_TERMINATION_LOG",
    "AGENTCOMPUTER_TOKEN",
    "AGENTCOMPUTER_WORKSPACE",
];

/// The kubelet's default `terminationMessagePath`.
const TERMINATION_LOG: &str = "/dev/termination-log";

const USAGE: &str =
    "usage: agentcomputer-runner install DIR | agentcomputer-runner serve [--workspace DIR]";

/// Prints one log line on stderr (the container's log).
macro_rules! log {
    ($($t:tt)*) => { eprintln!("agentcomputer-runner: {}", format_args!($($t)*)) };
}
pub(crate) use log;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["install", dir] => install(Path::new(dir)).map_err(Exit::Error),
        ["serve"] => serve(None),
        ["serve", "--workspace", dir] => serve(Some(PathBuf::from(dir))),
        ["--help"] | ["-h"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(Exit::Error(USAGE.to_string())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Exit::Refused(why)) => {
            log!("the node agent refuses this runner: {why}");
            write_termination_message(&why);
            ExitCode::from(agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE)
        }
        Err(Exit::WorkspaceLost(why)) => {
            log!("{why}");
            write_termination_message(&why);
            ExitCode::from(agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST)
        }
        Err(Exit::Error(e)) => {
            log!("{e}");
            ExitCode::from(2)
        }
    }
}

/// Why the runner stops other than on a signal.
enum Exit {
    /// Bad usage or setup (status 2).
    Error(String),
    /// The node agent refuses this runner (status 3).
    Refused(String),
    /// The workspace's FUSE connection has ended (status 4).
    WorkspaceLost(String),
}

impl From<String> for Exit {
    fn from(e: String) -> Self {
        Exit::Error(e)
    }
}

/// Writes `why` to the termination message file when it exists (the
/// kubelet creates it, world-writable, in every container; the kubelet
/// reads at most 4096 bytes of it).
fn write_termination_message(why: &str) {
    let path = std::env::var_os("AGENTCOMPUTER_TERMINATION_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(TERMINATION_LOG));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path);
    let written = file.and_then(|mut f| {
        use std::io::Write;
        let mut end = why.len().min(4096);
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        f.write_all(&why.as_bytes()[..end])
    });
    if let Err(e) = written {
        log!(
            "cannot write the termination message to {}: {e}",
            path.display()
        );
    }
}

/// Copies this executable (`/proc/self/exe`) to `dir/agentcomputer-runner`,
/// mode 0755, replacing it atomically (write to a temporary name, rename).
fn install(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let target = dir.join(EXE_NAME);
    let tmp = dir.join(format!(".{EXE_NAME}.tmp"));
    std::fs::copy("/proc/self/exe", &tmp)
        .map_err(|e| format!("cannot copy this executable to {}: {e}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &target)
        .map_err(|e| format!("cannot rename to {}: {e}", target.display()))?;
    log!("installed {}", target.display());
    Ok(())
}

/// Settings of `serve`, from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `HOST:PORT` of the node agent.
    pub agent: String,
    /// TLS to the agent (`AGENTCOMPUTER_AGENT_CA`, PEM, and
    /// `AGENTCOMPUTER_AGENT_TLS_NAME`); None: plaintext.
    pub tls: Option<Tls>,
    /// The computer named in the hello.
    pub computer: String,
    /// The bearer token.
    pub token: String,
    /// Host directory seen as `/workspace` by runs.
    pub workspace: PathBuf,
}

/// How the runner checks the node agent's certificate.
#[derive(Debug, Clone)]
pub struct Tls {
    /// PEM certificates to trust.
    pub ca_pem: String,
    /// The name the agent's certificate carries (a DNS SAN).
    pub server_name: String,
}

/// TLS settings from the environment: both variables or neither.
fn tls_from_env() -> Result<Option<Tls>, String> {
    let get = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match (
        get("AGENTCOMPUTER_AGENT_CA"),
        get("AGENTCOMPUTER_AGENT_TLS_NAME"),
    ) {
        (None, None) => Ok(None),
        (Some(ca_pem), Some(server_name)) => {
            if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
                return Err("AGENTCOMPUTER_AGENT_CA holds no PEM certificate".into());
            }
            Ok(Some(Tls {
                ca_pem,
                server_name: server_name.trim().to_string(),
            }))
        }
        _ => Err(
            "AGENTCOMPUTER_AGENT_CA and AGENTCOMPUTER_AGENT_TLS_NAME must be set together".into(),
        ),
    }
}

fn required(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(format!("{name} is not set; {USAGE}")),
    }
}

fn serve(workspace: Option<PathBuf>) -> Result<(), Exit> {
    let workspace = workspace
        .or_else(|| std::env::var_os("AGENTCOMPUTER_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/workspace"));
    // May wait while the node agent is away; a container restarted over a
    // mount that ended for good stops here at once.
    match std::fs::metadata(&workspace) {
        Ok(m) if m.is_dir() => {}
        Err(e)
            if e.raw_os_error()
                .map(nix::errno::Errno::from_raw)
                .is_some_and(workspace::is_lost) =>
        {
            let errno = nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or_default());
            return Err(Exit::WorkspaceLost(workspace::lost_message(
                &workspace, errno,
            )));
        }
        _ => {
            return Err(Exit::Error(format!(
                "the workspace {} is not a directory",
                workspace.display()
            )));
        }
    }
    // The token is in this process's environment, which the scripts (same
    // uid) could read at /proc/1/environ. A non-dumpable process's /proc
    // files belong to root and it cannot be traced (prctl(2),
    // PR_SET_DUMPABLE; proc(5)), so the scripts never see the token; they
    // start dumpable again after execve, which does not matter for them.
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| format!("cannot make the runner non-dumpable: {e}"))?;
    let config = Config {
        agent: required("AGENTCOMPUTER_AGENT")?,
        tls: tls_from_env()?,
        computer: required("AGENTCOMPUTER_COMPUTER")?,
        token: required("AGENTCOMPUTER_TOKEN")?,
        workspace,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let reaper = reaper::Reaper::start().map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
        let lost = workspace::watch(config.workspace.clone())
            .map_err(|e| format!("cannot start the workspace check: {e}"))?;
        let serving = attach::serve(config, reaper.clone());
        let ended = tokio::select! {
            attach::Refused(why) = serving => Some(Exit::Refused(why)),
            Ok(why) = lost => Some(Exit::WorkspaceLost(why)),
            _ = term.recv() => { log!("SIGTERM: killing the runs and exiting"); None }
            _ = int.recv() => { log!("SIGINT: killing the runs and exiting"); None }
        };
        tokio::task::spawn_blocking(move || reaper.kill_descendants())
            .await
            .map_err(|e| e.to_string())?;
        match ended {
            Some(exit) => Err(exit),
            None => Ok(()),
        }
    })
}
