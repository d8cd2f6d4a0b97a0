//! The MCP tools: `read`, `write`, `edit`, `ls`, `find`, `grep`, `delete`,
//! `exec` and `share` on one computer, each with a description and a JSON Schema of
//! its arguments (generated from the parameter types below, whose doc
//! comments become the property descriptions).
//!
//! Every failure is a tool error (`isError: true`), never a protocol error:
//! its text leads with the errno name the node agent gave (`ENOENT: no such
//! file or directory: notes.md`), names the path, and `structuredContent`
//! carries `{error, errno, path}`. Argument mistakes found here are EINVAL.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use pb::exec_event::Event;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::agent::Agent;
use super::search::{self, Query};
use super::text::{Capped, EditRefusal, is_binary, replace_exact, select_lines};
use crate::cmd::exec::{ExecArgs, check_size, request};
use crate::cmd::files::{list_dir, mkdir, read_bytes, rm, write_bytes};
use crate::cmd::search::glob_paths;
use crate::error::CliError;
use crate::format::{kind_name, long_line, shown, time};

/// Most bytes of a file `read` and `edit` look at (16 MiB): lines past it
/// cannot be addressed, and a larger file cannot be edited here.
const SCAN_MAX: usize = 16 << 20;
/// `read`'s default and largest `max_bytes`.
const READ_DEFAULT_BYTES: u64 = 100_000;
const READ_MAX_BYTES: u64 = 1_000_000;
/// `find`'s default and largest `max_results`.
const FIND_DEFAULT_RESULTS: u32 = 1000;
const FIND_MAX_RESULTS: u32 = 10_000;
/// `exec`'s default and largest cap per output stream.
const OUTPUT_DEFAULT_BYTES: u64 = 50_000;
const OUTPUT_MAX_BYTES: u64 = 1_000_000;
/// `exec`'s default and largest timeout (the node agent's limits).
const EXEC_DEFAULT_SECS: f64 = 60.0;
const EXEC_MAX_SECS: f64 = 3600.0;
/// How long past its timeout a run may take to report its end before it
/// is abandoned here (dropping the stream cancels it on the agent).
const EXEC_GRACE: Duration = Duration::from_secs(15);

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// The file: relative to /workspace (the computer's root directory), or
    /// absolute under /workspace.
    pub path: String,
    /// First line to return, counting from 1 [default: 1].
    pub start_line: Option<u64>,
    /// Last line to return, inclusive [default: the last line].
    pub end_line: Option<u64>,
    /// Most bytes of text to return; whole lines are kept while they fit
    /// and a note says where to continue [default: 100000; at most 1000000].
    pub max_bytes: Option<u64>,
}

/// Arguments of `share`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareParams {
    /// The file to share (a regular file): relative to /workspace, or
    /// absolute under it.
    pub path: String,
    /// How long the link works, in seconds [default: 3600; 1 to 604800
    /// (7 days)].
    pub expires_in_seconds: Option<u64>,
}

/// Arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// The file: relative to /workspace, or absolute under it. Missing
    /// parent directories are created.
    pub path: String,
    /// The whole new content (UTF-8 text). An existing file is replaced
    /// atomically.
    pub content: String,
}

/// Arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// The file: relative to /workspace, or absolute under it.
    pub path: String,
    /// The exact text to replace, whitespace and indentation included. It
    /// must occur exactly once unless replace_all is true: include enough
    /// surrounding lines to make it unique.
    pub old_string: String,
    /// The replacement text.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one
    /// [default: false].
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `ls`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsParams {
    /// Directory (or file) to list, relative to /workspace or absolute under
    /// it [default: /workspace].
    #[serde(default)]
    pub path: String,
    /// Most entries to return, sorted by name [default: 1000].
    pub max_entries: Option<u32>,
}

