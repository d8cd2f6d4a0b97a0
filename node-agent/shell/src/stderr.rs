//! stdout and stderr in the order the script wrote them.
//!
//! bashkit's live output writes each command's stdout and stderr into two
//! in-memory pipes, drained by two pumps in the same task; the interpreter
//! yields only every 64th command, so `echo out1; echo err1 >&2; echo out2`
//! had filled both pipes before either pump ran and the order between the
//! streams was gone.
//!
//! So the script's fd 2 is not bashkit's stderr pipe: the script runs after
//! `exec 2>>PATH` (on its first line, so `$LINENO` is unchanged; `$_` is
//! restored after it), and
//! `PATH` is this module's [`Sink`] in the runtime's filesystem
//! ([`SandboxFs`](crate::SandboxFs)). bashkit writes a command's stderr to
//! an `exec` target with one awaited filesystem call when the command ends
//! (and a streaming command's through the same call as it goes), in the
//! order the script produced it. Before the sink hands the bytes on, it
//! lets the task run until the output gate has been idle for a few turns:
//! in between, the stdout pump takes
//! everything the script wrote to stdout before this stderr (the
//! interpreter waits in the sink meanwhile, so nothing later can be in the
//! pipe) and queues it on the output gate, whose sends go out in the order
//! they were started. stdout after the stderr is written only once the sink
//! returned. The caller's channel then sees both streams in the script's
//! order, at the granularity bashkit writes them (per command, or per
//! chunk of a streaming command).
//!
//! The path is not listed anywhere and reads as missing; a script that
//! redirects fd 2 itself (`exec 2>log`, `2>&1`) gets what it asked for.

use crate::output::{OutputGate, Refusal};
use crate::stop::StopFlag;
use bashkit::normalize_path;
use std::path::Path;
use std::sync::Arc;

/// Where the script's fd 2 points (an `exec 2>>` target).
pub(crate) const PATH: &str = "/.agentcomputer-stderr";

/// The sink lets the task run until no delivery has started on the gate
/// for this many turns in a row: every pump of the execution has then been
/// polled with nothing left to hand on (a pump can need more than one turn:
/// its delivery runs under bashkit's budget timer and tokio's cooperative
/// budget).
const QUIET_TURNS: usize = 4;

/// At most this many turns per write, so a pump that keeps delivering
/// (a producer writing stdout in a pipeline stage) cannot hold stderr back
/// for long.
const MAX_TURNS: usize = 256;

/// `script` with fd 2 pointed at the sink, on the same first line. The
/// `:` gives `$_` back the value bashkit starts a script with (the shell's
/// path, as bash's `$_` is), which the `exec` replaced.
pub(crate) fn wrap(script: &str) -> String {
    format!("exec 2>>{PATH}; : {START_UNDERSCORE}; {script}")
}

/// `$_` at the start of a bashkit script.
pub(crate) const START_UNDERSCORE: &str = "/bin/bash";

/// Whether `path` names the sink.
pub(crate) fn is_sink(path: &Path) -> bool {
    normalize_path(path) == Path::new(PATH)
}

/// The receiving end of the script's fd 2.
pub(crate) struct Sink {
    gate: Arc<OutputGate>,
    stop: Arc<StopFlag>,
}

impl Sink {
    pub(crate) fn new(gate: Arc<OutputGate>, stop: Arc<StopFlag>) -> Self {
        Self { gate, stop }
    }

    /// Delivers `bytes` as stderr after the stdout written before them.
    pub(crate) async fn write(&self, bytes: &[u8]) -> bashkit::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut seen = self.gate.deliveries();
        let mut quiet = 0;
        for _ in 0..MAX_TURNS {
            tokio::task::yield_now().await;
            let now = self.gate.deliveries();
            if now == seen {
                quiet += 1;
                if quiet == QUIET_TURNS {
                    break;
                }
            } else {
                seen = now;
                quiet = 0;
            }
        }
        match self.gate.deliver(true, bytes.to_vec()).await {
            Ok(()) => Ok(()),
            Err(refusal) => {
                // A failed write to fd 2 is not fatal to a bash script:
                // stop it here, or a loop writing only to stderr would run
                // on to its timeout.
                self.stop.raise();
                Err(match refusal {
                    Refusal::CapReached => bashkit::Error::Execution("output limit reached".into()),
                    Refusal::Closed => bashkit::Error::Cancelled,
                })
            }
        }
    }
}
