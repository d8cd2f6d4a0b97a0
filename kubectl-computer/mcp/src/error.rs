//! One-line errors of calls to a node agent and of the MCP server: a
//! message, and the errno name the agent sent with it.

use std::fmt;

/// A failure in one line (the CLI shows it as `error: <message>`, a tool
/// as its error text).
#[derive(Debug)]
pub struct Error {
    /// The one line shown.
    pub message: String,
    /// The errno name the node agent sent with the failure (`ENOENT`), from
    /// the `errno` metadata of its status; `None` for failures found here
    /// and for transport failures.
    pub errno: Option<String>,
    /// The node a computer moved to, when the agent answered that it was
    /// handed over there (gRPC metadata `agentcomputer-moved-to`): the
    /// call did not run, and may be made again at that node.
    pub moved_to: Option<String>,
}

impl Error {
    /// A failure found here, not sent by the agent: `message`, no errno.
    pub fn new(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            errno: None,
            moved_to: None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The node agent the calls go to, for messages about a lost connection
/// (set once by whoever connects, before the first call).
static ENDPOINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records the endpoint named by later connection errors.
pub fn set_endpoint(url: &str) {
    let _ = ENDPOINT.set(url.to_string());
}

/// Whether `status` was made by the client's transport, not sent by the
/// agent: the connection broke (the agent was killed or restarted, or a
/// plain-HTTP/2 client talked to a TLS port and was hung up on). The
/// agent's own errors always carry the `errno` metadata key.
fn transport_failure(status: &tonic::Status) -> bool {
    if status
        .metadata()
        .contains_key(agentcomputer_proto::ERRNO_METADATA_KEY)
    {
        return false;
    }
    let m = status.message();
    status.code() == tonic::Code::Unavailable
        || m.starts_with("h2 protocol error")
        || m.starts_with("transport error")
        || m.starts_with("error reading a body from connection")
        || m.starts_with("connection error")
}

impl From<tonic::Status> for Error {
    /// The node agent's message already leads with the errno name
    /// (`ENOENT: no such file or directory: src/x`); show it as is. A broken
    /// connection says which agent went away and what to do, in one line.
    fn from(status: tonic::Status) -> Error {
        if transport_failure(&status) {
            let endpoint = ENDPOINT.get().map_or("", String::as_str);
            let at = if endpoint.is_empty() {
                String::new()
            } else {
                format!(" at {endpoint}")
            };
            let tls = if endpoint.starts_with("http://") {
                "; if the agent serves TLS, use an https:// endpoint"
            } else {
                ""
            };
            return Error::new(format!(
                "the node agent{at} is unreachable or went away ({}); check that it is running (start one with: node-agent local) and that --endpoint names it{tls}",
                status.message()
            ));
        }
        let errno = status
            .metadata()
            .get(agentcomputer_proto::ERRNO_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let message = if status.message().is_empty() {
            format!("{:?}", status.code())
        } else {
            status.message().to_string()
        };
        let moved_to = status
            .metadata()
            .get(agentcomputer_proto::MOVED_TO_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Error {
            message,
            errno,
            moved_to,
        }
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_errno_is_kept_from_the_metadata() {
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert(
            agentcomputer_proto::ERRNO_METADATA_KEY,
            "ENOENT".parse().unwrap(),
        );
        let status = tonic::Status::with_metadata(
            tonic::Code::NotFound,
            "ENOENT: no such file or directory: a",
            md,
        );
        let err = Error::from(status);
        assert_eq!(err.errno.as_deref(), Some("ENOENT"));
        assert_eq!(err.message, "ENOENT: no such file or directory: a");
    }

    #[test]
    fn a_status_without_errno_metadata_has_none() {
        let err = Error::from(tonic::Status::failed_precondition("runtime disabled"));
        assert_eq!(
            (err.errno, err.message.as_str()),
            (None, "runtime disabled")
        );
    }
}
