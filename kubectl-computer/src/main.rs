//! `kubectl-computer`: the Agent Computer command-line client. Installed on
//! the PATH it also works as the kubectl plugin `kubectl computer`.
//!
//! Every command talks to a node agent's gRPC API (`--endpoint`, or
//! `AGENTCOMPUTER_ENDPOINT`, default `http://127.0.0.1:7433`; `https://`
//! with `--ca-cert`), sending the agent token it finds (see [`client`]). Failures print
//! one line, `error: ...`, on stderr and exit with status 1 (a bad
//! command line: clap's message and status 2); `exec` exits with the
//! program's own status.

mod client;
mod cmd;
mod error;
mod format;
mod size;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentcomputer_proto::v1::Runtime;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use crate::cmd::exec::ExecArgs;
use crate::cmd::search::GrepArgs;
use crate::error::{CliError, Result};

#[derive(Parser)]
#[command(name = "kubectl-computer", bin_name = "kubectl computer", version)]
#[command(about = "Manage Agent Computers: persistent computers for AI agents")]
struct Cli {
    /// URL of the node agent's API.
    #[arg(long, global = true, env = "AGENTCOMPUTER_ENDPOINT", default_value = client::DEFAULT_ENDPOINT)]
    endpoint: String,
    #[command(flatten)]
    credentials: client::Credentials,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// bash, in-process on the computer's files.
    Shell,
    /// JavaScript (or js): an ES module, in-process on the computer's files;
    /// its default export's result is printed as JSON.
    #[value(alias = "js")]
    Javascript,
    /// A Linux container (not available yet).
    Container,
}

impl From<RuntimeArg> for Runtime {
    fn from(r: RuntimeArg) -> Runtime {
        match r {
            RuntimeArg::Shell => Runtime::Shell,
            RuntimeArg::Javascript => Runtime::Javascript,
            RuntimeArg::Container => Runtime::Container,
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
        #[arg(long, value_parser = size::parse_size)]
        quota: Option<u64>,
        /// Most files, directories and other inodes the computer may hold
        /// [default: 1000000].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_inodes: Option<u64>,
        #[command(flatten)]
        egress: cmd::egress::EgressArgs,
    },
    /// Delete a computer and all its files.
    Delete { name: String },
    /// List computers.
    #[command(alias = "ls-computers")]
    List,
    /// Mount a computer's files at a directory over FUSE (local mode: the
    /// node agent mounts it on its own host).
    Mount { name: String, dir: PathBuf },
    /// Unmount a computer mounted with `mount`.
    Unmount { name: String, dir: PathBuf },
    /// Run a script (or, with --runtime javascript, an ES module) on a
    /// computer; exits with its status.
    Exec {
        name: String,
        #[arg(long, value_enum, default_value = "shell")]
        runtime: RuntimeArg,
        /// Working directory (relative to /workspace) [default: /workspace].
        #[arg(long, default_value = "")]
        cwd: String,
        /// Environment variable for the script, K=V (repeatable).
        #[arg(long = "env", short = 'e', value_parser = parse_env)]
        env: Vec<(String, String)>,
        /// Time limit in seconds (fractions allowed) [default: 60].
        #[arg(long, value_parser = parse_seconds)]
        timeout: Option<Duration>,
        /// Pass this command's standard input to the script.
        #[arg(long, short = 'i')]
        stdin: bool,
        /// JSON given to the module's default-exported function
        /// (--runtime javascript only) [default: null].
        #[arg(long, value_name = "JSON", value_parser = parse_json)]
        input: Option<String>,
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
    /// Upload a local file (atomically replaces the remote file).
    Put {
        name: String,
        local: PathBuf,
        remote: String,
    },
    /// Download a file (`-` for stdout).
    Get {
        name: String,
        remote: String,
        local: PathBuf,
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
        /// Fail instead of replacing an existing target.
        #[arg(short = 'n', long)]
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

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected seconds, got {s:?}"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid timeout {s:?}"))
}

/// Runs one command; `Ok` carries the process exit status.
async fn run(cli: Cli) -> Result<u8> {
    let mut c = client::connect(&cli.endpoint, &cli.credentials).await?;
    let found = |any: bool| if any { 0 } else { 1 };
    match cli.command {
        Command::Create {
            name,
            quota,
            max_inodes,
            egress,
        } => cmd::computers::create(&mut c, name, quota, max_inodes, egress.to_proto()?).await?,
        Command::Delete { name } => cmd::computers::delete(&mut c, name).await?,
        Command::List => cmd::computers::list(&mut c).await?,
        Command::Mount { name, dir } => cmd::mount::mount(&mut c, name, &dir).await?,
        Command::Unmount { name, dir } => cmd::mount::unmount(&mut c, name, &dir).await?,
        Command::Exec {
            name,
            runtime,
            cwd,
            env,
            timeout,
            stdin,
            input,
            script,
        } => {
            let args = ExecArgs {
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
        Command::Ls { name, path, long } => cmd::files::ls(&mut c, name, path, long).await?,
        Command::Cat { name, path } => cmd::files::cat(&mut c, name, path).await?,
        Command::Put {
            name,
            local,
            remote,
        } => cmd::files::put(&mut c, name, &local, remote).await?,
        Command::Get {
            name,
            remote,
            local,
        } => cmd::files::get(&mut c, name, remote, &local).await?,
        Command::Stat {
            name,
            path,
            dereference,
        } => cmd::files::stat(&mut c, name, path, dereference).await?,
        Command::Mkdir {
            name,
            path,
            parents,
        } => cmd::files::mkdir(&mut c, name, path, parents).await?,
        Command::Rm {
            name,
            path,
            recursive,
        } => cmd::files::rm(&mut c, name, path, recursive).await?,
        Command::Mv {
            name,
            from,
            to,
            no_clobber,
        } => cmd::files::mv(&mut c, name, from, to, no_clobber).await?,
        Command::Glob { name, pattern } => {
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
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(CliError(message)) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
