//! The container runtime: a computer's script run by real binaries
//! (`python3`, `node`, `git`, a compiler...) with the computer's files at
//! `/workspace`.
//!
//! The contract is the one every runtime of Agent Computer keeps: a bash
//! script (`bash -c`), a working directory under `/workspace`, environment,
//! stdin, a timeout and an output cap go in; stdout and stderr come out as
//! they are produced, then the exit code, or a one-line error when the
//! runtime stopped the run (timeout, cancellation, output cap). The whole
//! process tree is gone when [`Backend::run`] returns.
//!
//! [`Backend`] is the seam between the contract and where the script runs:
//! * [`local::LocalSandbox`]: a bubblewrap sandbox on this host over the
//!   computer's FUSE mount (local mode; needs root).
//! * in a cluster the script runs in the computer's sandbox pod, by the
//!   `agentcomputer-runner` there; the node agent dispatches to it beside
//!   this trait (its `ContainerRuntime`), keeping the same contract, exit
//!   codes and messages (`docs/container-runtime.md`).
//!
//! Network: [`Network`] says what the sandbox gets; the network namespace
//! with an egress proxy listener inside is made by [`netns::ProxyNetns`].

pub mod cgroup;
pub mod launch;
pub mod local;
pub mod netns;
mod output;
pub mod seccomp;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Exit statuses of a run the runtime stopped, and the output chunks it
/// sends: those of every runtime.
pub use agentcomputer_runtime_contract::{
    EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_START_FAILED, EXIT_TIMEOUT, OutputChunk,
};

/// Where the container runtime's paths are: the computer's files.
pub const WORKSPACE: &str = "/workspace";

/// Resource limits of one run. Zero in a field means "no limit of this kind".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory of the whole process tree in bytes (cgroup `memory.max` or
    /// `memory.limit_in_bytes`; without a memory cgroup, not enforced).
    pub memory_bytes: u64,
    /// Processes and threads alive at once in the tree (cgroup `pids.max`,
    /// and `RLIMIT_NPROC` as a fallback without a pids cgroup).
    pub max_processes: u64,
    /// CPU seconds each process may use (`RLIMIT_CPU`; SIGXCPU then SIGKILL).
    pub cpu_seconds: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`); under
    /// `/workspace` the computer's quota applies as well.
    pub file_size_bytes: u64,
}

impl Default for Limits {
    /// 256 MiB of memory (the default exec budget of every runtime; the
    /// agent passes the budget admission reserved), 1024 processes, 1024
    /// open files, no CPU-seconds or file-size limit beyond the run's
    /// timeout and the computer's quota.
    fn default() -> Limits {
        Limits {
            memory_bytes: 256 << 20,
            max_processes: 1024,
            cpu_seconds: 0,
            open_files: 1024,
            file_size_bytes: 0,
        }
    }
}

/// What network the sandbox gets.
#[derive(Debug)]
pub enum Network {
    /// A network namespace with only a loopback interface: nothing outside
    /// the sandbox is reachable.
    None,
    /// Join this network namespace (an `nsfs` descriptor, e.g.
    /// [`netns::ProxyNetns::namespace`]), whose only way out is the egress
    /// proxy listening inside it; the proxy variables in `env` say where.
    Namespace(OwnedFd),
}

/// One run of a script.
#[derive(Debug)]
pub struct RunSpec {
    /// The computer's name, for logs and cgroup names.
    pub computer: String,
    /// Host directory holding the computer's files (its FUSE mount); seen
    /// as [`WORKSPACE`] inside.
    pub workspace: PathBuf,
    /// A bash script, run as `bash -c SCRIPT`.
    pub script: String,
    /// Absolute working directory inside the sandbox (`/workspace` or below).
    pub cwd: String,
    /// Environment, on top of a small default (`PATH`, `HOME=/workspace`,
    /// `TMPDIR=/tmp`, `LANG=C.UTF-8`); later entries win.
    pub env: Vec<(String, String)>,
    /// Bytes given on stdin, then end of file.
    pub stdin: Vec<u8>,
    /// Input written after `stdin` as it arrives; stdin closes when its
    /// sender is dropped. The script reading slowly holds the sender back
    /// (the channel is bounded), and a script that closes its stdin ends
    /// the copying.
    pub stdin_stream: Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
    /// Wall-clock time after which the whole tree is killed.
    pub timeout: Duration,
    /// Most bytes of stdout and stderr together; past that the output is
    /// cut there and the tree is killed.
    pub max_output_bytes: u64,
    /// The sandbox's network.
    pub network: Network,
    /// Resource limits.
    pub limits: Limits,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The script's exit status (128+N for a signal N), or one of the
    /// `EXIT_*` constants when the runtime stopped it.
    pub exit_code: i32,
    /// Set when the runtime ended the run: one line for people, also
    /// written to stderr.
    pub error: Option<String>,
}

/// Why a backend cannot run anything at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the container runtime is not available on this node agent: {0}")]
pub struct Unavailable(pub String);

/// A place where container runs happen.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// Runs `spec`, sending its output to `out` as it comes, until it ends,
    /// its timeout passes, its output passes the cap, `cancel` is cancelled
    /// or `out` is closed (the caller went away). Every process it started
    /// is gone when this returns.
    async fn run(
        &self,
        spec: RunSpec,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome;
}

/// `5s`, `1.5s`, `250ms`.
pub(crate) fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
