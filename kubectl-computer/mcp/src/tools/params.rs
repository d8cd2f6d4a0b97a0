//! The tools' arguments: each tool's JSON Schema is generated from these
//! types, their doc comments becoming the property descriptions.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadParams {
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
pub(super) struct ShareParams {
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
pub(super) struct WriteParams {
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
pub(super) struct EditParams {
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
pub(super) struct LsParams {
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
pub(super) struct FindParams {
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
pub(super) struct GrepParams {
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
pub(super) struct DeleteParams {
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
pub(super) struct ExecParams {
    /// The program. For the shell and container runtimes a bash script
    /// (`ls -l && cat notes.md`); for javascript the source of an ES module
    /// whose default-exported function's return value becomes `result`.
    pub script: String,
    /// Where the script runs [default: auto]. auto: the shell runtime when
    /// every command the script names is built in there, else the
    /// container; shell: bash interpreted in-process with common utilities
    /// (ls, cat, grep, sed, awk...); javascript: a QuickJS ES module with
    /// node-like fs; container: bash with the host's real binaries
    /// (python3, node, git...) in a sandbox.
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
