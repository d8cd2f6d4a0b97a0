//! The stdio transport with a check in front of `rmcp`: every line read
//! from standard input is looked at before the SDK sees it, and a line the
//! SDK would drop without a word is answered here with a JSON-RPC error, so
//! the host is never left waiting.
//!
//! `rmcp`'s line transport (`transport::async_rw`, 3.x) ignores a line that
//! is not JSON (invalid UTF-8, a lone surrogate escape such as `\ud800`,
//! plain garbage), discards a line over its length limit, and cannot decode
//! a batch (an array). JSON-RPC 2.0 (<https://www.jsonrpc.org/specification>,
//! section 5.1) wants an answer: `-32700` (parse error) for text that is
//! not JSON, `-32600` (invalid request) for what is not a request, with the
//! request's `id` when it can be recovered and `null` otherwise; a batch is
//! answered with an array. MCP itself has no batches since its 2025-06-18
//! revision, so each request of a batch gets `-32600`.
//!
//! Lines that pass (a JSON object) go to `rmcp` unchanged through an
//! in-memory pipe. Its output and the errors made here are written to
//! standard output whole line by whole line, never interleaved.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Longest line accepted, newline included: `rmcp`'s own limit
/// (`rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH`, 16 MiB), so a line
/// passed on is never dropped there.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// Bytes of an over-long line kept to look for its `id`.
const ID_SCAN: usize = 64 * 1024;

/// Capacity of the pipes to and from `rmcp`, in bytes.
const PIPE: usize = 256 * 1024;

/// JSON-RPC 2.0 error codes (specification section 5.1).
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// What to do with one input line.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Give it to `rmcp` as it is.
    Pass,
    /// Nothing to do (an empty line, a batch of notifications only).
    Skip,
    /// Answer with this line (without its newline).
    Answer(String),
}

/// One JSON-RPC error response.
fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The verdict on one complete line (without its line break).
fn check_line(line: &[u8]) -> Verdict {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            let why = if std::str::from_utf8(line).is_err() {
                "Parse error: the message is not valid UTF-8".to_string()
            } else {
                format!("Parse error: {e}")
            };
            let id = scan_id(line).unwrap_or(Value::Null);
            return Verdict::Answer(error_response(id, PARSE_ERROR, &why).to_string());
        }
    };
    match value {
        Value::Object(_) => Verdict::Pass,
        Value::Array(items) if items.is_empty() => Verdict::Answer(
            error_response(Value::Null, INVALID_REQUEST, "Invalid Request: empty batch")
                .to_string(),
        ),
        Value::Array(items) => {
            let answers: Vec<Value> = items
                .iter()
                .filter_map(|item| match item {
                    // A request (it has an id) is answered; a notification not.
                    Value::Object(m) => m.get("id").filter(|id| !id.is_null()).map(|id| {
                        error_response(
                            id.clone(),
                            INVALID_REQUEST,
                            "Invalid Request: JSON-RPC batches are not supported (MCP has none since 2025-06-18); send each message on its own line",
                        )
                    }),
                    _ => Some(error_response(
                        Value::Null,
                        INVALID_REQUEST,
                        "Invalid Request: a batch item is not an object",
                    )),
                })
                .collect();
            if answers.is_empty() {
                Verdict::Skip
            } else {
                Verdict::Answer(Value::Array(answers).to_string())
            }
        }
        _ => Verdict::Answer(
            error_response(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message must be a JSON object",
            )
            .to_string(),
        ),
    }
}

/// The `id` of a JSON-RPC message that cannot be parsed whole (bad UTF-8
/// or a lone surrogate elsewhere in it, or only its start kept): the value
/// of the top-level key `"id"`, when it is a number or a string that
/// decodes. Scans the bytes as JSON tokens, so braces and quotes inside
/// strings do not mislead it.
fn scan_id(text: &[u8]) -> Option<Value> {
    let mut depth = 0usize;
    let mut expect_key = false;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let end = string_end(text, i)?;
                if depth == 1 && expect_key {
                    expect_key = false;
                    if &text[i..=end] == b"\"id\"" {
                        return id_value(&text[end + 1..]);
                    }
                }
                i = end;
            }
            b'{' | b'[' => {
                depth += 1;
                expect_key = depth == 1 && text[i] == b'{';
            }
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index of the closing quote of the string opening at `start`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The number or string after `:` at the start of `rest`.
fn id_value(rest: &[u8]) -> Option<Value> {
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    let token = match rest.first()? {
        b'"' => &rest[..=string_end(rest, 0)?],
        b'-' | b'0'..=b'9' => {
            let len = rest
                .iter()
                .take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                .count();
            &rest[..len]
        }
        _ => return None,
    };
    match serde_json::from_slice(token).ok()? {
        v @ (Value::Number(_) | Value::String(_)) => Some(v),
        _ => None,
    }
}

