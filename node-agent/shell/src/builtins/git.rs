//! `git`: the `agentcomputer-git` crate's porcelain over the engine, for
//! repositories under `/workspace` (the computer's own files, which real
//! git in the container runtime sees too). Outside `/workspace` the
//! shell's scratch tree is not the computer's, so `git` refuses there.

use super::stream::{Env, warn};
use super::uname::HOSTNAME;
use crate::sandbox_fs::WORKSPACE;
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};

/// The `git` command.
pub(crate) struct Git(pub Env);

#[async_trait]
impl Command for Git {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let budget = &self.0.budget;
        let cwd = super::workspace::resolve(ctx.cwd, ".");
        let engine_cwd = match super::workspace::engine_path(&cwd) {
            Some(p) => p,
            // `git --version` and `git help` need no repository.
            None if ctx
                .args
                .first()
                .is_some_and(|a| a == "--version" || a == "version" || a == "help") =>
            {
                b"/".to_vec()
            }
            None => {
                warn(
                    &ctx,
                    format!(
                        "fatal: not a git repository: {} is outside {WORKSPACE}, where this runtime keeps repositories\n",
                        cwd.display()
                    ),
                )
                .await?;
                return Ok(CommandStatus::with_code(128));
            }
        };
        // Synchronous engine calls on the exec's thread, as every engine
        // command here makes; nothing of it is held across an await.
        let out = {
            let env = |name: &str| ctx.env.get(name).cloned();
            let stop = || budget.step_stopped();
            let user = agentcomputer_runtime_contract::SANDBOX_USER;
            let inv = agentcomputer_git::Invocation {
                files: agentcomputer_git::Files::new(
                    self.0.engine.engine().clone(),
                    self.0.engine.owner(),
                ),
                cwd: engine_cwd,
                shown_root: WORKSPACE.to_string(),
                env: &env,
                stop: &stop,
                fallback_name: user.to_string(),
                fallback_email: format!("{user}@{HOSTNAME}"),
            };
            agentcomputer_git::run(&inv, ctx.args)
        };
        if out.code == agentcomputer_git::Error::Stopped.exit_code() && budget.stopped() {
            return Err(budget.stop_error());
        }
        if !out.stdout.is_empty() {
            ctx.stdout.write_all(&out.stdout).await?;
        }
        if !out.stderr.is_empty() {
            match ctx.stderr.write_all(&out.stderr).await {
                Err(bashkit::Error::Io(_)) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(CommandStatus::with_code(out.code))
    }
}
