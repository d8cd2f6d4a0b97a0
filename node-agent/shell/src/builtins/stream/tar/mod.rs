//! `tar`: the runtime's own for the forms that move archives of
//! `/workspace` (`tar x`, `tar xf -`, `tar xv`, `-C DIR`, `tar c DIR`,
//! `tar cf - DIR`, `tar cf FILE DIR`, `tar t`, gzip with `z` or recognized
//! when read), streaming: an archive of any size passes in bounded memory,
//! where bashkit's `tar` holds the whole archive (a 100 MB one did not fit
//! an exec's 256 MiB budget).
//!
//! Packing and unpacking are the archive code the node agent's Export and
//! Import use (`agentcomputer-archive`), on a worker thread fed and
//! drained by this command ([`worker`]): an archive from anyone is
//! unpacked only under its directory, never through a symlink, without
//! devices, set-user-ID bits or names past `PATH_MAX`, and a refused entry
//! stops the command with a clear `tar:` line and status 2. Every other
//! form (`j`, `O`, `--strip-components`, `--exclude`, member operands of
//! `x` and `t`, `tv`, paths outside `/workspace`) runs bashkit's `tar`,
//! which reads its whole input within the exec's memory budget.

mod create;
mod extract;
mod options;
mod report;
mod worker;

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

use super::Env;
use super::input::{absolute, workspace_relative};
use crate::whole_input::{Shared, run_bashkit};
use options::{Mode, Parsed};

/// The `tar` command: `env` for the engine and the exec's budget,
/// `fallback` to run bashkit's `tar` for the forms this one leaves.
pub(crate) struct Tar {
    pub env: Env,
    pub fallback: Shared,
}

#[async_trait]
impl Command for Tar {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let Parsed::Plan(plan) = options::parse(ctx.args) else {
            return run_bashkit("tar", &self.fallback, ctx).await;
        };
        match plan.mode {
            Mode::Create => match create::members(ctx.cwd, &self.env, &plan) {
                Some(members) => create::run(&ctx, &self.env, &plan, members).await,
                None => run_bashkit("tar", &self.fallback, ctx).await,
            },
            Mode::Extract | Mode::List => {
                let into = directory(ctx.cwd, &plan.dirs);
                let shown = plan.dirs.last().map_or(".", String::as_str);
                match workspace_relative(&into) {
                    Some(rel) => extract::run(&ctx, &self.env, &plan, &rel, shown).await,
                    // Only `x` writes there; `t` lists from anywhere.
                    None if plan.mode == Mode::List => {
                        extract::run(&ctx, &self.env, &plan, ".", shown).await
                    }
                    None => run_bashkit("tar", &self.fallback, ctx).await,
                }
            }
        }
    }
}

/// The directory `dirs` (`-C` values, each taken from the one before)
/// lead to from `cwd`.
fn directory(cwd: &Path, dirs: &[String]) -> PathBuf {
    dirs.iter()
        .fold(cwd.to_path_buf(), |at, dir| absolute(&at, dir))
}
