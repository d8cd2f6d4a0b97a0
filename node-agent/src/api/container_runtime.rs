//! The contract between the exec call and whatever runs container execs:
//! the local bubblewrap sandbox ([`crate::local::containers`]) or, in a
//! cluster, the computer's sandbox pod
//! (`crate::cluster::sandboxes::Sandboxes`).

use std::sync::Arc;

use agentcomputer_container::{Outcome, OutputChunk};
use agentcomputer_egress::Policy;
use agentcomputer_fs::Fs;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where an agent's container execs go: the local sandbox ([`Containers`])
/// or, in a cluster, the computer's sandbox pod
/// (`crate::cluster::sandboxes::Sandboxes`). The exec call keeps the
/// contract (limits, events, cancellation) whichever runs the script.
#[tonic::async_trait]
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Why no container run can start on this agent at all (refused with
    /// FAILED_PRECONDITION before the computer is looked at).
    fn unavailable_reason(&self) -> Option<String>;

    /// Why computer `key` (its registry key) cannot run a container exec
    /// now or soon, asked once the computer is known to enable the runtime
    /// (refused with FAILED_PRECONDITION). The default: nothing stops it.
    async fn not_ready(&self, key: &str) -> Option<String> {
        let _ = key;
        None
    }

    /// Waits until computer `key` can take a run (in a cluster: its sandbox
    /// pod, started again if it was stopped when idle, has attached),
    /// sending one human-readable line per step of the wait to `progress`
    /// (the exec shows them on stderr). `cancel` ends the wait. Errors:
    /// why no run can start (the kubelet's reason for a pod that cannot
    /// run, a start slower than allowed, a cancelled wait). The default:
    /// ready at once.
    async fn prepare(
        &self,
        key: &str,
        progress: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        let _ = (key, progress, cancel);
        Ok(())
    }

    /// Where this runtime's egress proxy records the refusals it makes, for
    /// the exec whose program was refused to report them (a program
    /// behind a proxy sees only a status). The default: none recorded.
    fn egress_denials(&self) -> Option<agentcomputer_proxy::Denials> {
        None
    }

    /// Runs `run` to its end, sending its output to `out`; `cancel` (or
    /// `out` closing) stops it. Every process of the run is gone, or being
    /// killed, when this returns.
    async fn run(
        &self,
        run: ContainerRun,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome;
}

/// What an exec asks of the container runtime (already validated).
pub struct ContainerRun {
    /// The computer's registry key (its name locally, its uid in a cluster).
    pub computer: String,
    /// Its files (the local sandbox mounts them; a sandbox pod has them
    /// through its volume).
    pub fs: Fs,
    /// Its egress policy (the local sandbox enforces it; in a cluster the
    /// operator's NetworkPolicy does).
    pub egress: Arc<Policy>,
    pub script: String,
    /// Absolute path inside the sandbox, `/workspace` or below.
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    /// Input that follows `stdin` as the caller sends it (ExecStream); the
    /// end of input when its sender is dropped.
    pub stdin_stream: Option<mpsc::Receiver<Vec<u8>>>,
    pub timeout: std::time::Duration,
    pub max_output_bytes: u64,
    /// Memory of the whole process tree in bytes: the exec's memory budget
    /// as admission reserved it from the agent's exec memory, so the pool
    /// counts what the sandbox may use; 0 (only outside the API) takes
    /// [`agentcomputer_container::Limits::default`]'s.
    pub memory_limit_bytes: u64,
}

/// The container runtime of an agent started without one: every run is
/// refused with `reason`.
pub struct NoContainers(pub agentcomputer_container::Unavailable);

#[tonic::async_trait]
impl ContainerRuntime for NoContainers {
    fn unavailable_reason(&self) -> Option<String> {
        Some(self.0.to_string())
    }

    async fn run(
        &self,
        _run: ContainerRun,
        _out: mpsc::Sender<OutputChunk>,
        _cancel: CancellationToken,
    ) -> Outcome {
        // Never reached: the exec call asks `unavailable_reason` first.
        Outcome {
            exit_code: agentcomputer_container::EXIT_START_FAILED,
            error: Some(self.0.to_string()),
        }
    }
}
