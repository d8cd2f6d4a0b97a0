//! `glob` and `grep`.

use std::io::Write;

pub use agentcomputer_mcp::calls::search::{GrepArgs, glob_paths};

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
