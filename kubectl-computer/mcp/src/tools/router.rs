//! The server: each tool's description and annotations, dispatch to
//! [`super::files`] and [`super::run`], and the tool list offered to the
//! client.

use std::sync::Arc;

use agentcomputer_runtime_contract::Runtime;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_router};
use serde_json::{Value, json};

use super::checkpoints::{RestoreParams, SnapshotParams};
use super::params::{
    DeleteParams, EditParams, ExecParams, FindParams, GrepParams, LsParams, ReadParams,
    ShareParams, WriteParams,
};
use super::publish::PublishParams;
use super::result::failure;
use crate::agent::Agent;

/// The MCP server of one computer: its tool router over a shared [`Agent`].
#[derive(Clone)]
pub struct Tools {
    pub(super) agent: Arc<Agent>,
    tool_router: ToolRouter<Tools>,
}

/// The runtimes' names, comma-separated, for messages.
pub(super) fn names(runtimes: &[Runtime]) -> String {
    runtimes
        .iter()
        .map(|r| r.name())
        .collect::<Vec<_>>()
        .join(", ")
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
        description = "Run a program on the computer, its files at /workspace, and wait for it. runtime auto (default): a bash script, run in-process by the shell runtime when every command it names is built in there, else in the container with real binaries (python3, node, npm, make, git...) when the computer has one; shell: a bash script, built-in commands only; javascript: an ES module (its default export's return value is `result`); container: bash with real binaries, when the computer enables it. Returns exit_code, stdout, stderr, runtime (the one that ran; runtime_reason says why for auto) (each capped at max_output_bytes, the middle left out and marked), and error when the run did not finish normally (timeout, output cap, uncaught JavaScript error). A run is stopped at timeout_seconds.",
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn exec(
        &self,
        Parameters(p): Parameters<ExecParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let cwd = p.cwd.clone();
        Ok(self.run(p).await.unwrap_or_else(|e| failure(e, &cwd)))
    }

    #[tool(
        description = "Take a snapshot of the whole computer now: a checkpoint of every file, to come back to with `restore` (for example before a risky change, a large refactor or a dependency upgrade). Running programs keep running. Returns the snapshot's name. Needs a node agent with continuous backup.",
        annotations(idempotent_hint = false)
    )]
    async fn snapshot(
        &self,
        Parameters(p): Parameters<SnapshotParams>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self.checkpoint(p).await.unwrap_or_else(|e| failure(e, "")))
    }

    #[tool(
        description = "Bring the whole computer back to a snapshot taken with `snapshot`: every file as it was then, files made since gone. Running programs are ended. The state before the restore is kept as a snapshot of its own (its name is returned), so a restore can be undone with another restore.",
        annotations(destructive_hint = true)
    )]
    async fn restore(
        &self,
        Parameters(p): Parameters<RestoreParams>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self.go_back(p).await.unwrap_or_else(|e| failure(e, "")))
    }

    #[tool(
        description = "Commit a directory of the computer with git and push it to a git remote over HTTP(S) (a GitHub or GitLab repository, any git server), through the computer's egress policy. A directory that is not a repository yet becomes one. Credentials: credentials_env is the NAME of an environment variable of the MCP server's process holding them; the server reads it for this one call, so you never see or pass the secret, and it is never written to the computer. Only variables the server was started with may be named; without credentials_env the push goes without credentials. Returns the commit, whether a new one was made, the branch and git's output. A push the remote refuses (not a fast-forward) fails with git's message and the local commit stays for the next publish.",
        annotations(
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn publish(
        &self,
        Parameters(p): Parameters<PublishParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let dir = p.dir.clone();
        Ok(self.push(p).await.unwrap_or_else(|e| failure(e, &dir)))
    }
}

impl Tools {
    /// Every tool as listed for a computer with every runtime, for the
    /// generated reference ([`super::reference`]).
    pub(super) fn listed_for_reference() -> Vec<Tool> {
        let all: Vec<&str> = std::iter::once(super::run::AUTO)
            .chain(Runtime::ALL.iter().map(|r| r.name()))
            .collect();
        Self::with_runtimes(Self::tool_router().list_all(), &all)
    }

    /// `tools` with `exec`'s `runtime` an enum of `enabled`.
    fn with_runtimes(mut tools: Vec<Tool>, enabled: &[&str]) -> Vec<Tool> {
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
                        "default": super::run::AUTO,
                        "description": description,
                    }),
                );
            }
            t.input_schema = Arc::new(schema);
        }
        tools
    }

    /// The tool list, with `exec`'s `runtime` limited to the runtimes the
    /// computer enables.
    fn tools(&self) -> Vec<Tool> {
        let enabled: Vec<&str> = std::iter::once(super::run::AUTO)
            .chain(self.agent.runtimes().iter().map(|r| r.name()))
            .collect();
        Self::with_runtimes(self.tool_router.list_all(), &enabled)
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
                "Tools on the Agent Computer {:?}: a persistent computer whose files live under /workspace (paths are relative to it). read/write/edit/ls/find/grep/delete work on the files; exec runs a program there (auto, {}); share makes a download link for a file; snapshot checkpoints every file and restore goes back to a snapshot; publish commits a directory with git and pushes it to a remote.",
                self.agent.name(),
                names(self.agent.runtimes())
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
