//! Which node agent the CLI talks to, chosen once at start, and with which
//! token and trust.
//!
//! The rule (also in `--help` and docs/cli.md), first match wins; a flag
//! on the command line beats the environment:
//! 1. `--endpoint URL`: that agent directly (`http://`, or `https://`
//!    trusting `--ca-cert` or the platform's roots; a bare `HOST:PORT` is
//!    `http://`, or `https://` with `--ca-cert`);
//! 2. `--local`: the local agent (`http://127.0.0.1:7433`);
//! 3. `--kube` or `--context`: the cluster of the kubeconfig;
//! 4. `AGENTCOMPUTER_ENDPOINT`: that agent directly, as 1;
//! 5. `-n/--namespace`: the cluster;
//! 6. a local agent's token file in the default data directory exists: local;
//! 7. a kubeconfig exists (`KUBECONFIG`, else `~/.kube/config`): the cluster;
//! 8. else local (its connection error says how to start an agent).
//!
//! `-n NS` with an endpoint (`--endpoint`, or `AGENTCOMPUTER_ENDPOINT` with
//! no `--kube`/`--context`) names the command's computer `NS/NAME`, as an
//! API gateway knows it ([`namespace_for_endpoint`]); for `list`, which
//! names none, it is refused: the endpoint is not a cluster, and guessing
//! which of the two the user meant could list the wrong thing.
//! `--endpoint` with `--local`, `--kube` or `--context` is refused by the
//! parser.
//!
//! The token sent to a direct or local agent, first found wins:
//! `--token` (or `AGENTCOMPUTER_TOKEN`); the file `--token-file` (or
//! `AGENTCOMPUTER_TOKEN_FILE`); for an endpoint on this machine (loopback or
//! `localhost`), `<data-dir>/token` of [`default_data_dir`]. In a cluster
//! each computer's token comes from its credential Secret instead.

use std::path::{Path, PathBuf};

use clap::Args;

/// The variable naming a node agent to talk to directly, like `--endpoint`.
pub const ENDPOINT_ENV: &str = "AGENTCOMPUTER_ENDPOINT";

/// Name of the local agent's token file in its data directory (mode 0600,
/// written by `node-agent local`).
pub const TOKEN_FILE: &str = "token";

/// Flags that select the target; global, so they may come before or after
/// the subcommand.
#[derive(Args, Debug, Default, Clone)]
pub struct TargetArgs {
    /// URL of a node agent's API to talk to directly (for example what
    /// `port-forward` prints); a bare HOST:PORT means http://HOST:PORT, or
    /// https:// with --ca-cert. AGENTCOMPUTER_ENDPOINT sets it too, but
    /// --local, --kube and --context beat that variable.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        conflicts_with_all = ["local_agent", "kube", "context"]
    )]
    pub endpoint: Option<String>,
    /// The node agent's token, sent as `authorization: Bearer TOKEN` (prefer
    /// --token-file: a command line is visible to other users) [default: the
    /// `token` file of the local agent's data directory, for an endpoint on
    /// this machine]. Not used in cluster mode: each computer's token comes
    /// from its credential Secret.
    #[arg(
        long,
        global = true,
        env = "AGENTCOMPUTER_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// File holding the node agent's token (used when --token is not given).
    #[arg(
        long,
        global = true,
        env = "AGENTCOMPUTER_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) to trust for an https:// endpoint, instead of
    /// the platform's roots. Not used for http:// endpoints.
    #[arg(long, global = true, env = "AGENTCOMPUTER_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    /// Name to check the agent's TLS certificate against, instead of the
    /// endpoint's host: `port-forward` prints it (`tls-server-name NAME`)
    /// for an agent serving TLS, whose certificate names the agent, not
    /// 127.0.0.1. Not used for http:// endpoints.
    #[arg(
        long,
        global = true,
        env = "AGENTCOMPUTER_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
    /// Talk to the node agent on this machine (http://127.0.0.1:7433).
    // Its own id: `put` and `get` have a positional `local`.
    #[arg(id = "local_agent", long = "local", global = true, conflicts_with_all = ["kube", "context", "namespace"])]
    pub local: bool,
    /// Talk to the cluster of the kubeconfig (`KUBECONFIG` or ~/.kube/config).
    #[arg(long, global = true)]
    pub kube: bool,
    /// Kubeconfig context to use (implies --kube).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of the computers (implies --kube) [default: the context's].
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Namespace of the node agent pods.
    #[arg(
        long,
        global = true,
        value_name = "NS",
        env = "AGENTCOMPUTER_AGENT_NAMESPACE",
        default_value = "agentcomputer-system"
    )]
    pub agent_namespace: String,
}

/// The mode the rule picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One agent at a URL given by the user.
    Direct { url: String },
    /// The agent on this machine; `data_dir` holds its token file.
    Local { data_dir: Option<PathBuf> },
    /// The cluster of the kubeconfig.
    Cluster,
}

