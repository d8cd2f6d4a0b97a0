//! `glob` and `grep`.

use std::io::Write;

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::format::shown;

/// Prints the paths matching `pattern`, one a line; returns whether any
/// matched (exit status 1 when none, as `ls` on no match).
pub async fn glob(client: &mut Client, computer: String, pattern: String) -> Result<bool> {
    let resp = glob_paths(client, computer, pattern, 0).await?;
    let mut out = std::io::stdout().lock();
    for p in &resp.paths {
        if writeln!(out, "{}", shown(p)).is_err() {
            break; // stdout closed
        }
    }
    if resp.truncated {
        errln!(
            "warning: more paths match; only the first {} are shown",
            resp.paths.len()
        );
    }
    Ok(!resp.paths.is_empty())
}

/// The paths matching `pattern` (relative to `/workspace`, sorted), at
/// most `max` of them (0: the agent's default, 10000); `truncated` says
/// when more matched. Errors: the API's (a bad pattern is EINVAL).
pub async fn glob_paths(
    client: &mut Client,
    computer: String,
    pattern: String,
    max: u32,
) -> Result<pb::GlobResponse> {
    Ok(client
        .glob(pb::GlobRequest {
            computer,
            pattern,
            max_results: max,
        })
        .await?
        .into_inner())
}

/// What `grep` searches.
pub struct GrepArgs {
    pub computer: String,
    pub pattern: String,
    pub path: String,
    pub glob: String,
    pub ignore_case: bool,
    pub max: u32,
}

impl GrepArgs {
    /// The API request (`max` 0 is the agent's default, 1000).
    pub fn request(self) -> pb::GrepRequest {
        pb::GrepRequest {
            computer: self.computer,
            path: self.path,
            pattern: self.pattern,
            glob: self.glob,
            max_matches: self.max,
            case_insensitive: self.ignore_case,
        }
    }
}

/// Prints `path:line:text` for each match; returns whether any matched
/// (exit status 1 when none, as grep(1)).
pub async fn grep(client: &mut Client, args: GrepArgs) -> Result<bool> {
    let mut stream = client.grep(args.request()).await?.into_inner();
    let mut out = std::io::stdout().lock();
    let mut any = false;
    while let Some(m) = stream.message().await? {
        any = true;
        // The path is escaped; the line is file content, printed raw as
        // grep(1) and `cat` print it.
        if writeln!(out, "{}:{}:{}", shown(&m.path), m.line_number, m.line).is_err() {
            break;
        }
    }
    Ok(any)
}
