//! The four ways a script is run: the shell runtime in-process and through
//! the gRPC API, just-bash in node, GNU bash as a process.

pub(crate) mod gnubash;
pub(crate) mod grpc;
pub(crate) mod inproc;
pub(crate) mod justbash;

use crate::scenarios::Scenario;
use anyhow::Result;
use std::time::Duration;

/// The result of one run of a script.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ran {
    /// Wall-clock time of the run as the target measured it.
    pub elapsed: Duration,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Exit status (`-1` when the target failed to run the script at all).
    pub status: i32,
}

/// One target, ready to run scripts.
pub(crate) enum Target {
    InProc(inproc::InProc),
    Grpc(grpc::Grpc),
    JustBash(justbash::JustBash),
    Bash(gnubash::GnuBash),
}

impl Target {
    /// Column name in the report.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Target::InProc(_) => "ours",
            Target::Grpc(_) => "ours-grpc",
            Target::JustBash(_) => "just-bash",
            Target::Bash(_) => "bash",
        }
    }

    /// Puts the scenario's files into a fresh filesystem of this target.
    pub(crate) async fn load(&mut self, sc: &Scenario) -> Result<()> {
        match self {
            Target::InProc(t) => t.load(sc),
            Target::Grpc(t) => t.load(sc).await,
            Target::JustBash(t) => t.load(sc),
            Target::Bash(t) => t.load(sc),
        }
    }

    /// Writes the scenario's files again (untimed), undoing a previous run.
    pub(crate) async fn reset(&mut self, sc: &Scenario) -> Result<()> {
        match self {
            Target::InProc(t) => t.write_files(&sc.files),
            Target::Grpc(t) => t.write_files(&sc.files).await,
            // Every run gets a fresh instance built from the files.
            Target::JustBash(_) => Ok(()),
            Target::Bash(t) => t.write_files(&sc.files),
        }
    }

    /// Runs `script` once, timed.
    pub(crate) async fn run(&mut self, script: &str) -> Result<Ran> {
        match self {
            Target::InProc(t) => t.run(script).await,
            Target::Grpc(t) => t.run(script).await,
            Target::JustBash(t) => t.run(script, "run"),
            Target::Bash(t) => t.run(script),
        }
    }

    /// Runs `script` on the files the last run left.
    pub(crate) async fn check(&mut self, script: &str) -> Result<Ran> {
        match self {
            Target::JustBash(t) => t.run(script, "check"),
            other => other.run(script).await,
        }
    }
}
