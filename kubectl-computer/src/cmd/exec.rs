//! `exec`: run a program and mirror its output and exit status; a
//! JavaScript run's result follows its output on stdout.

use std::io::{Read, Write};

use agentcomputer_proto::CHUNK_BYTES;
use agentcomputer_proto::v1 as pb;
use pb::exec_event::Event;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

pub use agentcomputer_mcp::calls::exec::{ExecArgs, check_size, request};

use crate::client::Client;
use crate::error::{CliError, Result};

/// The messages of an ExecStream call for `req`: the request, then our
/// stdin in chunks of [`CHUNK_BYTES`] read on a blocking thread as the
/// call takes them (a bounded channel: a slow program holds the reading
/// back), then the end. A read error is sent on the returned receiver
/// instead of the end.
fn send_stdin(
    req: pb::ExecRequest,
) -> (
    ReceiverStream<pb::ExecStreamRequest>,
    oneshot::Receiver<CliError>,
) {
    use pb::exec_stream_request::Msg;
    let (tx, rx) = mpsc::channel::<pb::ExecStreamRequest>(4);
    let (fail_tx, fail_rx) = oneshot::channel();
    // A thread of its own, not the runtime's blocking pool: a run that ends
    // without reading all its input must not keep the CLI waiting (in the
    // runtime's shutdown) for a read of stdin that may never return.
    std::thread::spawn(move || {
        let send = |msg| {
            tx.blocking_send(pb::ExecStreamRequest { msg: Some(msg) })
                .is_ok()
        };
        if !send(Msg::Start(req)) {
            return;
        }
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut buf = vec![0u8; CHUNK_BYTES];
            match read_some(&mut stdin, &mut buf) {
                Ok(0) => {
                    send(Msg::StdinEnd(pb::StdinEnd {}));
                    return;
                }
                Ok(n) => {
                    buf.truncate(n);
                    buf.shrink_to_fit();
                    if !send(Msg::Stdin(buf)) {
                        return;
                    }
                }
                Err(e) => {
                    let _ = fail_tx.send(CliError::new(format!("cannot read stdin: {e}")));
                    // A message with nothing in it makes the agent stop
                    // the run too, should the error not reach it first.
                    tx.blocking_send(pb::ExecStreamRequest { msg: None }).ok();
                    return;
                }
            }
        }
    });
    (ReceiverStream::new(rx), fail_rx)
}

/// Reads what is there (at least one byte, unless at the end), filling
/// `buf` when more is at hand, so that a pipe's data goes up in large
/// chunks while an interactive input still goes up line by line.
fn read_some(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Whether our standard input is something a user means to send: a pipe,
/// a socket or a non-empty regular file. A terminal (typed input is not
/// expected here) and a character device such as `/dev/null` are not.
fn stdin_has_data() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    let kind = meta.file_type();
    kind.is_fifo() || kind.is_socket() || (kind.is_file() && meta.len() > 0)
}

/// Streams the run's output to our stdout/stderr as it arrives and returns
/// the program's exit code. The runtime's own error (timeout, output cap) is
/// printed as `error: ...` unless the run already wrote it to stderr. A
/// JavaScript result other than `null` is printed last on stdout as one line
/// of compact JSON, on a line of its own.
pub async fn exec(client: &mut Client, args: ExecArgs) -> Result<i32> {
    let sync = args.sync;
    let auto = args.runtime == pb::Runtime::Auto;
    if !args.stdin && stdin_has_data() {
        eprintln!("warning: standard input is not sent without -i (--stdin)");
    }
    let streamed = args.stdin;
    let req = request(args, Vec::new());
    check_size(
        &req,
        "copy large data to the computer first (kubectl-computer put) and read it from the file (`prog < FILE`)",
    )?;
    // With -i, stdin goes up in chunks (ExecStream) as the program takes
    // it: never all in memory here, and of any size.
    let (mut stream, mut failed) = if streamed {
        let (input, failed) = send_stdin(req);
        (client.exec_stream(input).await?.into_inner(), Some(failed))
    } else {
        (client.exec(req).await?.into_inner(), None)
    };
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    // The end of stderr, to avoid printing the runtime's message twice.
    let mut err_tail: Vec<u8> = Vec::new();
    // Whether stdout so far ends mid-line.
    let mut open_line = false;
    loop {
        let event = match failed.as_mut() {
            Some(read_error) => {
                let step = tokio::select! {
                    biased;
                    error = read_error => Err(error.ok()),
                    event = stream.message() => Ok(event),
                };
                match step {
                    // A local read error ends the run (dropping the call
                    // cancels it) rather than give it a truncated input.
                    Err(Some(e)) => return Err(e),
                    // All of stdin was sent.
                    Err(None) => {
                        failed = None;
                        continue;
                    }
                    Ok(event) => event?,
                }
            }
            None => stream.message().await?,
        };
        let Some(event) = event else { break };
        match event.event {
            Some(Event::Stdout(b)) => {
                // A closed stdout (`| head`) must not fail the run.
                let _ = out.write_all(&b).and_then(|()| out.flush());
                if let Some(&last) = b.last() {
                    open_line = last != b'\n';
                }
            }
            Some(Event::Stderr(b)) => {
                let _ = err.write_all(&b).and_then(|()| err.flush());
                err_tail.extend_from_slice(&b);
                if err_tail.len() > 8192 {
                    err_tail.drain(..err_tail.len() - 4096);
                }
            }
            Some(Event::Exit(exit)) => {
                if auto {
                    let _ = writeln!(err, "{}", ran_in(&exit));
                }
                if !exit.error.is_empty() {
                    let tail = String::from_utf8_lossy(&err_tail);
                    if !tail.contains(&exit.error) {
                        let _ = writeln!(err, "error: {}", exit.error);
                    }
                }
                if !exit.result_json.is_empty() && exit.result_json != "null" {
                    let sep = if open_line { "\n" } else { "" };
                    let _ = writeln!(out, "{sep}{}", exit.result_json).and_then(|()| out.flush());
                }
                if sync && exit.backup_position == 0 && exit.code == 0 {
                    // The run succeeded but its changes may not survive the node.
                    return Ok(1);
                }
                return Ok(exit.code);
            }
            None => {}
        }
    }
    Err(CliError::new(
        "the node agent ended the run without an exit status",
    ))
}

/// The line `--runtime auto` prints on stderr after the run: `auto: ran in
/// the container runtime (python3 is not a shell runtime command)`.
fn ran_in(exit: &pb::ExecExit) -> String {
    let runtime = if exit.runtime.is_empty() {
        "an unnamed"
    } else {
        &exit.runtime
    };
    if exit.runtime_reason.is_empty() {
        format!("auto: ran in the {runtime} runtime")
    } else {
        format!(
            "auto: ran in the {runtime} runtime ({})",
            exit.runtime_reason
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_says_where_it_ran_and_why() {
        let exit = pb::ExecExit {
            runtime: "container".into(),
            runtime_reason: "python3 is not a shell runtime command".into(),
            ..Default::default()
        };
        assert_eq!(
            ran_in(&exit),
            "auto: ran in the container runtime (python3 is not a shell runtime command)"
        );
        let exit = pb::ExecExit {
            runtime: "shell".into(),
            ..Default::default()
        };
        assert_eq!(ran_in(&exit), "auto: ran in the shell runtime");
    }
}
