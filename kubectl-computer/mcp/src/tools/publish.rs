//! `publish`: commit a directory of the computer with git and push it to a
//! remote over HTTP(S) (docs/git.md, "Publishing"). The model names an
//! environment variable of this server's process for the credentials,
//! never the secret; only variables the server was started with
//! ([`crate::Agent::allow_credentials_env`]) are read.

use agentcomputer_proto::v1 as pb;
use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::result::{invalid, success};
use super::router::Tools;
use crate::calls::publish::{api_dir, credentials_in_url, parse_credentials};
use crate::error::Error;

/// Arguments of `publish`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PublishParams {
    /// The directory to publish, relative to /workspace or absolute under
    /// it. One that is not a git repository yet becomes one (branch main).
    pub dir: String,
    /// The git remote's http:// or https:// URL, without credentials
    /// (https://github.com/OWNER/REPO.git).
    pub remote: String,
    /// The remote branch [default: the repository's current branch; main
    /// for a new repository].
    pub branch: Option<String>,
    /// The commit message [default: "Publish DIR"].
    pub message: Option<String>,
    /// The NAME of an environment variable of the MCP server's process
    /// that holds the remote's credentials (`USER:SECRET` or a bare
    /// token), never the secret itself; only names the server allows
    /// (`kubectl computer mcp --allow-credentials-env NAME`) are read
    /// [default: no credentials].
    pub credentials_env: Option<String>,
}

/// An EACCES error: the server may not read variable `name`.
fn refused(name: &str, allowed: &[String]) -> Error {
    let why = if allowed.is_empty() {
        "this MCP server reads credentials from no environment variable: a local `kubectl computer mcp` allows one with --allow-credentials-env NAME, the API gateway's remote MCP allows none (it has no environment of yours). Publish to a remote that needs no credentials, or with `kubectl computer publish` or the Python client's Computer.publish".to_string()
    } else {
        format!(
            "this MCP server reads credentials only from {}",
            allowed.join(", ")
        )
    };
    Error {
        message: format!("EACCES: credentials_env {name:?} refused: {why}"),
        errno: Some("EACCES".into()),
        moved_to: None,
    }
}

impl Tools {
    /// (username, password) from the environment variable `name`, when
    /// the server allows it.
    fn credentials_from(&self, name: Option<&str>) -> Result<(String, String), Error> {
        let Some(name) = name else {
            return Ok((String::new(), String::new()));
        };
        let allowed = self.agent.credentials_env();
        if !allowed.iter().any(|a| a == name) {
            return Err(refused(name, allowed));
        }
        let Ok(text) = std::env::var(name) else {
            return Err(invalid(format_args!(
                "credentials_env {name:?}: the variable is not set in the MCP server's environment"
            )));
        };
        parse_credentials(&text).map_err(|e| invalid(format_args!("credentials_env {name:?}: {e}")))
    }

    pub(super) async fn push(&self, p: PublishParams) -> Result<CallToolResult, Error> {
        if let Some(shown) = credentials_in_url(&p.remote) {
            return Err(invalid(format_args!(
                "remote {shown:?}: credentials do not belong in the URL; name an environment variable holding them in credentials_env"
            )));
        }
        let (username, password) = self.credentials_from(p.credentials_env.as_deref())?;
        let mut client = self.agent.client();
        let done = client
            .publish(pb::PublishRequest {
                computer: self.agent.computer(),
                dir: api_dir(&p.dir),
                remote: p.remote.clone(),
                branch: p.branch.unwrap_or_default(),
                message: p.message.unwrap_or_default(),
                username,
                password,
            })
            .await?
            .into_inner();
        let what = if done.committed {
            "committed and pushed"
        } else {
            "nothing changed since the last commit; pushed it"
        };
        let mut text = format!(
            "published {} to {} branch {}: {what}, commit {}",
            p.dir, p.remote, done.branch, done.commit
        );
        if !done.output.trim().is_empty() {
            text.push_str(&format!("\ngit said:\n{}", done.output.trim_end()));
        }
        Ok(success(
            text,
            json!({
                "commit": done.commit,
                "committed": done.committed,
                "branch": done.branch,
                "remote": p.remote,
                "output": done.output,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_how_to_allow_a_variable() {
        let e = refused("AWS_SECRET_ACCESS_KEY", &[]);
        assert_eq!(e.errno.as_deref(), Some("EACCES"));
        assert!(
            e.message.contains("--allow-credentials-env NAME") && e.message.contains("gateway"),
            "{}",
            e.message
        );
        let e = refused("OTHER", &["GITHUB_TOKEN".into()]);
        assert!(
            e.message.ends_with("only from GITHUB_TOKEN"),
            "{}",
            e.message
        );
    }
}