/// Arguments of `find`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindParams {
    /// Glob pattern relative to /workspace: `*` and `?` match within one
    /// path component, `**` any number of components, `{a,b}` and `[a-z]`
    /// as usual. Examples: `**/*.md`, `src/**/*.rs`, `*.txt`.
    pub pattern: String,
    /// Most paths to return: the first ones in sorted order [default: 1000;
    /// 1 to 10000].
    pub max_results: Option<u32>,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// Regular expression (Rust `regex` syntax, like ripgrep's) matched
    /// against each line.
    pub pattern: String,
    /// File, or directory searched recursively, relative to /workspace
    /// [default: /workspace].
    #[serde(default)]
    pub path: String,
    /// Only search files matching one of these globs. A glob without `/`
    /// matches the file name (`*.py`), one with `/` the path relative to
    /// /workspace (`src/**/*.rs`).
    #[serde(default)]
    pub include: Vec<String>,
    /// Skip files matching any of these globs (same rule as include).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Match regardless of case [default: false].
    #[serde(default)]
    pub ignore_case: bool,
    /// Lines of context to show before and after each match [default: 0;
    /// at most 20].
    #[serde(default)]
    pub context_lines: u32,
    /// Stop after this many matches [default: 100; at most 10000].
    pub max_matches: Option<u32>,
}

/// Arguments of `delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    /// File, symlink or directory to remove, relative to /workspace or
    /// absolute under it (never /workspace itself).
    pub path: String,
    /// Remove a directory and everything under it; without it only an
    /// empty directory can be removed [default: false].
    #[serde(default)]
    pub recursive: bool,
}

/// Arguments of `exec`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// The program. For the shell and container runtimes a bash script
    /// (`ls -l && cat notes.md`); for javascript the source of an ES module
    /// whose default-exported function's return value becomes `result`.
    pub script: String,
    /// Where the script runs [default: shell]. shell: bash interpreted
    /// in-process with common utilities (ls, cat, grep, sed, awk...);
    /// javascript: a QuickJS ES module with node-like fs; container: bash
    /// with the host's real binaries (python3, node, git...) in a sandbox.
    pub runtime: Option<String>,
    /// Working directory, relative to /workspace or absolute under it
    /// [default: /workspace].
    #[serde(default)]
    pub cwd: String,
    /// Environment variables for the run.
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Text given to the program on standard input [default: none].
    #[serde(default)]
    pub stdin: String,
    /// javascript only: the argument of the module's default-exported
    /// function (any JSON value) [default: null].
    pub input: Option<Value>,
    /// Wall-clock limit in seconds; the run is stopped when it is reached
    /// [default: 60; at most 3600].
    pub timeout_seconds: Option<f64>,
    /// Most bytes kept of stdout and of stderr each; past it the middle is
    /// left out and marked [default: 50000; at most 1000000].
    pub max_output_bytes: Option<u64>,
}

/// The MCP server of one computer: its tool router over a shared [`Agent`].
#[derive(Clone)]
pub struct Tools {
    agent: Arc<Agent>,
    tool_router: ToolRouter<Tools>,
}

/// The errno name a message leads with (`ENOENT: ...`), if any.
fn errno_of(message: &str) -> Option<&str> {
    let (head, _) = message.split_once(':')?;
    let valid = head.len() > 1
        && head.starts_with('E')
        && head
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
    valid.then_some(head)
}

/// A tool error for `err` about `path`: the message (with the path added
/// when it does not name it; escaped by [`shown`] in the text, so a
/// control character in a name cannot forge lines of the message), and
/// `{error, errno, path}` as structured content (JSON carries it as is).
fn failure(err: CliError, path: &str) -> CallToolResult {
    let mut text = err.0;
    if !path.is_empty() {
        let escaped = shown(path);
        if text.contains(path) {
            text = text.replace(path, &escaped);
        } else {
            text = format!("{text} (path: {escaped})");
        }
    }
    let errno = errno_of(&text).map(str::to_string);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({
        "error": text,
        "errno": errno,
        "path": path,
    }));
    result
}

/// An argument error found here.
fn invalid(message: impl std::fmt::Display) -> CliError {
    CliError(format!("EINVAL: {message}"))
}

