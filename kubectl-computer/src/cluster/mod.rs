//! Cluster mode: computers are `AgentComputer` resources
//! (agentcomputer.dev/v1alpha1) in a namespace, and file and exec commands
//! reach the serving node agent through a port-forward of the API server.

pub mod agent;
pub mod computers;
pub mod credentials;
pub mod moves;
pub mod snapshots;

use agentcomputer_crds::AgentComputer;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::{CliError, Result};

/// A connection to the cluster and the namespaces the CLI works in.
pub struct Cluster {
    client: kube::Client,
    /// Namespace of the computers: `-n`, else the kubeconfig context's,
    /// else `default`.
    pub namespace: String,
    /// Namespace of the node agent pods (`--agent-namespace`).
    pub agent_namespace: String,
}

impl Cluster {
    /// Loads the kubeconfig (`KUBECONFIG`, else `~/.kube/config`; in a pod
    /// without one, the pod's service account) with `context` if given.
    /// Errors: no usable kubeconfig, or a context that does not exist.
    pub async fn connect(
        context: Option<&str>,
        namespace: Option<&str>,
        agent_namespace: &str,
    ) -> Result<Cluster> {
        let options = KubeConfigOptions {
            context: context.map(str::to_string),
            ..KubeConfigOptions::default()
        };
        let config = match Kubeconfig::read() {
            Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| {
                    CliError::new(format!("cannot use the kubeconfig: {}", innermost(&e)))
                })?,
            Err(read_error) => match (context, kube::Config::incluster()) {
                (None, Ok(config)) => config,
                _ => {
                    return Err(CliError::new(format!(
                        "cannot read a kubeconfig (KUBECONFIG or ~/.kube/config): {}",
                        innermost(&read_error)
                    )));
                }
            },
        };
        let namespace = namespace
            .map(str::to_string)
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).map_err(|e| {
            CliError::new(format!(
                "cannot make a Kubernetes client: {}",
                innermost(&e)
            ))
        })?;
        Ok(Cluster {
            client,
            namespace,
            agent_namespace: agent_namespace.to_string(),
        })
    }

    /// The AgentComputers of [`Cluster::namespace`].
    pub fn computers(&self) -> Api<AgentComputer> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The computer `name`. Errors: `computer NAME not found in namespace
    /// NS`, or the API server's message (e.g. RBAC).
    pub async fn get(&self, name: &str) -> Result<AgentComputer> {
        match self.computers().get_opt(name).await {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(self.not_found(name)),
            Err(e) => Err(api_error(&e)),
        }
    }

    fn not_found(&self, name: &str) -> CliError {
        CliError::new(format!(
            "computer {name} not found in namespace {}",
            self.namespace
        ))
    }
}

/// One line for a failed API call: the API server's own message when it
/// answered (`agentcomputers.agentcomputer.dev "x" is forbidden: User "u"
/// cannot get ...`), else the innermost cause (`connection refused`).
pub fn api_error(err: &kube::Error) -> CliError {
    match err {
        // What the API server answers for an API group it does not serve
        // (a plain-text 404) or a resource type missing from a served one.
        kube::Error::Api(status)
            if status.code == 404
                && matches!(
                    status.message.trim(),
                    "404 page not found" | "the server could not find the requested resource"
                ) =>
        {
            CliError::new(
                "this cluster does not serve AgentComputers (agentcomputer.dev/v1alpha1): install the chart charts/agent-computer",
            )
        }
        kube::Error::Api(status) if !status.message.is_empty() => {
            CliError::new(status.message.clone())
        }
        other => CliError::new(format!("Kubernetes API: {}", innermost(other))),
    }
}

/// The innermost cause of `err`, which names what really went wrong, with
/// an OS error code stripped.
pub fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_string()
}
