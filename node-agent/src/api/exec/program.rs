//! What an exec runs: a request for one of the in-process runtimes, started
//! the same way for each so that one pump serves them all.

use std::sync::Arc;

use agentcomputer_egress::Policy;
use agentcomputer_fs::Fs;
use agentcomputer_js::{JsOutcome, JsRequest, RunOptions};
use agentcomputer_proto::v1::exec_event::Event;
use agentcomputer_runtime_contract::{OutputChunk, Runtime};
use agentcomputer_shell::{ExecOutcome, ExecRequest as ShellRequest, SHELL_OWNER, ShellLimits};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fetch::PolicyFetcher;
use crate::api::container_runtime::{ContainerRun, ContainerRuntime};

/// Output chunks buffered ahead of a slow client; past that the program
/// waits.
const OUTPUT_BUFFER: usize = 64;

/// Largest `result_json` sent (bytes): the exit event must fit in one gRPC
/// message of [`agentcomputer_proto::MAX_MESSAGE_BYTES`], with room for the
/// other fields.
pub const MAX_RESULT_BYTES: usize = agentcomputer_proto::MAX_MESSAGE_BYTES - 64 * 1024;

/// A validated program for one runtime.
pub enum Program {
    /// A bash script for the shell runtime, under its limits.
    Shell(ShellRequest, ShellLimits),
    /// An ES module for the JavaScript runtime; `fetch` obeys the policy.
    JavaScript(JsRequest, Arc<Policy>),
    /// A bash script for the container runtime.
    Container(Arc<dyn ContainerRuntime>, ContainerRun),
}

impl Program {
    /// Limits the program's memory to `bytes`, the budget admission
    /// reserved for it: the shell's and QuickJS's limits, or the container's
    /// cgroup `memory.max`, so that what the run may use is what the pool
    /// counts.
    pub fn set_memory(&mut self, bytes: u64) {
        match self {
            Program::Shell(_, limits) => limits.memory_bytes = bytes,
            Program::JavaScript(req, _) => {
                req.memory_limit_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            }
            Program::Container(_, run) => run.memory_limit_bytes = bytes,
        }
    }

    /// Starts the program on `fs`. The in-process runtimes run it on an OS
    /// thread of their own and the container in processes of its own, so
    /// the task spawned here only waits.
    /// `scratch_dir` is where a JavaScript exec makes its `/tmp`.
    pub fn start(
        self,
        fs: Fs,
        cancel: CancellationToken,
        scratch_dir: std::path::PathBuf,
    ) -> Started {
        match self {
            Program::Shell(req, limits) => {
                let (tx, rx) = mpsc::channel(OUTPUT_BUFFER);
                let done = tokio::spawn(async move {
                    let outcome =
                        agentcomputer_shell::run_with_limits(fs, req, tx, cancel, limits).await;
                    Finished::from(outcome)
                });
                Started {
                    output: Output(rx),
                    done,
                    runtime: Runtime::Shell,
                }
            }
            Program::JavaScript(req, egress) => {
                // Files made by either runtime get the same owner, so `ls -l`
                // shows one identity whichever runtime wrote them.
                let options = RunOptions {
                    owner: SHELL_OWNER,
                    fetcher: Arc::new(PolicyFetcher::new(egress)),
                    scratch_dir: Some(scratch_dir),
                };
                let (tx, rx) = mpsc::channel(OUTPUT_BUFFER);
                let done = tokio::spawn(async move {
                    let outcome = agentcomputer_js::run_with(fs, req, tx, cancel, options).await;
                    Finished::from(outcome)
                });
                Started {
                    output: Output(rx),
                    done,
                    runtime: Runtime::JavaScript,
                }
            }
            Program::Container(containers, run) => {
                let (tx, rx) = mpsc::channel(OUTPUT_BUFFER);
                let done = tokio::spawn(async move {
                    let denials = containers.egress_denials();
                    let (started, computer, notes) =
                        (std::time::Instant::now(), run.computer.clone(), tx.clone());
                    let o = containers.run(run, tx, cancel).await;
                    // A program behind the proxy saw only a status: say why.
                    for line in denials
                        .map(|d| d.since(&computer, started))
                        .unwrap_or_default()
                    {
                        let _ = notes
                            .send(OutputChunk::Stderr(format!("{line}\n").into_bytes()))
                            .await;
                    }
                    Finished {
                        exit_code: o.exit_code,
                        error: o.error,
                        result_json: String::new(),
                    }
                });
                Started {
                    output: Output(rx),
                    done,
                    runtime: Runtime::Container,
                }
            }
        }
    }
}