/// One unit of input.
enum Input {
    /// A whole line, without its line break (`\n` or `\r\n`).
    Line(Vec<u8>),
    /// A line longer than [`MAX_LINE`]: its first [`ID_SCAN`] bytes; the
    /// rest is skipped.
    Oversized(Vec<u8>),
}

/// Reads lines of at most [`MAX_LINE`] bytes, newline included, without
/// ever holding more.
struct Lines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of an over-long line already reported.
    discarding: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(input: R) -> Self {
        Lines {
            reader: BufReader::with_capacity(PIPE, input),
            line: Vec::new(),
            discarding: false,
        }
    }

    /// The next line, or `None` at the end of input or on a read error (a
    /// last line without a newline is dropped, as `rmcp` drops it).
    async fn next(&mut self) -> Option<Input> {
        loop {
            let (take, ended, oversized) = {
                let available = match self.reader.fill_buf().await {
                    Ok([]) | Err(_) => return None,
                    Ok(a) => a,
                };
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |n| n + 1);
                let oversized = !self.discarding && self.line.len() + take > MAX_LINE;
                if oversized {
                    let room = ID_SCAN.saturating_sub(self.line.len()).min(take);
                    self.line.extend_from_slice(&available[..room]);
                } else if !self.discarding {
                    self.line.extend_from_slice(&available[..take]);
                }
                (take, newline.is_some(), oversized)
            };
            self.reader.consume(take);
            if self.discarding {
                self.discarding = !ended;
                continue;
            }
            if oversized {
                self.discarding = !ended;
                let mut prefix = std::mem::take(&mut self.line);
                prefix.truncate(ID_SCAN);
                return Some(Input::Oversized(prefix));
            }
            if ended {
                let mut line = std::mem::take(&mut self.line);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Some(Input::Line(line));
            }
        }
    }
}

/// Streams for `rmcp` (its input and output) standing in for standard
/// input and output, and the task writing standard output: await it after
/// the service ended so every answer is flushed.
pub(crate) fn transport() -> (DuplexStream, DuplexStream, JoinHandle<()>) {
    guard(tokio::io::stdin(), tokio::io::stdout())
}

