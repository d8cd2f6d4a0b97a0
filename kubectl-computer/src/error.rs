//! The CLI's one-line errors: those of the agent calls
//! ([`agentcomputer_mcp::error::Error`], named `CliError` here), shown as
//! `error: <message>` on stderr.

pub use agentcomputer_mcp::error::{Error as CliError, Result, set_endpoint};

/// An I/O failure on a local file, with what was being done.
pub fn local_io(what: &str, path: &std::path::Path, err: std::io::Error) -> CliError {
    CliError::new(format!("{what} {}: {err}", path.display()))
}
