//! bashkit's commands that read all of stdin, made to consume it once.
//!
//! In an exec with stdin, the script reads a pipe fed by the runtime (the
//! `stdin` module). bashkit gives a command it does not stream (`sort`,
//! `uniq`, `sed`, `awk`, `jq`, ...) everything left in that pipe, and then
//! keeps handing the same bytes to every later command: `sort; echo ---;
//! cat` printed the input a second time after the sorted lines, where bash
//! prints nothing (`sort` read the pipe to its end).
//!
//! For such an exec, each of these commands is registered under its own
//! name as a streaming command of the runtime's: it reads the pipe to its
//! end, as the program does in bash, and runs bashkit's own command on
//! those bytes in an interpreter of its own (same filesystem, working
//! directory, exported environment and limits; the exec's stop flag stops
//! it), passing its output, stderr and exit status on. The pipe is then
//! empty for the commands after it. Without stdin nothing changes: the
//! commands stay bashkit's.
//!
//! bashkit hands a registered command the pipe whether or not it reads
//! it, so a command given files (`sort f`, `jq -n`, `sed -i s/a/b/ f`)
//! would leave nothing for a later `cat`, where bash gives `cat` the
//! input. A command is therefore registered only when every use of it in
//! the script reads stdin as a filter ([`reads_only_stdin`]: options and,
//! for `sed`, `awk` and `jq`, the program; no operand that could be a
//! file). Otherwise it stays bashkit's, as it was.

use crate::budget::ExecBudget;
use async_trait::async_trait;
use bashkit::{
    Bash, BashBuilder, Command, CommandContext, CommandStatus, ExecOptions, ExecutionLimits,
    MemoryLimits,
};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// bashkit commands that read their whole input before answering.
pub(crate) const COMMANDS: &[&str] = &[
    "sort", "uniq", "cut", "paste", "nl", "fold", "fmt", "column", "comm", "join", "expand", "od",
    "shuf", "strings", "sed", "awk", "jq",
];

/// What every wrapped command shares in one exec.
#[derive(Clone)]
pub(crate) struct Shared {
    pub budget: ExecBudget,
    pub limits: ExecutionLimits,
    pub memory: MemoryLimits,
    /// Raised with the exec's stop flag (linked once per exec).
    pub cancel: Arc<AtomicBool>,
}

/// Registers `names` (of [`COMMANDS`]) on `builder`.
pub(crate) fn install(
    mut builder: BashBuilder,
    shared: &Shared,
    names: &[&'static str],
) -> BashBuilder {
    for name in names {
        builder = builder.command(
            *name,
            WholeInput {
                name,
                shared: shared.clone(),
            },
        );
    }
    builder
}

struct WholeInput {
    name: &'static str,
    shared: Shared,
}

#[async_trait]
impl Command for WholeInput {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        run_bashkit(self.name, &self.shared, ctx).await
    }
}

/// Runs bashkit's own command `name` for `ctx`: reads the pipe to its end
/// (the input held within the exec's memory budget, `EFBIG` past it) and
/// runs the command on those bytes in an interpreter of its own, passing
/// its output, stderr and exit status on. The runtime's own commands that
/// take over only some forms of a command (`tar`) run the others so.
pub(crate) async fn run_bashkit(
    name: &'static str,
    shared: &Shared,
    ctx: CommandContext<'_>,
) -> bashkit::Result<CommandStatus> {
    let budget = &shared.budget;
    let mut input = Vec::new();
    while let Some(chunk) = ctx.stdin.read_chunk().await? {
        if budget.step_stopped() {
            return Err(budget.stop_error());
        }
        let held = (input.len() + chunk.len()) as u64;
        let what = format!("the input {name} reads");
        budget.admit(held, &what).map_err(bashkit::Error::Io)?;
        input.extend_from_slice(&chunk);
    }
    let mut builder = Bash::builder()
        .fs(Arc::clone(&ctx.fs))
        .cwd(ctx.cwd)
        .limits(shared.limits.clone())
        .memory_limits(shared.memory.clone());
    for (key, value) in ctx.env {
        builder = builder.env(key.clone(), value.clone());
    }
    let mut bash = builder.build();
    let (out, err) = (ctx.stdout.clone(), ctx.stderr.clone());
    let script = format!("{name} \"$@\"");
    let result = bash
        .execute(&script)
        .stdout_fn(move |bytes| {
            let out = out.clone();
            async move { out.write_all(&bytes).await }
        })
        .stderr_fn(move |bytes| {
            let err = err.clone();
            async move { err.write_all(&bytes).await }
        })
        .cancel_with(Arc::clone(&shared.cancel))
        .options(
            ExecOptions::new()
                .arg0(name)
                .positional(ctx.args.iter().cloned())
                .stdin(input),
        )
        .await?;
    Ok(CommandStatus::with_code(result.exit_code))
}