/// A running program: its output stream and its end.
pub struct Started {
    /// Output in the order the program produced it; closes once the runtime
    /// has let go of it, which may be shortly after `done` completes.
    pub output: Output,
    /// How the run ended.
    pub done: JoinHandle<Finished>,
    /// The runtime, for messages.
    pub runtime: Runtime,
}

/// The output receiver of whichever runtime: they all send the contract's
/// [`OutputChunk`].
pub struct Output(pub mpsc::Receiver<OutputChunk>);

impl Output {
    /// The next chunk as an Exec event; `None` once the channel is closed
    /// and empty.
    pub async fn recv(&mut self) -> Option<Event> {
        self.0.recv().await.map(Event::from)
    }
}

/// How a run ended, whatever its runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The program's exit status.
    pub exit_code: i32,
    /// Why the runtime ended the run, if it did.
    pub error: Option<String>,
    /// The JSON result (JavaScript only; empty for the shell).
    pub result_json: String,
}

impl Finished {
    /// A run that did not end by itself, with `error` saying why.
    pub fn failed(exit_code: i32, error: String) -> Finished {
        Finished {
            exit_code,
            error: Some(error),
            result_json: String::new(),
        }
    }
}

impl From<ExecOutcome> for Finished {
    fn from(o: ExecOutcome) -> Finished {
        Finished {
            exit_code: o.exit_code,
            error: o.error,
            result_json: String::new(),
        }
    }
}

impl From<JsOutcome> for Finished {
    /// `result_json` is always JSON: `null` when the exec failed. A result
    /// too big for the exit message fails the exec instead of the stream.
    fn from(o: JsOutcome) -> Finished {
        let result_json = match &o.result {
            Some(value) => value.to_string(),
            None => "null".to_string(),
        };
        if result_json.len() > MAX_RESULT_BYTES {
            return Finished {
                exit_code: agentcomputer_js::EXIT_FAILURE,
                error: Some(format!(
                    "javascript: the result is {} bytes of JSON, more than the {MAX_RESULT_BYTES} an exec can return; write it to a file instead",
                    result_json.len()
                )),
                result_json: "null".to_string(),
            };
        }
        Finished {
            exit_code: o.exit_code,
            error: o.error,
            result_json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn javascript_results_are_always_json() {
        let ok = Finished::from(JsOutcome {
            exit_code: 0,
            result: Some(serde_json::json!({"n": 3, "s": "a\"b"})),
            error: None,
        });
        assert_eq!(ok.result_json, r#"{"n":3,"s":"a\"b"}"#);
        let failed = Finished::from(JsOutcome {
            exit_code: 1,
            result: None,
            error: Some("Error: boom".into()),
        });
        assert_eq!(
            (failed.result_json.as_str(), failed.error.as_deref()),
            ("null", Some("Error: boom"))
        );
    }

    #[test]
    fn an_oversized_result_fails_the_exec() {
        let big = "x".repeat(MAX_RESULT_BYTES);
        let f = Finished::from(JsOutcome {
            exit_code: 0,
            result: Some(serde_json::Value::String(big)),
            error: None,
        });
        assert_eq!((f.exit_code, f.result_json.as_str()), (1, "null"));
        assert!(f.error.unwrap().contains("write it to a file instead"));
    }

    #[test]
    fn shell_runs_have_no_result() {
        let f = Finished::from(ExecOutcome {
            exit_code: 3,
            error: None,
        });
        assert_eq!(
            f,
            Finished {
                exit_code: 3,
                error: None,
                result_json: String::new()
            }
        );
    }
}
