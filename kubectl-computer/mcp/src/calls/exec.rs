//! The exec call's request: what a run is given, and the check that the
//! node agent can take it.

use std::collections::HashMap;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;

use crate::error::{Error, Result};

/// What `exec` runs.
pub struct ExecArgs {
    /// The computer, as the API's `computer` field names it.
    pub computer: String,
    /// Shell, JavaScript or container.
    pub runtime: pb::Runtime,
    /// The working directory, relative to `/workspace` unless absolute;
    /// empty is `/workspace`.
    pub cwd: String,
    /// Environment variables added for the run, as `(NAME, value)`.
    pub env: Vec<(String, String)>,
    /// The run's time limit; `None` (or zero) is the agent's default.
    pub timeout: Option<Duration>,
    /// Whether the caller has standard input to pass.
    pub stdin: bool,
    /// JSON text for a JavaScript module's default export; empty is null.
    pub input_json: String,
    /// The program: a bash script, a JavaScript module or a `bash -c`
    /// command line.
    pub script: String,
    /// Wait for the run's changes to reach the backup store before its exit.
    pub sync: bool,
}

/// The API request of a run of `args` with `stdin` as its standard input
/// (`args.stdin` only says whether the caller wanted to read it). No output
/// cap and the node agent's default memory budget; a timeout of zero or
/// none is the agent's default (60 s).
pub fn request(args: ExecArgs, stdin: Vec<u8>) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: args.computer,
        runtime: args.runtime as i32,
        script: args.script,
        cwd: args.cwd,
        env: args.env.into_iter().collect::<HashMap<_, _>>(),
        stdin,
        timeout_ms: args.timeout.map_or(0, |t| t.as_millis().max(1) as u64),
        max_output_bytes: 0,
        input_json: args.input_json,
        // The node agent's default budget.
        memory_limit_bytes: 0,
        sync: args.sync,
    }
}

/// Refuses a request the node agent could not take: one encoded larger
/// than its gRPC message limit
/// ([`MAX_MESSAGE_BYTES`](agentcomputer_proto::MAX_MESSAGE_BYTES), 4 MiB),
/// which would otherwise reset the connection with nothing said. The
/// script, standard input, environment and JavaScript input all count.
/// `instead` tells the caller what to do (put the data in a file first).
/// Errors: `E2BIG: the exec request is N bytes ...`.
pub fn check_size(req: &pb::ExecRequest, instead: &str) -> Result<()> {
    use prost::Message;
    let size = req.encoded_len();
    let limit = agentcomputer_proto::MAX_MESSAGE_BYTES;
    if size > limit {
        return Err(Error::new(format!(
            "E2BIG: the exec request is {size} bytes (script, stdin, env and input together), \
             more than the node agent's message limit of {limit} bytes (4 MiB); {instead}"
        )));
    }
    Ok(())
}

/// Whether `req` fits in one Exec message with its `stdin`; when it does
/// not, [`stream_messages`] sends the same run through ExecStream.
pub fn fits(req: &pb::ExecRequest) -> bool {
    use prost::Message;
    req.encoded_len() <= agentcomputer_proto::MAX_MESSAGE_BYTES
}

/// The ExecStream messages of `req`: the request without its stdin, the
/// stdin in chunks of [`agentcomputer_proto::CHUNK_BYTES`], then the end.
/// Errors: the request is too large even without its stdin (`E2BIG`, see
/// [`check_size`]).
pub fn stream_messages(
    mut req: pb::ExecRequest,
    instead: &str,
) -> Result<Vec<pb::ExecStreamRequest>> {
    use pb::exec_stream_request::Msg;
    let stdin = std::mem::take(&mut req.stdin);
    check_size(&req, instead)?;
    let mut messages = vec![pb::ExecStreamRequest {
        msg: Some(Msg::Start(req)),
    }];
    for chunk in stdin.chunks(agentcomputer_proto::CHUNK_BYTES) {
        messages.push(pb::ExecStreamRequest {
            msg: Some(Msg::Stdin(chunk.to_vec())),
        });
    }
    messages.push(pb::ExecStreamRequest {
        msg: Some(Msg::StdinEnd(pb::StdinEnd {})),
    });
    Ok(messages)
}