/// A successful result with `text` for the model and `value` as structured
/// content.
fn success(text: String, value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// The parent directory of `path` as the API names it; `None` for a file
/// directly in /workspace.
fn parent_of(path: &str) -> Option<&str> {
    let trimmed = path.trim_end_matches('/');
    let (parent, _) = trimmed.rsplit_once('/')?;
    match parent {
        "" | "/workspace" | "." => None,
        p => Some(p),
    }
}

/// The API's name of a runtime (the `runtime` argument of `exec`).
fn runtime_name(r: pb::Runtime) -> &'static str {
    match r {
        pb::Runtime::Javascript => "javascript",
        pb::Runtime::Container => "container",
        pb::Runtime::Shell | pb::Runtime::Unspecified => "shell",
    }
}

#[tool_router]
impl Tools {
    /// The tools of `agent`'s computer.
    pub fn new(agent: Arc<Agent>) -> Tools {
        Tools {
            agent,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Read a text file of the computer. Returns its lines (all, or start_line..end_line), at most max_bytes of them; a note after the text gives the line range shown and where to continue when the file goes on. A binary file is reported (size), not shown: inspect it with exec (xxd, file).",
        annotations(read_only_hint = true)
    )]
    async fn read(
        &self,
        Parameters(p): Parameters<ReadParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self
            .read_file(p)
            .await
            .unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Create or replace a file of the computer with the given text. Missing parent directories are created; an existing file is replaced atomically (its permission bits kept).",
        annotations(destructive_hint = true, idempotent_hint = true)
    )]
    async fn write(
        &self,
        Parameters(p): Parameters<WriteParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self
            .write_file(p)
            .await
            .unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Edit a text file by exact string replacement: old_string (matched exactly, whitespace included) becomes new_string. Fails, changing nothing, unless old_string occurs exactly once; include more surrounding text to make it unique, or set replace_all to replace every occurrence. Read the file first to copy the text exactly.",
        annotations(destructive_hint = true)
    )]
    async fn edit(
        &self,
        Parameters(p): Parameters<EditParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self
            .edit_file(p)
            .await
            .unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "List a directory of the computer (default /workspace), sorted by name, one `ls -l` line per entry (mode, links, uid, gid, size, modification time, name); structured content has name, type, size and mtime of each.",
        annotations(read_only_hint = true)
    )]
    async fn ls(&self, Parameters(p): Parameters<LsParams>) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self.list(p).await.unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Find files and directories whose path (relative to /workspace) matches a glob such as `**/*.md` or `src/**/*.rs`. Returns the paths sorted, one a line.",
        annotations(read_only_hint = true)
    )]
    async fn find(
        &self,
        Parameters(p): Parameters<FindParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let pattern = p.pattern.clone();
        Ok(self
            .find_paths(p)
            .await
            .unwrap_or_else(|e| failure(e, &pattern)))
    }

    #[tool(
        description = "Search file contents with a regular expression, recursively from path (default /workspace). Prints `path:line:text` per match (grep -n style; context lines as `path-line-text`, groups separated by `--`). Filter files with include/exclude globs; binary files are skipped. Stops after max_matches and says so.",
        annotations(read_only_hint = true)
    )]
    async fn grep(
        &self,
        Parameters(p): Parameters<GrepParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self.search(p).await.unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Delete a file, symlink or empty directory of the computer; with recursive, a directory and everything in it. Cannot be undone.",
        annotations(destructive_hint = true)
    )]
    async fn delete(
        &self,
        Parameters(p): Parameters<DeleteParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self.remove(p).await.unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Make a download link for one file of the computer: an HTTP URL that anyone holding it can fetch (with curl, a browser) without a credential until it expires (default 1 hour, at most 7 days). The download has the file's content at the time it is fetched, with its name and type. Use it to hand a result (a report, an archive, an image) to a person. Deleting the computer revokes its links.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn share(
        &self,
        Parameters(p): Parameters<ShareParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = p.path.clone();
        Ok(self.link(p).await.unwrap_or_else(|e| failure(e, &path)))
    }

    #[tool(
        description = "Run a program on the computer, its files at /workspace, and wait for it. runtime shell (default): a bash script; javascript: an ES module (its default export's return value is `result`); container: bash with real binaries, when the computer enables it. Returns exit_code, stdout, stderr (each capped at max_output_bytes, the middle left out and marked), and error when the run did not finish normally (timeout, output cap, uncaught JavaScript error). A run is stopped at timeout_seconds.",
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn exec(
        &self,
        Parameters(p): Parameters<ExecParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let cwd = p.cwd.clone();
        Ok(self.run(p).await.unwrap_or_else(|e| failure(e, &cwd)))
    }
}

