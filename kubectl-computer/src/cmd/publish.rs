//! `publish`: commit a directory of a computer with git and push it to a
//! remote (docs/git.md, "Publishing"). Credentials are read here, from an
//! environment variable or a file of the machine running the CLI, and sent
//! with the one call; they are never written to the computer.

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::{CliError, Result};

/// Where the remote's credentials come from.
pub enum CredentialSource {
    /// None: a public remote, or one on a trusted network.
    None,
    /// The value of this environment variable.
    Env(String),
    /// The content of this file (trailing newline ignored).
    File(std::path::PathBuf),
}

/// `USER:SECRET`, or a bare token (sent as the password of user
/// `x-access-token`, the name GitHub documents for tokens; other servers
/// that take a token as password accept any user name).
fn parse_credentials(text: &str) -> Result<(String, String)> {
    agentcomputer_mcp::calls::publish::parse_credentials(text)
}

fn read_credentials(source: &CredentialSource) -> Result<(String, String)> {
    match source {
        CredentialSource::None => Ok((String::new(), String::new())),
        CredentialSource::Env(var) => match std::env::var(var) {
            Ok(v) => parse_credentials(&v)
                .map_err(|e| CliError::new(format!("--credentials-env {var}: {e}"))),
            Err(_) => Err(CliError::new(format!(
                "--credentials-env {var}: the variable is not set"
            ))),
        },
        CredentialSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::new(format!("--credentials-file {}: {e}", path.display()))
            })?;
            parse_credentials(&text)
                .map_err(|e| CliError::new(format!("--credentials-file {}: {e}", path.display())))
        }
    }
}

/// Publishes `dir` of `computer` to `remote`; prints git's output on
/// stderr and `BRANCH COMMIT` on stdout.
pub async fn publish(
    client: &mut Client,
    computer: String,
    dir: String,
    remote: String,
    branch: Option<String>,
    message: Option<String>,
    credentials: CredentialSource,
) -> Result<()> {
    let (username, password) = read_credentials(&credentials)?;
    let dir = agentcomputer_mcp::calls::publish::api_dir(&dir);
    let done = client
        .publish(pb::PublishRequest {
            computer,
            dir,
            remote,
            branch: branch.unwrap_or_default(),
            message: message.unwrap_or_default(),
            username,
            password,
        })
        .await?
        .into_inner();
    if !done.output.is_empty() {
        errln!("{}", done.output.trim_end());
    }
    outln!("{} {}", done.branch, done.commit);
    Ok(())
}
