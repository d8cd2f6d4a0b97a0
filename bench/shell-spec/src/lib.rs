//! Conformance harness for the shell runtime against the Oils spec tests.
//!
//! [`corpus`] parses the `spec/*.test.sh` case format, [`select`] picks the
//! bash-relevant files, [`runners`] execute each case on a fresh instance
//! of one shell (the in-process runtime, just-bash under node, `/bin/bash`),
//! [`judge`] compares an outcome with a case's bash expectation, and
//! [`report`] renders the Markdown table. Usage: `docs/shell-conformance.md`.

pub mod corpus;
pub mod judge;
pub mod prelude;
pub mod report;
pub mod runners;
pub mod select;

/// What one shell produced for one case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Bytes written to stdout.
    pub stdout: Vec<u8>,
    /// Bytes written to stderr.
    pub stderr: Vec<u8>,
    /// Exit status (124 on a timeout).
    pub status: i32,
    /// The per-case timeout stopped it.
    pub timed_out: bool,
}

/// One case ready to run: the prelude plus the case's script.
#[derive(Debug, Clone)]
pub struct Job {
    /// Full script text.
    pub script: String,
    /// The case reads `spec/testdata` (relative or under `$REPO_ROOT`),
    /// which must be provided.
    pub needs_testdata: bool,
}

impl Job {
    /// The job for `case`'s script.
    pub fn new(case: &corpus::Case) -> Job {
        Job {
            script: prelude::wrap(&case.script),
            needs_testdata: case.script.contains("REPO_ROOT") || case.script.contains("testdata"),
        }
    }
}