/// What the rule needs to know about this machine.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// The local agent's data directory (`AGENTCOMPUTER_DATA_DIR`, else
    /// `$XDG_DATA_HOME/agentcomputer`, as `node-agent local` picks it).
    pub local_data_dir: Option<PathBuf>,
    /// True when `<local_data_dir>/token` exists.
    pub local_token_exists: bool,
    /// True when a kubeconfig file exists.
    pub kubeconfig_exists: bool,
    /// `AGENTCOMPUTER_ENDPOINT`, when set and not empty.
    pub endpoint: Option<String>,
}

impl Environment {
    /// Looks at the files the rule depends on.
    pub fn probe() -> Environment {
        let local_data_dir = default_data_dir();
        let local_token_exists = local_data_dir
            .as_deref()
            .is_some_and(|d| d.join(TOKEN_FILE).is_file());
        Environment {
            local_data_dir,
            local_token_exists,
            kubeconfig_exists: kubeconfig_exists(
                std::env::var_os("KUBECONFIG").as_deref(),
                dirs::home_dir().as_deref(),
            ),
            endpoint: std::env::var(ENDPOINT_ENV).ok().filter(|e| !e.is_empty()),
        }
    }
}

/// The local agent's data directory, as `node-agent local` picks it:
/// `AGENTCOMPUTER_DATA_DIR`, else `$XDG_DATA_HOME/agentcomputer`
/// (`~/.local/share/agentcomputer`); `None` without a home directory.
pub fn default_data_dir() -> Option<PathBuf> {
    match std::env::var_os("AGENTCOMPUTER_DATA_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => dirs::data_dir().map(|d| d.join("agentcomputer")),
    }
}

/// True when `KUBECONFIG` (a list of paths, `:`-separated) names an existing
/// file, or, when `KUBECONFIG` is unset or empty, `~/.kube/config` exists
/// (kubectl's lookup).
fn kubeconfig_exists(kubeconfig: Option<&std::ffi::OsStr>, home: Option<&Path>) -> bool {
    match kubeconfig {
        Some(list) if !list.is_empty() => std::env::split_paths(list).any(|p| p.is_file()),
        _ => home.is_some_and(|h| h.join(".kube").join("config").is_file()),
    }
}

/// `-n NS` with an endpoint (`--endpoint` or `AGENTCOMPUTER_ENDPOINT`, no
/// `--kube`/`--context`) for a command that names one computer: the
/// endpoint is taken to be an API gateway, where computers are named
/// `NS/NAME`. Returns the arguments without the namespace (so the rule
/// below picks the endpoint) and the namespace to qualify names with.
/// Anything else is returned as given, with no namespace: [`choose`]
/// then refuses `-n` with an endpoint for commands such as `list`.
pub fn namespace_for_endpoint(
    args: &TargetArgs,
    env: &Environment,
    names_computer: bool,
) -> (TargetArgs, Option<String>) {
    let endpoint = args.endpoint.is_some() || (env.endpoint.is_some() && !args.local);
    match &args.namespace {
        Some(ns) if names_computer && endpoint && !args.kube && args.context.is_none() => (
            TargetArgs {
                namespace: None,
                ..args.clone()
            },
            Some(ns.clone()),
        ),
        _ => (args.clone(), None),
    }
}