impl Tools {
    async fn read_file(&self, p: ReadParams) -> Result<CallToolResult, CliError> {
        let _stream = self.agent.file_stream().await;
        let start = p.start_line.unwrap_or(1).max(1);
        let end = p.end_line.unwrap_or(u64::MAX);
        if end < start {
            return Err(invalid(format!(
                "end_line {end} is before start_line {start}"
            )));
        }
        let max_bytes = p
            .max_bytes
            .unwrap_or(READ_DEFAULT_BYTES)
            .clamp(1, READ_MAX_BYTES) as usize;
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let (data, more) =
            read_bytes(&mut client, computer.clone(), p.path.clone(), 0, SCAN_MAX).await?;
        if is_binary(&data, !more) {
            let size = if more {
                client
                    .stat(pb::StatRequest {
                        computer,
                        path: p.path.clone(),
                        follow_symlinks: true,
                    })
                    .await?
                    .into_inner()
                    .size
            } else {
                data.len() as u64
            };
            let text = format!(
                "{}: binary file ({size} bytes), not shown; inspect it with exec (`file`, `xxd | head`)",
                p.path
            );
            return Ok(success(
                text,
                json!({"path": p.path, "binary": true, "size": size}),
            ));
        }
        // An incomplete read may end inside a character.
        let valid = match std::str::from_utf8(&data) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
        };
        let to = usize::try_from(end).unwrap_or(usize::MAX);
        let lines = select_lines(valid, start as usize, to, max_bytes);
        let whole = start == 1 && !lines.cut && !more && lines.last == lines.total;
        let mut content = vec![ContentBlock::text(lines.text.clone())];
        if !whole {
            let total = if more {
                format!("at least {}", lines.total)
            } else {
                lines.total.to_string()
            };
            let mut note = if lines.last < lines.first && lines.cut {
                format!(
                    "[line {} is longer than max_bytes ({max_bytes}); only its start is shown; use exec (cut, head -c) for the rest]",
                    lines.first
                )
            } else if lines.last < lines.first {
                format!(
                    "[no lines: the file has {total} lines, start_line is {}]",
                    lines.first
                )
            } else {
                format!("[lines {}-{} of {total}", lines.first, lines.last)
            };
            if lines.last >= lines.first {
                if lines.cut {
                    note.push_str(&format!(
                        "; cut at max_bytes ({max_bytes}); continue with start_line={}",
                        lines.last + 1
                    ));
                } else if (lines.last < lines.total || more) && end == u64::MAX {
                    note.push_str(&format!("; continue with start_line={}", lines.last + 1));
                }
                note.push(']');
            }
            if more && lines.last >= lines.total.saturating_sub(1) {
                note.push_str(&format!(
                    " [only the first {SCAN_MAX} bytes can be read by line; use exec (sed -n, tail) past them]"
                ));
            }
            content.push(ContentBlock::text(note));
        }
        let mut result = CallToolResult::success(content);
        result.structured_content = Some(json!({
            "path": p.path,
            "text": lines.text,
            "first_line": lines.first,
            "last_line": lines.last,
            "total_lines": if more { Value::Null } else { json!(lines.total) },
            "truncated": lines.cut,
        }));
        Ok(result)
    }

    async fn write_file(&self, p: WriteParams) -> Result<CallToolResult, CliError> {
        let _stream = self.agent.file_stream().await;
        let mut client = self.agent.client();
        if let Some(parent) = parent_of(&p.path) {
            mkdir(&mut client, self.agent.computer(), parent.to_string(), true).await?;
        }
        let resp = write_bytes(
            &mut client,
            self.agent.computer(),
            p.path.clone(),
            p.content.as_bytes(),
        )
        .await?;
        Ok(success(
            format!("wrote {} bytes to {}", resp.bytes_written, p.path),
            json!({"path": p.path, "bytes_written": resp.bytes_written}),
        ))
    }

    async fn edit_file(&self, p: EditParams) -> Result<CallToolResult, CliError> {
        let _stream = self.agent.file_stream().await;
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let (data, more) =
            read_bytes(&mut client, computer.clone(), p.path.clone(), 0, SCAN_MAX).await?;
        if more {
            return Err(CliError(format!(
                "EFBIG: {} is larger than {SCAN_MAX} bytes; edit it with exec (sed -i)",
                p.path
            )));
        }
        if is_binary(&data, true) {
            return Err(invalid(format!(
                "{} is a binary file; edit it with exec",
                p.path
            )));
        }
        let content = String::from_utf8_lossy(&data);
        let (new, count) = replace_exact(&content, &p.old_string, &p.new_string, p.replace_all)
            .map_err(|refusal| match refusal {
                EditRefusal::Pointless(why) => invalid(format!("{why} ({})", p.path)),
                EditRefusal::NotFound => invalid(format!(
                    "old_string not found in {}; it must match exactly, whitespace and indentation included (read the file first)",
                    p.path
                )),
                EditRefusal::Ambiguous(n) => invalid(format!(
                    "old_string occurs {n} times in {}; include more surrounding text to make it unique, or set replace_all",
                    p.path
                )),
            })?;
        write_bytes(&mut client, computer, p.path.clone(), new.as_bytes()).await?;
        let s = if count == 1 { "" } else { "s" };
        Ok(success(
            format!("replaced {count} occurrence{s} in {}", p.path),
            json!({"path": p.path, "replacements": count}),
        ))
    }

    async fn list(&self, p: LsParams) -> Result<CallToolResult, CliError> {
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let max = p.max_entries.unwrap_or(1000).max(1) as usize;
        let info = client
            .stat(pb::StatRequest {
                computer: computer.clone(),
                path: p.path.clone(),
                follow_symlinks: true,
            })
            .await?
            .into_inner();
        let describe = |name: &str, info: &pb::FileInfo| {
            json!({
                "name": name,
                "type": kind_name(info.kind()),
                "size": info.size,
                "mode": format!("{:04o}", info.perm),
                "modified": time(info.mtime_unix_nanos),
            })
        };
        if info.kind() != pb::FileKind::Directory {
            return Ok(success(
                long_line(&p.path, &info),
                json!({"path": p.path, "entries": [describe(&p.path, &info)], "truncated": false}),
            ));
        }
        let (entries, truncated) =
            list_dir(&mut client, computer, p.path.clone(), true, max).await?;
        let mut text = String::new();
        let mut listed = Vec::with_capacity(entries.len());
        for e in &entries {
            match &e.info {
                Some(info) => {
                    text.push_str(&long_line(&e.name, info));
                    listed.push(describe(&e.name, info));
                }
                None => {
                    text.push_str(&shown(&e.name));
                    listed.push(json!({"name": e.name}));
                }
            }
            text.push('\n');
        }
        if entries.is_empty() {
            text.push_str("(empty directory)\n");
        }
        if truncated {
            text.push_str(&format!(
                "[only the first {max} entries are shown; raise max_entries or use find]\n"
            ));
        }
        Ok(success(
            text,
            json!({"path": p.path, "entries": listed, "truncated": truncated}),
        ))
    }

    async fn find_paths(&self, p: FindParams) -> Result<CallToolResult, CliError> {
        let max = p.max_results.unwrap_or(FIND_DEFAULT_RESULTS);
        if !(1..=FIND_MAX_RESULTS).contains(&max) {
            return Err(invalid(format!(
                "max_results is from 1 to {FIND_MAX_RESULTS}, not {max}"
            )));
        }
        let mut client = self.agent.client();
        // The agent answers the `max` first paths in sorted order.
        let resp = glob_paths(&mut client, self.agent.computer(), p.pattern.clone(), max).await?;
        // Names are escaped in the text (a newline in a name cannot forge a
        // line); structured content keeps them raw.
        let mut text: String = resp
            .paths
            .iter()
            .map(|p| format!("{}\n", shown(p)))
            .collect();
        if resp.paths.is_empty() {
            text.push_str(&format!("no path matches {}\n", shown(&p.pattern)));
        }
        if resp.truncated {
            text.push_str(&format!(
                "[only the first {} paths are shown; narrow the pattern or raise max_results]\n",
                resp.paths.len()
            ));
        }
        Ok(success(
            text,
            json!({"paths": resp.paths, "truncated": resp.truncated}),
        ))
    }

    async fn search(&self, p: GrepParams) -> Result<CallToolResult, CliError> {
        if p.context_lines > 20 {
            return Err(invalid("context_lines is at most 20"));
        }
        let max = p.max_matches.unwrap_or(100);
        if !(1..=10_000).contains(&max) {
            return Err(invalid("max_matches is from 1 to 10000"));
        }
        let mut client = self.agent.client();
        let query = Query {
            computer: self.agent.computer(),
            pattern: p.pattern,
            path: p.path,
            include: p.include,
            exclude: p.exclude,
            ignore_case: p.ignore_case,
            context: p.context_lines as usize,
            max: max as usize,
        };
        // Context lines are read with Read streams.
        let _stream = self.agent.file_stream().await;
        let found = search::grep(&mut client, query).await?;
        let mut text = found.text;
        if found.hits.is_empty() {
            text.push_str("no matches\n");
        }
        if found.truncated {
            text.push_str(&format!(
                "[stopped after {max} matches; narrow the search or raise max_matches]\n"
            ));
        }
        Ok(success(
            text,
            json!({"matches": found.hits, "truncated": found.truncated}),
        ))
    }

    async fn remove(&self, p: DeleteParams) -> Result<CallToolResult, CliError> {
        let mut client = self.agent.client();
        rm(
            &mut client,
            self.agent.computer(),
            p.path.clone(),
            p.recursive,
        )
        .await?;
        Ok(success(
            format!("deleted {}", p.path),
            json!({"path": p.path, "deleted": true}),
        ))
    }

    async fn link(&self, p: ShareParams) -> Result<CallToolResult, CliError> {
        let seconds = p.expires_in_seconds.unwrap_or(3600);
        if !(1..=604_800).contains(&seconds) {
            return Err(invalid(format!(
                "expires_in_seconds must be 1 to 604800 (7 days), not {seconds}"
            )));
        }
        let mut client = self.agent.client();
        let link = client
            .share(pb::ShareRequest {
                computer: self.agent.computer(),
                path: p.path.clone(),
                expires_in_seconds: seconds,
            })
            .await?
            .into_inner();
        let expires_at = u64::try_from(link.expires_unix_seconds)
            .map(|s| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(s))
                    .to_string()
            })
            .unwrap_or_default();
        Ok(success(
            format!("{}\n(expires {expires_at})", link.url),
            json!({
                "url": link.url,
                "path": link.path,
                "expires_unix_seconds": link.expires_unix_seconds,
                "expires_at": expires_at,
            }),
        ))
    }

    async fn run(&self, p: ExecParams) -> Result<CallToolResult, CliError> {
        let enabled = self.agent.runtimes();
        let name = p.runtime.as_deref().unwrap_or("shell");
        let runtime = match name {
            "shell" => pb::Runtime::Shell,
            "javascript" | "js" => pb::Runtime::Javascript,
            "container" => pb::Runtime::Container,
            other => {
                return Err(invalid(format!(
                    "unknown runtime {other:?}; this computer offers: {}",
                    enabled
                        .iter()
                        .map(|r| runtime_name(*r))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        if !enabled.contains(&runtime) {
            return Err(invalid(format!(
                "computer {} does not enable the {name} runtime; it offers: {}",
                self.agent.name(),
                enabled
                    .iter()
                    .map(|r| runtime_name(*r))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if p.input.is_some() && runtime != pb::Runtime::Javascript {
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
            runtime,
            cwd: p.cwd,
            env: p.env.into_iter().collect(),
            timeout: Some(timeout),
            stdin: !p.stdin.is_empty(),
            input_json: p.input.map(|v| v.to_string()).unwrap_or_default(),
            script: p.script,
        };
        let req = request(args, p.stdin.into_bytes());
        check_size(
            &req,
            "write the data to a file with the write tool first and redirect it (`prog < FILE`)",
        )?;
        let mut client = self.agent.client();
        let mut stdout = Capped::new(cap);
        let mut stderr = Capped::new(cap);
        let collect = async {
            let mut stream = client.exec(req).await?.into_inner();
            while let Some(event) = stream.message().await? {
                match event.event {
                    Some(Event::Stdout(b)) => stdout.push(&b),
                    Some(Event::Stderr(b)) => stderr.push(&b),
                    Some(Event::Exit(exit)) => return Ok(exit),
                    None => {}
                }
            }
            Err(CliError(
                "the node agent ended the run without an exit status".into(),
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
            },
        };
        let mut value = json!({
            "exit_code": exit.code,
            "stdout": stdout.text(),
            "stderr": stderr.text(),
            "duration_ms": exit.duration_ms,
        });
        if stdout.omitted() > 0 || stderr.omitted() > 0 {
            value["truncated"] = json!({
                "stdout_bytes_omitted": stdout.omitted(),
                "stderr_bytes_omitted": stderr.omitted(),
            });
        }
        if runtime == pb::Runtime::Javascript {
            value["result"] = serde_json::from_str(&exit.result_json).unwrap_or(Value::Null);
        }
        if exit.error.is_empty() {
            Ok(success(value.to_string(), value))
        } else {
            value["error"] = json!(exit.error);
            Ok(CallToolResult::structured_error(value))
        }
    }

    /// The tool list, with `exec`'s `runtime` limited to the runtimes the
    /// computer enables.
    fn tools(&self) -> Vec<Tool> {
        let mut tools = self.tool_router.list_all();
        let enabled: Vec<&str> = self
            .agent
            .runtimes()
            .iter()
            .map(|r| runtime_name(*r))
            .collect();
        for t in tools.iter_mut().filter(|t| t.name == "exec") {
            let mut schema = (*t.input_schema).clone();
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                let description = props
                    .get("runtime")
                    .and_then(|r| r.get("description"))
                    .cloned()
                    .unwrap_or(Value::Null);
                props.insert(
                    "runtime".into(),
                    json!({
                        "type": "string",
                        "enum": enabled,
                        "default": "shell",
                        "description": description,
                    }),
                );
            }
            t.input_schema = Arc::new(schema);
        }
        tools
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "kubectl-computer",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "Tools on the Agent Computer {:?}: a persistent computer whose files live under /workspace (paths are relative to it). read/write/edit/ls/find/grep/delete work on the files; exec runs a program there ({}); share makes a download link for a file.",
                self.agent.name(),
                self.agent
                    .runtimes()
                    .iter()
                    .map(|r| runtime_name(*r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(
            errno_of("ENOENT: no such file or directory: a"),
            Some("ENOENT")
        );
        assert_eq!(errno_of("computer \"x\" not found"), None);
        assert_eq!(errno_of("Error: x"), None);
    }

    #[test]
    fn parents() {
        assert_eq!(parent_of("notes.md"), None);
        assert_eq!(parent_of("/workspace/notes.md"), None);
        assert_eq!(parent_of("a/b/c.txt"), Some("a/b"));
        assert_eq!(parent_of("/workspace/a/c.txt"), Some("/workspace/a"));
    }

    #[test]
    fn tool_errors_name_the_errno_and_the_path() {
        let r = failure(CliError("EISDIR: is a directory".into()), "src");
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["errno"], "EISDIR");
        assert_eq!(s["path"], "src");
        assert_eq!(s["error"], "EISDIR: is a directory (path: src)");
        // A name with a newline cannot forge a line of the message.
        let r = failure(CliError("ENOENT: a\nEPERM: x".into()), "a\nEPERM: x");
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"], "ENOENT: a\\nEPERM: x");
        assert_eq!(s["path"], "a\nEPERM: x");
        let r = failure(CliError("EACCES: denied".into()), "b\r");
        assert_eq!(
            r.structured_content.unwrap()["error"],
            "EACCES: denied (path: b\\r)"
        );
    }
}