/// [`transport`] over any `input` and `output`.
pub(crate) fn guard<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream, JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_rmcp, rmcp_in) = tokio::io::duplex(PIPE);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE);
    let (answers, mut answered) = mpsc::channel::<String>(16);

    tokio::spawn(async move {
        let mut lines = Lines::new(input);
        while let Some(unit) = lines.next().await {
            let verdict = match &unit {
                Input::Line(line) => check_line(line),
                Input::Oversized(prefix) => {
                    let id = scan_id(prefix).unwrap_or(Value::Null);
                    let message = format!(
                        "Invalid Request: the message is longer than {MAX_LINE} bytes, the most this server reads"
                    );
                    Verdict::Answer(error_response(id, INVALID_REQUEST, &message).to_string())
                }
            };
            let delivered = match (verdict, unit) {
                (Verdict::Pass, Input::Line(mut line)) => {
                    line.push(b'\n');
                    to_rmcp.write_all(&line).await.is_ok()
                }
                (Verdict::Answer(text), _) => answers.send(text).await.is_ok(),
                _ => true,
            };
            if !delivered {
                break;
            }
        }
        // End of input: rmcp sees it and ends the service.
        let _ = to_rmcp.shutdown().await;
    });

    let writer = tokio::spawn(async move {
        let mut output = output;
        let mut from_rmcp = BufReader::with_capacity(PIPE, from_rmcp);
        let mut line = Vec::new();
        loop {
            tokio::select! {
                // `read_until` keeps what it read in `line` when the other
                // branch wins, so no output is lost.
                read = from_rmcp.read_until(b'\n', &mut line) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) if line.ends_with(b"\n") => {
                            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                                return;
                            }
                            line.clear();
                        }
                        Ok(_) => {}
                    }
                }
                Some(text) = answered.recv() => {
                    let whole = format!("{text}\n");
                    if output.write_all(whole.as_bytes()).await.is_err() || output.flush().await.is_err() {
                        return;
                    }
                }
            }
        }
        // rmcp is done; what it wrote last without a newline, then flush.
        if !line.is_empty() {
            let _ = output.write_all(&line).await;
        }
        while let Ok(text) = answered.try_recv() {
            let _ = output.write_all(format!("{text}\n").as_bytes()).await;
        }
        let _ = output.flush().await;
    });

    (rmcp_in, rmcp_out, writer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &[u8]) -> Value {
        match check_line(line) {
            Verdict::Answer(text) => serde_json::from_str(&text).unwrap(),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn objects_pass_and_blank_lines_are_skipped() {
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Pass
        );
        assert_eq!(
            check_line(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"x\"}"),
            Verdict::Pass
        );
        assert_eq!(check_line(b"   "), Verdict::Skip);
    }

    #[test]
    fn unparsable_lines_get_a_parse_error_with_the_id() {
        let a =
            answer(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"path":"\ud800"}}"#);
        assert_eq!(a["id"], 8);
        assert_eq!(a["error"]["code"], -32700);
        let a = answer(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"p\":\"\xff\"},\"id\":\"s-1\"}",
        );
        assert_eq!(a["id"], "s-1");
        assert!(a["error"]["message"].as_str().unwrap().contains("UTF-8"));
        let a = answer(b"not json");
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
    }

    #[test]
    fn batches_are_answered_per_request() {
        let a = answer(
            br#"[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","method":"n"},3]"#,
        );
        let items = a.as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["id"], 7);
        assert_eq!(items[0]["error"]["code"], -32600);
        assert_eq!(items[1]["id"], Value::Null);
        assert_eq!(
            check_line(br#"[{"jsonrpc":"2.0","method":"n"}]"#),
            Verdict::Skip
        );
        assert_eq!(answer(b"[]")["error"]["code"], -32600);
        assert_eq!(answer(b"42")["error"]["code"], -32600);
    }

    #[test]
    fn ids_are_found_only_at_the_top_level() {
        assert_eq!(scan_id(br#"{"params":{"id":1},"id":2"#), Some(json!(2)));
        assert_eq!(
            scan_id(br#"{"a":"\"id\":3","id" : -4.5e1}"#),
            Some(json!(-45.0))
        );
        assert_eq!(scan_id(br#"{"method":"x","params":{"id":1"#), None);
        assert_eq!(scan_id(br#"{"id":null}"#), None);
        assert_eq!(scan_id(br#"{"id":"\ud800"}"#), None);
        assert_eq!(
            scan_id(br#"{"x":["id","id"],"id":"ok"}"#),
            Some(json!("ok"))
        );
    }

    #[tokio::test]
    async fn every_line_gets_an_answer_and_good_lines_go_through() {
        let (mut host, server_stdin) = tokio::io::duplex(1 << 16);
        let (server_stdout, host_out) = tokio::io::duplex(1 << 16);
        let (mut rmcp_in, mut rmcp_out, writer) = guard(server_stdin, server_stdout);
        let mut huge = br#"{"jsonrpc":"2.0","id":10,"method":"x","params":""#.to_vec();
        huge.resize(MAX_LINE + 10, b'a');
        huge.extend_from_slice(b"\"}\n");
        let feed = tokio::spawn(async move {
            host.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n")
                .await
                .unwrap();
            host.write_all(&huge).await.unwrap();
            host.write_all(b"[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]\n")
                .await
                .unwrap();
            host.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n")
                .await
                .unwrap();
        });
        // rmcp's side: the two objects, unchanged but for the CR.
        let mut passed = Vec::new();
        let mut reader = BufReader::new(&mut rmcp_in);
        for _ in 0..2 {
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).await.unwrap();
            passed.push(String::from_utf8(line).unwrap());
        }
        assert_eq!(
            passed,
            [
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n"
            ]
        );
        feed.await.unwrap();
        rmcp_out.write_all(b"{\"from\":\"rmcp\"}\n").await.unwrap();
        drop(rmcp_out);
        writer.await.unwrap();
        let mut out = String::new();
        let mut host_out = BufReader::new(host_out);
        tokio::io::AsyncReadExt::read_to_string(&mut host_out, &mut out)
            .await
            .unwrap();
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{out}");
        let too_long = lines
            .iter()
            .find(|l| l["id"] == 10)
            .expect("oversized answered");
        assert_eq!(too_long["error"]["code"], -32600);
        assert!(
            lines.iter().any(|l| l[0]["id"] == 2),
            "batch answered: {out}"
        );
        assert!(lines.iter().any(|l| l["from"] == "rmcp"), "{out}");
    }
}
