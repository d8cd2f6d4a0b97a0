//! `kubectl-computer`: the Agent Computer command-line client. Installed on
//! the PATH it also works as the kubectl plugin `kubectl computer`.
//!
//! It works on a local node agent, on one agent given by URL (`https://`
//! with `--ca-cert`), or on a cluster's AgentComputer resources; [`target`]
//! documents the rule that picks one and the order in which the agent token
//! is found, [`backend`] opens it. Failures print one line, `error: ...`,
//! on stderr and exit with status 1 (a bad command line: clap's message and
//! status 2); `exec` exits with the program's own status.

/// `println!` that never panics: a closed stdout (`list | head -3`) ends
/// the output quietly instead of panicking on `EPIPE`.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` that never panics, as [`outln`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, $($arg)*).and_then(|()| stdout.flush());
    }};
}

/// `eprintln!` that never panics (stderr closed too: `2>&-`).
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod backend;
mod client;
mod cluster;
mod cmd;
mod error;
use agentcomputer_mcp::format;
mod interrupt;
mod mcp;
mod progress;
mod size;
mod target;
mod ui;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentcomputer_proto::v1::Runtime;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use crate::backend::Backend;
use crate::cluster::computers::CreateArgs;
use crate::cmd::exec::ExecArgs;
use crate::cmd::search::GrepArgs;
use crate::error::{CliError, Result};

