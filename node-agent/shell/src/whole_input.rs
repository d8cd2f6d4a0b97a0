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

/// Registers [`COMMANDS`] on `builder`.
pub(crate) fn install(mut builder: BashBuilder, shared: &Shared) -> BashBuilder {
    for name in COMMANDS {
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
        let budget = &self.shared.budget;
        let mut input = Vec::new();
        while let Some(chunk) = ctx.stdin.read_chunk().await? {
            if budget.step_stopped() {
                return Err(budget.stop_error());
            }
            let held = (input.len() + chunk.len()) as u64;
            let what = format!("the input {} reads", self.name);
            budget.admit(held, &what).map_err(bashkit::Error::Io)?;
            input.extend_from_slice(&chunk);
        }
        let mut builder = Bash::builder()
            .fs(Arc::clone(&ctx.fs))
            .cwd(ctx.cwd)
            .limits(self.shared.limits.clone())
            .memory_limits(self.shared.memory.clone());
        for (key, value) in ctx.env {
            builder = builder.env(key.clone(), value.clone());
        }
        let mut bash = builder.build();
        let (out, err) = (ctx.stdout.clone(), ctx.stderr.clone());
        let script = format!("{} \"$@\"", self.name);
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
            .cancel_with(Arc::clone(&self.shared.cancel))
            .options(
                ExecOptions::new()
                    .arg0(self.name)
                    .positional(ctx.args.iter().cloned())
                    .stdin(input),
            )
            .await?;
        Ok(CommandStatus::with_code(result.exit_code))
    }
}
