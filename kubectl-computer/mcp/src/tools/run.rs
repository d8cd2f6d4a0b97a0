//! `exec`: one run on the computer, waited for, its output capped.

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use agentcomputer_runtime_contract::Runtime;
use pb::exec_event::Event;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use super::super::text::Capped;
use super::params::ExecParams;
use super::result::{invalid, success};
use super::router::{Tools, names};
use crate::calls::exec::{ExecArgs, request};
use crate::error::Error;

/// `exec`'s default runtime: the shell runtime when it has every command
/// the script names, else the container runtime.
pub(super) const AUTO: &str = "auto";
/// `exec`'s default and largest cap per output stream.
const OUTPUT_DEFAULT_BYTES: u64 = 50_000;
const OUTPUT_MAX_BYTES: u64 = 1_000_000;
/// `exec`'s default and largest timeout (the node agent's limits).
const EXEC_DEFAULT_SECS: f64 = 60.0;
const EXEC_MAX_SECS: f64 = 3600.0;
/// How long past its timeout a run may take to report its end before it
/// is abandoned here (dropping the stream cancels it on the agent).
const EXEC_GRACE: Duration = Duration::from_secs(15);

impl Tools {
    pub(super) async fn run(&self, p: ExecParams) -> Result<CallToolResult, Error> {
        let enabled = self.agent.runtimes();
        let name = p.runtime.as_deref().unwrap_or(AUTO);
        // `auto`: the agent runs the script in the shell runtime or the
        // container, whichever has its commands (and the computer enables).
        let runtime = if name == AUTO {
            if !enabled.contains(&Runtime::Shell) && !enabled.contains(&Runtime::Container) {
                return Err(invalid(format!(
                    "auto chooses between the shell and container runtimes, and computer {} enables neither; it offers: {}",
                    self.agent.name(),
                    names(enabled)
                )));
            }
            None
        } else {
            let Some(runtime) = Runtime::from_name(name) else {
                return Err(invalid(format!(
                    "unknown runtime {name:?}; this computer offers: auto, {}",
                    names(enabled)
                )));
            };
            if !enabled.contains(&runtime) {
                return Err(invalid(format!(
                    "computer {} does not enable the {name} runtime; it offers: auto, {}",
                    self.agent.name(),
                    names(enabled)
                )));
            }
            Some(runtime)
        };
        if p.input.is_some() && runtime != Some(Runtime::JavaScript) {
            return Err(invalid(
                "input is for the javascript runtime only (a shell script reads stdin)",
            ));
        }
        let secs = p.timeout_seconds.unwrap_or(EXEC_DEFAULT_SECS);
        if !(secs > 0.0 && secs <= EXEC_MAX_SECS) {
            return Err(invalid(format!(
                "timeout_seconds must be more than 0 and at most {EXEC_MAX_SECS}"
            )));
        }
        let timeout = Duration::from_secs_f64(secs);
        let cap = p
            .max_output_bytes
            .unwrap_or(OUTPUT_DEFAULT_BYTES)
            .clamp(1, OUTPUT_MAX_BYTES) as usize;
        let args = ExecArgs {
            computer: self.agent.computer(),
            runtime: runtime.map_or(pb::Runtime::Auto, pb::Runtime::from),
            cwd: p.cwd,
            env: p.env.into_iter().collect(),
            timeout: Some(timeout),
            stdin: !p.stdin.is_empty(),
            input_json: p.input.map(|v| v.to_string()).unwrap_or_default(),
            script: p.script,
            sync: false,
        };
        let req = request(args, p.stdin.into_bytes());
        let instead =
            "write the data to a file with the write tool first and redirect it (`prog < FILE`)";
        // A stdin past one message goes up in chunks (ExecStream).
        let (req, streamed) = if crate::calls::exec::fits(&req) {
            (Some(req), None)
        } else {
            (
                None,
                Some(crate::calls::exec::stream_messages(req, instead)?),
            )
        };
        let mut client = self.agent.client();
        let mut stdout = Capped::new(cap);
        let mut stderr = Capped::new(cap);
        let collect = async {
            let mut stream = match (req, streamed) {
                (Some(req), _) => client.exec(req).await?.into_inner(),
                (None, messages) => client
                    .exec_stream(tokio_stream::iter(messages.unwrap_or_default()))
                    .await?
                    .into_inner(),
            };
            while let Some(event) = stream.message().await? {
                match event.event {
                    Some(Event::Stdout(b)) => stdout.push(&b),
                    Some(Event::Stderr(b)) => stderr.push(&b),
                    Some(Event::Exit(exit)) => return Ok(exit),
                    None => {}
                }
            }
            Err(Error::new(
                "the node agent ended the run without an exit status",
            ))
        };
        let exit = match tokio::time::timeout(timeout + EXEC_GRACE, collect).await {
            Ok(r) => r?,
            // The stream is dropped with the future: the agent cancels the run.
            Err(_) => pb::ExecExit {
                code: -1,
                error: format!(
                    "no exit status {} s after the {secs} s timeout; the run was abandoned",
                    EXEC_GRACE.as_secs()
                ),
                result_json: String::new(),
                duration_ms: (timeout + EXEC_GRACE).as_millis() as u64,
                ..pb::ExecExit::default()
            },
        };
        let mut value = json!({
            "exit_code": exit.code,
            "stdout": stdout.text(),
            "stderr": stderr.text(),
            "duration_ms": exit.duration_ms,
        });
        if !exit.runtime.is_empty() {
            value["runtime"] = json!(exit.runtime);
        }
        if !exit.runtime_reason.is_empty() {
            value["runtime_reason"] = json!(exit.runtime_reason);
        }
        if stdout.omitted() > 0 || stderr.omitted() > 0 {
            value["truncated"] = json!({
                "stdout_bytes_omitted": stdout.omitted(),
                "stderr_bytes_omitted": stderr.omitted(),
            });
        }
        if runtime == Some(Runtime::JavaScript) {
            value["result"] = serde_json::from_str(&exit.result_json).unwrap_or(Value::Null);
        }
        if exit.error.is_empty() {
            Ok(success(value.to_string(), value))
        } else {
            value["error"] = json!(exit.error);
            Ok(CallToolResult::structured_error(value))
        }
    }
}