/// Applies the rule of this module's documentation. Errors: `-n` with an
/// endpoint, as a message for the user.
pub fn choose(args: &TargetArgs, env: &Environment) -> Result<Mode, String> {
    let direct = |url: &String, from: &str| match &args.namespace {
        Some(ns) => Err(format!(
            "-n/--namespace {ns} has no meaning with {from} {url}: a node agent reached directly has no namespaces; \
             leave out -n, or choose the cluster with --kube"
        )),
        None => Ok(Mode::Direct { url: url.clone() }),
    };
    if let Some(url) = &args.endpoint {
        return direct(url, "--endpoint");
    }
    let local = Mode::Local {
        data_dir: env.local_data_dir.clone(),
    };
    if args.local {
        return Ok(local);
    }
    if args.kube || args.context.is_some() {
        return Ok(Mode::Cluster);
    }
    if let Some(url) = &env.endpoint {
        return direct(url, ENDPOINT_ENV);
    }
    if args.namespace.is_some() {
        return Ok(Mode::Cluster);
    }
    if env.local_token_exists {
        return Ok(local);
    }
    if env.kubeconfig_exists {
        return Ok(Mode::Cluster);
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_with_an_endpoint_qualifies_a_computer_but_not_a_list() {
        let args = TargetArgs {
            endpoint: Some("https://gw.example.com".into()),
            namespace: Some("team".into()),
            ..TargetArgs::default()
        };
        let env = env(true, true);
        let (rest, ns) = namespace_for_endpoint(&args, &env, true);
        assert_eq!(ns.as_deref(), Some("team"));
        assert_eq!(choose(&rest, &env), Ok(direct("https://gw.example.com")));
        let (rest, ns) = namespace_for_endpoint(&args, &env, false);
        assert_eq!(ns, None);
        assert!(choose(&rest, &env).is_err());
        // The variable's endpoint counts too; --kube means the cluster.
        let from_env = TargetArgs {
            namespace: Some("team".into()),
            ..TargetArgs::default()
        };
        let (_, ns) =
            namespace_for_endpoint(&from_env, &with_endpoint_env("http://10.0.0.1:7433"), true);
        assert_eq!(ns.as_deref(), Some("team"));
        let kube = TargetArgs {
            kube: true,
            ..from_env
        };
        let (_, ns) =
            namespace_for_endpoint(&kube, &with_endpoint_env("http://10.0.0.1:7433"), true);
        assert_eq!(ns, None);
    }

    fn env(token: bool, kubeconfig: bool) -> Environment {
        Environment {
            local_data_dir: Some("/data".into()),
            local_token_exists: token,
            kubeconfig_exists: kubeconfig,
            endpoint: None,
        }
    }

    fn with_endpoint_env(url: &str) -> Environment {
        Environment {
            endpoint: Some(url.into()),
            ..env(true, true)
        }
    }

    const LOCAL: fn() -> Mode = || Mode::Local {
        data_dir: Some("/data".into()),
    };

    fn direct(url: &str) -> Mode {
        Mode::Direct { url: url.into() }
    }

    #[test]
    fn endpoint_flag_wins_over_the_machine_and_the_environment() {
        let args = TargetArgs {
            endpoint: Some("http://10.0.0.1:7433".into()),
            token: Some("t".into()),
            ..TargetArgs::default()
        };
        assert_eq!(
            choose(&args, &with_endpoint_env("http://10.0.0.2:7433")),
            Ok(direct("http://10.0.0.1:7433"))
        );
    }

    #[test]
    fn explicit_flags_beat_the_endpoint_variable() {
        let env = with_endpoint_env("http://10.0.0.2:7433");
        let local = TargetArgs {
            local: true,
            ..TargetArgs::default()
        };
        assert_eq!(choose(&local, &env), Ok(LOCAL()));
        for args in [
            TargetArgs {
                kube: true,
                ..TargetArgs::default()
            },
            TargetArgs {
                context: Some("prod".into()),
                namespace: Some("team".into()),
                ..TargetArgs::default()
            },
        ] {
            assert_eq!(choose(&args, &env), Ok(Mode::Cluster));
        }
        // Nothing explicit: the variable.
        assert_eq!(
            choose(&TargetArgs::default(), &env),
            Ok(direct("http://10.0.0.2:7433"))
        );
    }

    #[test]
    fn a_namespace_with_an_endpoint_is_refused() {
        let flag = TargetArgs {
            endpoint: Some("http://10.0.0.1:7433".into()),
            namespace: Some("team".into()),
            ..TargetArgs::default()
        };
        let err = choose(&flag, &env(true, true)).unwrap_err();
        assert!(
            err.contains("-n/--namespace team has no meaning with --endpoint http://10.0.0.1:7433"),
            "{err}"
        );
        let from_env = TargetArgs {
            namespace: Some("team".into()),
            ..TargetArgs::default()
        };
        let err = choose(&from_env, &with_endpoint_env("http://10.0.0.2:7433")).unwrap_err();
        assert!(
            err.contains("with AGENTCOMPUTER_ENDPOINT http://10.0.0.2:7433")
                && err.contains("--kube"),
            "{err}"
        );
    }

    #[test]
    fn explicit_flags() {
        let local = TargetArgs {
            local: true,
            ..TargetArgs::default()
        };
        assert_eq!(choose(&local, &env(false, true)), Ok(LOCAL()));
        for args in [
            TargetArgs {
                kube: true,
                ..TargetArgs::default()
            },
            TargetArgs {
                context: Some("prod".into()),
                ..TargetArgs::default()
            },
            TargetArgs {
                namespace: Some("team".into()),
                ..TargetArgs::default()
            },
        ] {
            // Even with a local agent's token present.
            assert_eq!(choose(&args, &env(true, false)), Ok(Mode::Cluster));
        }
    }

    #[test]
    fn defaults_look_at_the_machine() {
        let none = TargetArgs::default();
        assert_eq!(choose(&none, &env(true, true)), Ok(LOCAL()));
        assert_eq!(choose(&none, &env(true, false)), Ok(LOCAL()));
        assert_eq!(choose(&none, &env(false, true)), Ok(Mode::Cluster));
        assert_eq!(choose(&none, &env(false, false)), Ok(LOCAL()));
    }

    #[test]
    fn kubeconfig_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        assert!(!kubeconfig_exists(None, Some(home)));
        std::fs::create_dir(home.join(".kube")).unwrap();
        std::fs::write(home.join(".kube/config"), "").unwrap();
        assert!(kubeconfig_exists(None, Some(home)));
        assert!(kubeconfig_exists(Some("".as_ref()), Some(home)));
        // KUBECONFIG set: ~/.kube/config is not consulted.
        let other = home.join("other");
        assert!(!kubeconfig_exists(Some(other.as_os_str()), Some(home)));
        std::fs::write(&other, "").unwrap();
        let list = std::env::join_paths([home.join("missing"), other]).unwrap();
        assert!(kubeconfig_exists(Some(&list), None));
    }
}
