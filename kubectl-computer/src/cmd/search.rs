//! `glob` and `grep`.

use std::io::Write;

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::format::shown;

/// Prints the paths matching `pattern`, one a line; returns whether any
/// matched (exit status 1 when none, as `ls` on no match).
pub async fn glob(client: &mut Client, computer: String, pattern: String) -> Result<bool> {
    let resp = client
        .glob(pb::GlobRequest {
            computer,
            pattern,
            max_results: 0,
        })
        .await?
        .into_inner();
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

/// What `grep` searches.
pub struct GrepArgs {
    pub computer: String,
    pub pattern: String,
    pub path: String,
    pub glob: String,
    pub ignore_case: bool,
    pub max: u32,
}

/// Prints `path:line:text` for each match; returns whether any matched
/// (exit status 1 when none, as grep(1)).
pub async fn grep(client: &mut Client, args: GrepArgs) -> Result<bool> {
    let mut stream = client
        .grep(pb::GrepRequest {
            computer: args.computer,
            path: args.path,
            pattern: args.pattern,
            glob: args.glob,
            max_matches: args.max,
            case_insensitive: args.ignore_case,
        })
        .await?
        .into_inner();
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
