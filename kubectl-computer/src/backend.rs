//! The backend the commands use, opened once from the mode
//! [`crate::target::choose`] picks: one node agent (local or given by URL)
//! or a cluster.

use std::path::PathBuf;

use crate::client::{self, Client, DEFAULT_ENDPOINT};
use crate::cluster::Cluster;
use crate::error::{CliError, Result};
use crate::target::{self, Environment, Mode, TargetArgs};

/// Where commands go.
pub enum Backend {
    /// A node agent's gRPC API at `url`, reached with the token and CA of
    /// `args` (found as [`crate::target`] documents; `data_dir` is the local
    /// agent's data directory, whose token serves an endpoint on this
    /// machine).
    Agent {
        url: String,
        args: TargetArgs,
        data_dir: Option<PathBuf>,
        /// `-n NS` given with an endpoint (the API gateway): names are
        /// sent as `NS/NAME`.
        namespace: Option<String>,
    },
    /// AgentComputer resources, and their agents through port-forwards.
    Cluster(Cluster),
}

impl Backend {
    /// Applies the mode rule to `args` and this machine, and opens that
    /// backend. Errors: no usable kubeconfig in cluster mode (an agent's
    /// token and connection errors come with [`Backend::client`]).
    ///
    /// `names_computer`: the command names one computer, so `-n NS` with an
    /// endpoint (an API gateway, where computers are `NS/NAME`) qualifies
    /// that name instead of being refused ([`target::namespace_for_endpoint`]).
    pub async fn open(args: &TargetArgs, names_computer: bool) -> Result<Backend> {
        let env = Environment::probe();
        let (args, namespace) = target::namespace_for_endpoint(args, &env, names_computer);
        Ok(match target::choose(&args, &env).map_err(CliError::new)? {
            Mode::Direct { url } => Backend::Agent {
                url,
                args: args.clone(),
                data_dir: env.local_data_dir,
                namespace,
            },
            Mode::Local { data_dir } => Backend::Agent {
                url: DEFAULT_ENDPOINT.to_string(),
                args: args.clone(),
                data_dir,
                namespace: None,
            },
            Mode::Cluster => Backend::Cluster(
                Cluster::connect(
                    args.context.as_deref(),
                    args.namespace.as_deref(),
                    &args.agent_namespace,
                )
                .await?,
            ),
        })
    }

    /// A client of the agent serving computer `name`, and the name to send
    /// in its requests (`NAMESPACE/NAME` in a cluster). Errors: the token
    /// cannot be read, the agent cannot be reached, or (cluster) the
    /// computer cannot be routed to.
    pub async fn client(&self, name: String) -> Result<(Client, String)> {
        match self {
            Backend::Agent {
                url,
                args,
                data_dir,
                namespace,
            } => {
                let name = match namespace {
                    Some(ns) if !name.contains('/') => format!("{ns}/{name}"),
                    _ => name,
                };
                Ok((client::connect(url, args, data_dir.as_deref()).await?, name))
            }
            Backend::Cluster(cluster) => cluster.client(&name).await,
        }
    }
}