/// How the target and the token are chosen, shown by `--help` (the
/// documentation of [`target`] and docs/cli.md say the same).
const TARGET_HELP: &str = "\
Which agent or cluster (first match wins; flags beat the environment):
  1. --endpoint URL: that node agent (https:// trusts --ca-cert)
  2. --local: the node agent on this machine (http://127.0.0.1:7433)
  3. --kube or --context: the cluster of the kubeconfig
  4. AGENTCOMPUTER_ENDPOINT: that node agent, as 1
  5. -n/--namespace: the cluster
  6. a local agent's token file exists ($AGENTCOMPUTER_DATA_DIR or ~/.local/share/agentcomputer): local
  7. a kubeconfig exists (KUBECONFIG or ~/.kube/config): the cluster
  8. otherwise local
-n with an endpoint (1, or 4) names a computer NS/NAME (an API gateway's form); for list it is refused.

Token for a direct or local agent (first found wins):
  --token (or AGENTCOMPUTER_TOKEN), the file --token-file (or AGENTCOMPUTER_TOKEN_FILE),
  then, for an endpoint on this machine, the token file of the local agent's data directory.
  In a cluster each computer's token comes from its credential Secret.";

#[derive(Parser)]
#[command(name = "kubectl-computer", bin_name = "kubectl computer", version)]
#[command(about = "Manage Agent Computers: persistent computers for AI agents")]
#[command(after_help = TARGET_HELP)]
struct Cli {
    #[command(flatten)]
    target: target::TargetArgs,
    #[command(subcommand)]
    command: Command,
}

/// `--wait` and `--timeout` of `create` and `delete` (cluster mode).
#[derive(clap::Args)]
struct WaitArgs {
    /// Wait until the computer is Ready (create) or gone (delete); cluster
    /// mode only, a local agent answers when it is done.
    #[arg(long, num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    wait: bool,
    /// How long to wait, e.g. 90s, 5m.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

impl WaitArgs {
    fn limit(&self) -> Option<Duration> {
        self.wait.then_some(self.timeout)
    }
}

/// `credentials --output`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CredentialsFormat {
    Env,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// bash, in-process on the computer's files.
    Shell,
    /// JavaScript (or js): an ES module, in-process on the computer's files;
    /// its default export's result is printed as JSON.
    #[value(alias = "js")]
    Javascript,
    /// bash with the host's real binaries (python3, node, git...) in a
    /// sandbox over the computer's files (local mode: bubblewrap).
    Container,
    /// (exec only) bash in the shell runtime when every command the script
    /// names is built in there, else in the container; where it ran and
    /// why is printed on stderr after the run.
    Auto,
}

impl From<RuntimeArg> for Runtime {
    fn from(r: RuntimeArg) -> Runtime {
        match r {
            RuntimeArg::Shell => Runtime::Shell,
            RuntimeArg::Javascript => Runtime::Javascript,
            RuntimeArg::Container => Runtime::Container,
            RuntimeArg::Auto => Runtime::Auto,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Create a computer.
    Create {
        name: String,
        /// Storage quota, e.g. 10Gi, 500Mi, 2G [default: 10Gi]. File data,
        /// xattrs and symlink targets count against it.
        #[arg(long, value_parser = parse_quota)]
        quota: Option<u64>,
        /// Most files, directories and other inodes the computer may hold
        /// [default: 1000000].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_inodes: Option<u64>,
        #[command(flatten)]
        egress: cmd::egress::EgressArgs,
        /// Runtimes the computer may use (cluster mode), repeatable or
        /// comma-separated [default: shell,javascript]; container needs
        /// --sandbox-image.
        #[arg(long = "runtime", value_enum, value_delimiter = ',')]
        runtimes: Vec<RuntimeArg>,
        /// Image of the sandbox pod of the container runtime (cluster mode).
        #[arg(long, value_name = "IMAGE")]
        sandbox_image: Option<String>,
        /// Make it a copy: snapshot/NAME, computer/NAME (a fork) or
        /// file:PATH (a file made by `backup`); its files, quota and egress
        /// policy come from the source (docs/snapshots.md).
        #[arg(long, value_name = "SOURCE", conflicts_with_all = ["quota", "max_inodes", "runtimes", "sandbox_image"])]
        from: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Delete a computer and all its files.
    Delete {
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// List computers.
    #[command(alias = "ls-computers")]
    List,
    /// Mount a computer's files at a directory over FUSE (local mode only:
    /// the node agent mounts it on its own host). The directory must be
    /// yours and empty; symbolic links on the mount are not followed and
    /// its files show as yours. A dead mount a killed agent left there is
    /// replaced.
    Mount {
        name: String,
        dir: PathBuf,
        /// Mount even over a directory that has entries (hidden until the
        /// unmount).
        #[arg(long)]
        nonempty: bool,
    },
    /// Unmount a computer mounted with `mount` (also a dead mount a killed
    /// agent left).
    Unmount { name: String, dir: PathBuf },
    /// Run a script (or, with --runtime javascript, an ES module) on a
    /// computer; exits with its status.
    // A fixed usage line: clap's own lists the options given, so an error
    // made `--cwd` or a token from the environment look required.
    #[command(override_usage = "kubectl computer exec [OPTIONS] <NAME> -- <SCRIPT>...")]
    Exec {
        name: String,
        #[arg(long, value_enum, default_value = "shell")]
        runtime: RuntimeArg,
        /// Working directory (relative to /workspace) [default: /workspace].
        #[arg(long, default_value = "", hide_default_value = true)]
        cwd: String,
        /// Environment variable for the script, K=V (repeatable).
        #[arg(long = "env", short = 'e', value_parser = parse_env)]
        env: Vec<(String, String)>,
        /// Time limit in seconds, above 0 and at most 3600 (fractions
        /// allowed) [default: 60].
        #[arg(long, value_parser = parse_seconds)]
        timeout: Option<Duration>,
        /// Pass this command's standard input to the script.
        #[arg(long, short = 'i')]
        stdin: bool,
        /// JSON given to the module's default-exported function
        /// (--runtime javascript only) [default: null].
        #[arg(long, value_name = "JSON", value_parser = parse_json)]
        input: Option<String>,
        /// After the run, wait until its changes are in the node agent's
        /// backup store (as `sync` does); a failed sync makes the exit
        /// status 1 if the run's was 0.
        #[arg(long)]
        sync: bool,
        /// The script or module source; several words are joined with spaces.
        #[arg(last = true, required = true, num_args = 1..)]
        script: Vec<String>,
    },
    /// List a directory (default /workspace).
    Ls {
        name: String,
        #[arg(default_value = "")]
        path: String,
        /// Long listing: mode, links, owner, size, time.
        #[arg(short = 'l')]
        long: bool,
    },
    /// Print a file.
    Cat { name: String, path: String },
    /// Upload a local file (atomically replaces the remote file; into an
    /// existing directory it keeps its name). On a terminal, a progress bar
    /// on stderr shows bytes, rate and ETA.
    Put {
        name: String,
        local: PathBuf,
        remote: String,
        /// Copy a directory tree (as `cp -r`: into REMOTE/NAME when REMOTE
        /// is a directory, else as REMOTE); symlinks stay symlinks, modes
        /// and mtimes are kept.
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// Make the remote parent directories as needed.
        #[arg(short = 'p', long)]
        parents: bool,
        /// No progress bar, even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Download a file (`-` for stdout). On a terminal, a progress bar on
    /// stderr shows bytes, rate and ETA (not while the data itself goes to
    /// the terminal).
    Get {
        name: String,
        remote: String,
        local: PathBuf,
        /// Copy a directory tree (as `cp -r`: into LOCAL/NAME when LOCAL is
        /// a directory, else as LOCAL); symlinks stay symlinks and are
        /// never followed, modes and mtimes are kept.
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// No progress bar, even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    #[command(flatten)]
    Snapshots(cmd::snapshots::SnapshotCommand),
    #[command(flatten)]
    Archive(cmd::archive::ArchiveCommand),
    /// Wait until every call answered on a computer is in the node agent's
    /// backup store (continuous backup to object storage; docs/backup.md).
    Sync { name: String },
    /// Move a computer to another node (a cluster with a backup store
    /// only): the target restores it in the background, then calls wait
    /// while the node serving it hands it over (docs/moves.md). Waits
    /// until the move ends.
    Move {
        name: String,
        /// The node to move to (default: the eligible node with room that
        /// serves the fewest computers).
        #[arg(long)]
        to: Option<String>,
    },
    /// Restore a computer's latest continuous backup into a scratch file on
    /// its node and check it (checksums, SQLite's integrity check, the
    /// engine's check).
    VerifyBackup { name: String },
    /// Save a consistent copy of a computer's whole filesystem (its SQLite
    /// database) to a local file while it stays in use; see the README,
    /// "Back up and restore". (The node agent's continuous backup to object
    /// storage is `sync` and `verify-backup`.)
    Backup {
        name: String,
        /// Where to write the copy; must not exist.
        file: PathBuf,
        /// No progress bar, even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Show a path's attributes.
    Stat {
        name: String,
        path: String,
        /// Describe a symlink's target instead of the link.
        #[arg(short = 'L', long)]
        dereference: bool,
    },
    /// Make a directory.
    Mkdir {
        name: String,
        path: String,
        /// Make parents as needed; no error if it exists.
        #[arg(short = 'p', long)]
        parents: bool,
    },
    /// Remove a file or empty directory.
    Rm {
        name: String,
        path: String,
        /// Remove a directory and its contents.
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
    },
    /// Move or rename a path.
    Mv {
        name: String,
        from: String,
        to: String,
        /// Fail instead of replacing an existing target (no short form:
        /// -n is the namespace).
        #[arg(long)]
        no_clobber: bool,
    },
    /// Print paths matching a glob such as 'src/**/*.rs'.
    Glob { name: String, pattern: String },
    /// Search file contents with a regular expression.
    Grep {
        name: String,
        pattern: String,
        /// File or directory to search [default: /workspace].
        #[arg(default_value = "")]
        path: String,
        /// Only files matching this glob ('*.rs', 'src/**/*.rs').
        #[arg(long, default_value = "")]
        glob: String,
        /// Ignore case.
        #[arg(short = 'i', long)]
        ignore_case: bool,
        /// Stop after this many matches.
        #[arg(short = 'm', long, default_value_t = 1000)]
        max_count: u32,
    },
    /// Print a link that downloads a file of a computer without a
    /// credential until it expires (signed by the node agent; deleting the
    /// computer, or rotating its credential in a cluster, revokes it). See
    /// docs/share.md.
    Share {
        name: String,
        path: String,
        /// How long the link works, e.g. 30m, 1h, 7d (at most 7 days).
        #[arg(long, default_value = "1h", value_parser = parse_expires)]
        expires: Duration,
    },
    /// Commit a directory of a computer with git and push it to a remote
    /// over HTTP(S), through the computer's egress policy. A directory
    /// that is not a repository yet becomes one. Credentials (`USER:SECRET`
    /// or a bare token) come from --credentials-env or --credentials-file
    /// and are never stored in the computer. Prints `BRANCH COMMIT`. See
    /// docs/git.md.
    Publish {
        name: String,
        /// The directory of the computer (`proj`, `/proj`).
        dir: String,
        /// The remote's http:// or https:// URL, without credentials.
        #[arg(long)]
        remote: String,
        /// The remote branch (default: the current branch, or main for a
        /// new repository).
        #[arg(long)]
        branch: Option<String>,
        /// The commit message (default: "Publish DIR").
        #[arg(long, short = 'm')]
        message: Option<String>,
        /// An environment variable holding the credentials.
        #[arg(long, value_name = "VAR", conflicts_with = "credentials_file")]
        credentials_env: Option<String>,
        /// A file holding the credentials.
        #[arg(long, value_name = "FILE")]
        credentials_file: Option<std::path::PathBuf>,
    },
    /// Serve the Model Context Protocol for a computer: tools read, write,
    /// edit, ls, find, grep, delete, exec, share, snapshot, restore and
    /// publish for an MCP host (an agent runtime, an IDE, a desktop
    /// assistant). Over standard input and
    /// output by default; with --listen, streamable HTTP at
    /// http://ADDR/mcp behind a bearer token. See docs/mcp.md.
    Mcp(mcp::McpArgs),
    /// Serve a web page (on loopback, behind a token in the URL it prints)
    /// where a task runs in the shell, container and JavaScript runtimes
    /// of a computer side by side, output streaming live, then its files
    /// can be browsed and previewed. See docs/ui.md.
    Ui(ui::UiArgs),
    /// Print what a program needs to reach a computer through the API
    /// gateway (cluster mode, for users who may read its credential
    /// Secret): AGENTCOMPUTER_ENDPOINT, AGENTCOMPUTER_COMPUTER
    /// (NAMESPACE/NAME) and AGENTCOMPUTER_TOKEN, as `export` lines
    /// (`eval "$(kubectl computer credentials NAME)"`) or JSON.
    Credentials {
        name: String,
        /// The gateway's address; default: the one its Service announces
        /// (the chart's gateway.url, else its Ingress or in-cluster address).
        #[arg(long, env = "AGENTCOMPUTER_GATEWAY")]
        gateway: Option<String>,
        /// env: `export` lines for a POSIX shell; json: one object.
        #[arg(long, short = 'o', value_enum, default_value_t = CredentialsFormat::Env)]
        output: CredentialsFormat,
        /// Write them to this file (mode 0600) instead of standard output.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Forward a local port to the node agent serving a computer (cluster
    /// mode) and print the endpoint and token to use with --endpoint and
    /// --token; runs until interrupted.
    PortForward {
        name: String,
        /// Local address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        address: IpAddr,
        /// Local port (0 picks a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
}

/// `--expires` of `share`: a duration from 1 second to 7 days.
fn parse_expires(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 30m, 1h, 7d)"))?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(7 * 24 * 3600) {
        return Err(format!("{s:?}: a link lasts from 1s to 7d"));
    }
    Ok(d)
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

/// Checks that `s` is JSON and keeps it as written.
fn parse_json(s: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(_) => Ok(s.to_string()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// `exec --timeout`: seconds above 0, at most the agent's maximum
/// ([`agentcomputer_runtime_contract::MAX_EXEC_TIMEOUT`]), said in seconds.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let most = agentcomputer_runtime_contract::MAX_EXEC_TIMEOUT;
    let secs: f64 = s
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("expected seconds (e.g. 30, 1.5), got {s:?}"))?;
    if secs <= 0.0 {
        return Err(format!(
            "{s} seconds is no time to run: give seconds above 0 (e.g. 30), or leave --timeout out for the default, 60"
        ));
    }
    if secs > most.as_secs_f64() {
        return Err(format!(
            "{s} seconds is above the maximum, {} seconds (1 hour)",
            most.as_secs()
        ));
    }
    // Whole milliseconds, as the agent counts them; at least one.
    let ms = (secs * 1000.0).ceil() as u64;
    Ok(Duration::from_millis(ms.max(1)))
}

/// `create --quota`: a size above 0. Zero would read as "unset" on the wire
/// and silently give the default quota, so it is refused.
fn parse_quota(s: &str) -> Result<u64, String> {
    match size::parse_size(s)? {
        0 => Err(format!(
            "{s:?} holds nothing: give a size above 0 (e.g. 500Mi), or leave --quota out for the default, 10Gi"
        )),
        n => Ok(n),
    }
}

/// Runs one command; `Ok` carries the process exit status.
async fn run(cli: Cli) -> Result<u8> {
    // With an endpoint, `-n NS` qualifies the one computer a command names
    // (an API gateway's NS/NAME); `list` names none.
    let names_computer = !matches!(cli.command, Command::List);
    let backend = Backend::open(&cli.target, names_computer).await?;
    let found = |any: bool| if any { 0 } else { 1 };
    match cli.command {
        Command::Create {
            name,
            quota,
            max_inodes,
            egress,
            runtimes,
            sandbox_image,
            from,
            wait,
        } => {
            if let Some(from) = from {
                match &backend {
                    Backend::Cluster(cluster) => {
                        cluster::snapshots::create_from(cluster, &name, &from, wait.limit()).await?
                    }
                    Backend::Agent { .. } => {
                        cmd::snapshots::create_from(&backend, name, &from).await?
                    }
                }
                return Ok(0);
            }
            let egress = egress.to_proto()?;
            if runtimes.contains(&RuntimeArg::Auto) {
                return Err(CliError::new(
                    "--runtime auto is for exec, not a runtime a computer enables: it chooses between shell and container at each exec; enable those (--runtime shell,container)",
                ));
            }
            match &backend {
                Backend::Cluster(cluster) => {
                    let args = CreateArgs {
                        name,
                        quota,
                        max_inodes,
                        egress,
                        runtimes: runtimes.into_iter().map(Runtime::from).collect(),
                        sandbox_image,
                        wait: wait.limit(),
                    };
                    cluster::computers::create(cluster, args).await?
                }
                Backend::Agent { .. } => {
                    if !runtimes.is_empty() || sandbox_image.is_some() {
                        return Err(CliError::new(
                            "--runtime and --sandbox-image are for cluster mode: a local agent runs the shell and JavaScript runtimes",
                        ));
                    }
                    let (mut c, name) = backend.client(name).await?;
                    cmd::computers::create(&mut c, name, quota, max_inodes, egress).await?
                }
            }
        }
        Command::Delete { name, wait } => match &backend {
            Backend::Cluster(cluster) => {
                cluster::computers::delete(cluster, &name, wait.limit()).await?
            }
            Backend::Agent { .. } => {
                let (mut c, name) = backend.client(name).await?;
                cmd::computers::delete(&mut c, name).await?
            }
        },
        Command::List => match &backend {
            Backend::Cluster(cluster) => cluster::computers::list(cluster).await?,
            Backend::Agent { .. } => {
                let (mut c, _) = backend.client(String::new()).await?;
                cmd::computers::list(&mut c).await?
            }
        },
        Command::Mount { .. } | Command::Unmount { .. }
            if matches!(backend, Backend::Cluster(_)) =>
        {
            return Err(CliError::new(
                "mount works in local mode only: in a cluster, sandbox pods mount a computer's volume (spec.runtimes.container)",
            ));
        }
        Command::Credentials {
            name,
            gateway,
            output,
            file,
        } => match &backend {
            Backend::Cluster(cluster) => {
                let creds = cluster.credentials(&name, gateway.as_deref()).await?;
                let text = match output {
                    CredentialsFormat::Env => creds.env(),
                    CredentialsFormat::Json => creds.json(),
                };
                match file {
                    Some(path) => cluster::credentials::write_private(&path, &text)?,
                    None => print!("{text}"),
                }
            }
            Backend::Agent { url, .. } => {
                return Err(CliError::new(format!(
                    "credentials reads a computer's credential Secret in a cluster; this node agent at {url} is reached with the endpoint and token already given"
                )));
            }
        },
        Command::PortForward {
            name,
            address,
            port,
        } => match &backend {
            Backend::Cluster(cluster) => {
                cluster
                    .port_forward(&name, SocketAddr::new(address, port))
                    .await?
            }
            Backend::Agent { url, .. } => {
                return Err(CliError::new(format!(
                    "port-forward works in cluster mode only: this node agent is already at {url}"
                )));
            }
        },
        Command::Mcp(args) => mcp::serve(backend, args).await?,
        Command::Ui(args) => ui::serve(backend, args).await?,
        Command::Mount {
            name,
            dir,
            nonempty,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::mount::mount(&mut c, name, &dir, nonempty).await?
        }
        Command::Unmount { name, dir } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::mount::unmount(&mut c, name, &dir).await?
        }
        Command::Exec {
            name,
            runtime,
            cwd,
            env,
            timeout,
            stdin,
            input,
            sync,
            script,
        } => {
            let (mut c, name) = backend.client(name).await?;
            let args = ExecArgs {
                sync,
                computer: name,
                runtime: runtime.into(),
                cwd,
                env,
                timeout,
                stdin,
                input_json: input.unwrap_or_default(),
                script: script.join(" "),
            };
            let code = cmd::exec::exec(&mut c, args).await?;
            // Exit statuses are 0-255, as the shell reports them.
            return Ok((code & 0xff) as u8);
        }
        Command::Ls { name, path, long } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::ls(&mut c, name, path, long).await?
        }
        Command::Cat { name, path } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::cat(&mut c, name, path).await?
        }
        Command::Put {
            name,
            local,
            remote,
            recursive,
            parents,
            no_progress,
        } => {
            let (mut c, name) = backend.client(name).await?;
            if recursive {
                cmd::trees::put_tree(&mut c, name, &local, remote, parents).await?
            } else {
                let progress = progress::enabled(no_progress, false);
                cmd::files::put(&mut c, name, &local, remote, parents, progress).await?
            }
        }
        Command::Get {
            name,
            remote,
            local,
            recursive,
            no_progress,
        } => {
            let (mut c, name) = backend.client(name).await?;
            if recursive {
                cmd::trees::get_tree(&mut c, name, remote, &local).await?;
                return Ok(0);
            }
            let to_stdout = local == std::path::Path::new("-");
            let progress = progress::enabled(no_progress, to_stdout);
            cmd::files::get(&mut c, name, remote, &local, progress).await?
        }
        Command::Backup {
            name,
            file,
            no_progress,
        } => {
            let (mut c, name) = backend.client(name).await?;
            let progress = progress::enabled(no_progress, false);
            cmd::backup::backup(&mut c, name, &file, progress).await?
        }
        Command::Snapshots(command) => cmd::snapshots::run(&backend, command).await?,
        Command::Archive(command) => cmd::archive::run(&backend, command).await?,
        Command::Sync { name } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::backup_store::sync(&mut c, name).await?
        }
        Command::Move { name, to } => match &backend {
            Backend::Cluster(cluster) => {
                cluster::moves::move_computer(cluster, &name, to.as_deref()).await?
            }
            Backend::Agent { .. } => {
                return Err(error::CliError::new(
                    "move needs a cluster: a computer of a local node agent has no other node to go to",
                ));
            }
        },
        Command::VerifyBackup { name } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::backup_store::verify_backup(&mut c, name).await?
        }
        Command::Publish {
            name,
            dir,
            remote,
            branch,
            message,
            credentials_env,
            credentials_file,
        } => {
            let credentials = match (credentials_env, credentials_file) {
                (Some(var), _) => cmd::publish::CredentialSource::Env(var),
                (None, Some(file)) => cmd::publish::CredentialSource::File(file),
                (None, None) => cmd::publish::CredentialSource::None,
            };
            let (mut c, name) = backend.client(name).await?;
            cmd::publish::publish(&mut c, name, dir, remote, branch, message, credentials).await?
        }
        Command::Share {
            name,
            path,
            expires,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::share::share(&mut c, name, path, expires).await?
        }
        Command::Stat {
            name,
            path,
            dereference,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::stat(&mut c, name, path, dereference).await?
        }
        Command::Mkdir {
            name,
            path,
            parents,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::mkdir(&mut c, name, path, parents).await?
        }
        Command::Rm {
            name,
            path,
            recursive,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::rm(&mut c, name, path, recursive).await?
        }
        Command::Mv {
            name,
            from,
            to,
            no_clobber,
        } => {
            let (mut c, name) = backend.client(name).await?;
            cmd::files::mv(&mut c, name, from, to, no_clobber).await?
        }
        Command::Glob { name, pattern } => {
            let (mut c, name) = backend.client(name).await?;
            return Ok(found(cmd::search::glob(&mut c, name, pattern).await?));
        }
        Command::Grep {
            name,
            pattern,
            path,
            glob,
            ignore_case,
            max_count,
        } => {
            let (mut c, name) = backend.client(name).await?;
            let args = GrepArgs {
                computer: name,
                pattern,
                path,
                glob,
                ignore_case,
                max: max_count,
            };
            return Ok(found(cmd::search::grep(&mut c, args).await?));
        }
    }
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let input_misused = matches!(
        &cli.command,
        Command::Exec { runtime, input: Some(_), .. } if *runtime != RuntimeArg::Javascript
    );
    if input_misused {
        Cli::command()
            .error(
                ErrorKind::ArgumentConflict,
                "--input is only for --runtime javascript (a shell script reads --stdin)",
            )
            .exit();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A call refused because its computer was just handed over to another
    // node did not run: made once more, it finds the computer at its new
    // node (cluster mode looks the node up for every call). Not with
    // stdin, which the first try may have read.
    let retry_moved = !matches!(&cli.command, Command::Exec { stdin: true, .. });
    let mut outcome = runtime.block_on(run(cli));
    if retry_moved
        && let Err(CliError {
            moved_to: Some(node),
            ..
        }) = &outcome
    {
        errln!("the computer moved to node {node}; calling it there");
        outcome = runtime.block_on(run(Cli::parse()));
    }
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(CliError { message, .. }) => {
            match cluster::agent::take_forward_failure() {
                Some(forward) => errln!("error: {message} ({forward})"),
                None => errln!("error: {message}"),
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--runtime` takes each runtime's one name (and `js`), and means the
    /// runtime of that name.
    #[test]
    fn runtime_arguments_are_the_runtimes_names() {
        for arg in RuntimeArg::value_variants() {
            let value = arg.to_possible_value().unwrap();
            if *arg == RuntimeArg::Auto {
                assert_eq!(
                    value.get_name(),
                    agentcomputer_proto::Requested::Auto.name()
                );
                assert_eq!(Runtime::from(*arg), Runtime::Auto);
                continue;
            }
            let named: agentcomputer_runtime_contract::Runtime = value.get_name().parse().unwrap();
            assert_eq!(Runtime::from(named), Runtime::from(*arg));
            for alias in value.get_name_and_aliases() {
                assert_eq!(alias.parse(), Ok(named), "{alias}");
            }
        }
        assert_eq!(RuntimeArg::value_variants().len(), 4);
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Global flags share one namespace of ids with every subcommand's
    /// arguments; a clash only shows when that subcommand is parsed.
    #[test]
    fn global_flags_and_positionals_do_not_clash() {
        for args in [
            &["kc", "--local", "put", "demo", "a", "b"][..],
            &[
                "kc",
                "get",
                "demo",
                "a",
                "b",
                "-n",
                "team",
                "--context",
                "c",
            ],
            &["kc", "mv", "demo", "a", "b", "--no-clobber", "--kube"],
            &[
                "kc",
                "create",
                "demo",
                "--runtime",
                "shell,javascript",
                "--wait=false",
            ],
            &["kc", "delete", "demo", "--wait", "--timeout", "5m"],
            &[
                "kc",
                "port-forward",
                "demo",
                "--address",
                "::1",
                "--port",
                "8080",
            ],
            &[
                "kc",
                "--endpoint",
                "http://x:1",
                "--token",
                "t",
                "exec",
                "demo",
                "--timeout",
                "3",
                "--",
                "true",
            ],
        ] {
            let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(!matches!(cli.command, Command::List), "{args:?}");
        }
        let cli = Cli::try_parse_from(["kc", "--local", "put", "demo", "a", "b"]).unwrap();
        assert!(cli.target.local);
        assert!(
            matches!(cli.command, Command::Put { local, .. } if local == std::path::Path::new("a"))
        );
        assert!(Cli::try_parse_from(["kc", "--local", "-n", "x", "list"]).is_err());
    }
}
