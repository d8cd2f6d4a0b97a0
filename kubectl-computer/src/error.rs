//! The CLI's one-line errors.

use std::fmt;

/// A failure shown to the user as `error: <message>` on stderr.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

impl From<tonic::Status> for CliError {
    /// The node agent's message already leads with the errno name
    /// (`ENOENT: no such file or directory: src/x`); show it as is. A broken
    /// HTTP/2 connection gets a hint about TLS.
    fn from(status: tonic::Status) -> CliError {
        // What plain HTTP/2 gets from a TLS port: the server hangs up.
        let broken = status.message().starts_with("h2 protocol error")
            || status.message() == "transport error";
        if broken {
            return CliError(format!(
                "{} (if the agent serves TLS, use an https:// endpoint)",
                status.message()
            ));
        }
        if status.message().is_empty() {
            CliError(format!("{:?}", status.code()))
        } else {
            CliError(status.message().to_string())
        }
    }
}

/// An I/O failure on a local file, with what was being done.
pub fn local_io(what: &str, path: &std::path::Path, err: std::io::Error) -> CliError {
    CliError(format!("{what} {}: {err}", path.display()))
}

/// Result alias of the CLI.
pub type Result<T, E = CliError> = std::result::Result<T, E>;