/// Short options that take the next word as their value, per command (an
/// attached value, `-k2`, `-d,`, is one word anyway).
fn value_options(name: &str) -> &'static [&'static str] {
    match name {
        "sort" => &["-k", "-t", "-o", "-S", "-T", "--key", "--field-separator"],
        "cut" => &["-d", "-f", "-b", "-c", "--delimiter", "--fields"],
        "uniq" => &["-f", "-s", "-w"],
        "paste" => &["-d"],
        "nl" => &["-b", "-s", "-w", "-v", "-i", "-n"],
        "fold" | "fmt" => &["-w"],
        "column" => &["-s", "-c", "-o"],
        "join" => &["-1", "-2", "-j", "-t", "-o", "-e"],
        "expand" => &["-t"],
        "od" => &["-A", "-t", "-N", "-j", "-w"],
        "shuf" => &["-n", "--head-count"],
        "strings" => &["-n"],
        "sed" => &["-l"],
        "awk" => &["-F", "-v"],
        "jq" => &["--indent", "-L"],
        _ => &[],
    }
}

/// Whether a use of `name` (one of [`COMMANDS`]) with `args` (`None` for a
/// word that is not plain text) reads stdin and names nothing else to read:
/// options with their values, the program of `sed`, `awk` and `jq`, and no
/// other operand. Unknown shapes answer `false` (the command stays
/// bashkit's).
pub(crate) fn reads_only_stdin(name: &str, args: &[Option<&str>]) -> bool {
    let takes_value = value_options(name);
    let program_first = matches!(name, "sed" | "awk" | "jq");
    let mut program_seen = false;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i] else {
            // An expanded word: the program, or possibly a file.
            if program_first && !program_seen {
                program_seen = true;
                i += 1;
                continue;
            }
            return false;
        };
        i += 1;
        match arg {
            "-" => continue,
            "--" => {
                return args[i..].is_empty()
                    || (program_first && !program_seen && args.len() == i + 1);
            }
            // Options that make the command read something else, or
            // nothing: files to edit or read, input from arguments.
            "-i" | "-f" | "--in-place" | "-n" | "--null-input" | "-e" | "--file"
            | "--from-file"
                if matches!(name, "sed" | "awk" | "jq" | "shuf") =>
            {
                // sed -e SCRIPT and sed -n are still filters.
                if name == "sed" && arg == "-n" {
                    continue;
                }
                if name == "sed" && arg == "-e" {
                    program_seen = true;
                    i += 1;
                    continue;
                }
                return false;
            }
            "--arg" | "--argjson" | "--slurpfile" | "--rawfile" if name == "jq" => {
                if matches!(arg, "--slurpfile" | "--rawfile") {
                    // Reads a file besides stdin: still a filter of stdin.
                }
                i += 2;
            }
            _ if arg.starts_with('-') && arg.len() > 1 => {
                if takes_value.contains(&arg) {
                    i += 1;
                }
                if name == "sed" && arg.starts_with("-i") {
                    return false;
                }
            }
            _ if program_first && !program_seen => program_seen = true,
            _ => return false,
        }
    }
    // An awk program of BEGIN rules alone reads no input.
    let begin_only = name == "awk"
        && args
            .iter()
            .flatten()
            .find(|a| !a.starts_with('-'))
            .is_some_and(|p| p.trim_start().starts_with("BEGIN") && !p.contains("END"));
    !begin_only && (!program_first || program_seen)
}

#[cfg(test)]
mod tests {
    use super::reads_only_stdin;

    fn filter(name: &str, args: &[&str]) -> bool {
        let args: Vec<Option<&str>> = args.iter().map(|a| Some(*a)).collect();
        reads_only_stdin(name, &args)
    }

    #[test]
    fn filters_of_stdin_are_told_from_commands_given_files() {
        assert!(filter("sort", &[]));
        assert!(filter("sort", &["-r", "-k", "2", "-t", ","]));
        assert!(filter("cut", &["-d", ",", "-f", "1"]));
        assert!(filter("sed", &["-n", "s/a/b/p"]));
        assert!(filter("sed", &["-e", "s/a/b/", "-e", "s/c/d/"]));
        assert!(filter("jq", &["-r", ".a", "--arg", "k", "v"]));
        assert!(filter("awk", &["-F", ":", "{print $1}"]));
        assert!(filter("uniq", &["-c", "-"]));
        assert!(!filter("sort", &["f"]));
        assert!(!filter("sort", &["-k", "2", "f"]));
        assert!(!filter("sed", &["-i", "s/a/b/", "f"]));
        assert!(!filter("sed", &["s/a/b/", "f"]));
        assert!(!filter("jq", &["-n", "1"]));
        assert!(!filter("jq", &[".", "f.json"]));
        assert!(!filter("awk", &["BEGIN { print 1 }"]));
        assert!(!filter("shuf", &["-e", "a", "b"]));
        assert!(!reads_only_stdin("sort", &[None]));
        assert!(reads_only_stdin("sed", &[None]));
    }
}
