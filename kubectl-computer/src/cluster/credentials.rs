//! `kubectl computer credentials NAME`: what a program needs to reach one
//! computer through the API gateway (docs/gateway.md), for users allowed
//! to read the computer's credential Secret: the gateway's address, the
//! computer's name there (`NAMESPACE/NAME`) and its token.

use std::io::Write;
use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::ListParams;

use super::{Cluster, api_error};
use crate::error::{CliError, Result};

/// Label of the gateway's Service (the chart's `ac.apiGateway.selector`).
const GATEWAY_LABEL: &str = "app.kubernetes.io/name=agentcomputer-gateway";
/// Annotation of that Service holding the address clients use (the
/// chart's `gateway.url`, else its Ingress host or in-cluster address).
const GATEWAY_URL_ANNOTATION: &str = "agentcomputer.dev/gateway-url";

/// What a program needs to reach one computer through the gateway.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Credentials {
    /// The gateway's address (`AGENTCOMPUTER_ENDPOINT`).
    pub endpoint: String,
    /// The computer as calls name it there (`NAMESPACE/NAME`).
    pub computer: String,
    /// The computer's token (`AGENTCOMPUTER_TOKEN`).
    pub token: String,
}

impl Credentials {
    /// `export` lines, values quoted for POSIX shells: `eval "$(kubectl
    /// computer credentials NAME)"` sets them for the programs the shell
    /// starts (the CLI and the Python library read the first and last).
    pub fn env(&self) -> String {
        format!(
            "export AGENTCOMPUTER_ENDPOINT={}\nexport AGENTCOMPUTER_COMPUTER={}\nexport AGENTCOMPUTER_TOKEN={}\n",
            quoted(&self.endpoint),
            quoted(&self.computer),
            quoted(&self.token)
        )
    }

    /// One JSON object: `{"endpoint", "computer", "token"}`.
    pub fn json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("strings serialize");
        s.push('\n');
        s
    }
}

/// `s` in single quotes, each `'` written as `'\''`.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Cluster {
    /// The credentials of computer `name` through the gateway at
    /// `gateway`, else at the address its Service announces. Errors: the
    /// computer is not found or has no credential yet, its Secret cannot
    /// be read, or no single gateway is found (then `--gateway` is named).
    pub async fn credentials(&self, name: &str, gateway: Option<&str>) -> Result<Credentials> {
        let c = self.get(name).await?;
        let secret = c.status.and_then(|s| s.credential_secret).ok_or_else(|| {
            CliError::new(format!("computer {name} has no credential Secret yet"))
        })?;
        let (token, _) = self.credential(&secret).await?;
        let endpoint = match gateway {
            Some(g) => g.trim_end_matches('/').to_string(),
            None => self.gateway_url().await?,
        };
        Ok(Credentials {
            endpoint,
            computer: format!("{}/{name}", self.namespace),
            token,
        })
    }

    /// The address the installation's gateway Service announces, looked
    /// for in the release's namespace only (`--agent-namespace`): a
    /// Service elsewhere with the same label and annotation must not be
    /// able to collect the token.
    async fn gateway_url(&self) -> Result<String> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.agent_namespace);
        let found = services
            .list(&ListParams::default().labels(GATEWAY_LABEL))
            .await
            .map_err(|e| {
                CliError::new(format!(
                    "cannot look for the API gateway's Service: {}; pass --gateway URL",
                    api_error(&e)
                ))
            })?;
        let mut urls: Vec<String> = found
            .items
            .iter()
            .filter_map(|s| s.metadata.annotations.as_ref()?.get(GATEWAY_URL_ANNOTATION))
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        urls.sort();
        urls.dedup();
        match urls.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(CliError::new(format!(
                "no API gateway runs in namespace {} (the chart's gateway.enabled; --agent-namespace names the release's namespace); pass --gateway URL",
                self.agent_namespace
            ))),
            many => Err(CliError::new(format!(
                "several API gateways run in namespace {} ({}); pass --gateway URL",
                self.agent_namespace,
                many.join(", ")
            ))),
        }
    }
}

/// Writes `text` to `path`, readable by its owner only (mode 0600 from
/// the start: the token is never readable by others, even briefly). An
/// existing file is replaced whole.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let mut tmp = tempfile::Builder::new()
        .prefix(".credentials")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(dir.unwrap_or(Path::new(".")))
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))?;
    tmp.write_all(text.as_bytes())
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))?;
    tmp.persist(path)
        .map_err(|e| CliError::new(format!("cannot write {}: {}", path.display(), e.error)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_survive_a_shell() {
        let c = Credentials {
            endpoint: "https://gw.example.com".into(),
            computer: "team/it's".into(),
            token: "t0k$en".into(),
        };
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{}printf '%s|%s|%s' \"$AGENTCOMPUTER_ENDPOINT\" \"$AGENTCOMPUTER_COMPUTER\" \"$AGENTCOMPUTER_TOKEN\"",
                c.env()
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "https://gw.example.com|team/it's|t0k$en"
        );
    }

    #[test]
    fn the_file_is_its_owners_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
