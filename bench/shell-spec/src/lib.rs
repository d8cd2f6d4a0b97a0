//! Conformance harness for the shell runtime against the Oils spec tests.
//!
//! [`corpus`] parses the `spec/*.test.sh` case format, [`select`] picks the
//! bash-relevant files, [`runners`] execute each case on a fresh instance
//! of one shell (the in-process runtime, just-bash under node, `/bin/bash`),
//! [`judge`] compares an outcome with a case's bash expectation, and
//! [`report`] renders the Markdown table. [`brush`] reads the brush shell's
//! YAML cases, which are judged against bash's own outcome instead.
//! Usage: `docs/shell-conformance.md`.

pub mod brush;
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
    /// The shell refused the script before running any of it (the
    /// runtime's answer to a construct it cannot run as bash does); the
    /// text is its message.
    pub refused: Option<String>,
}

/// One case ready to run: the prelude plus the case's script.
#[derive(Debug, Clone)]
pub struct Job {
    /// Full script text.
    pub script: String,
    /// The case reads `spec/testdata` (relative or under `$REPO_ROOT`),
    /// which must be provided.
    pub needs_testdata: bool,
    /// How a brush case sets up the shell; `None` for an Oils case (which
    /// runs in a checkout-like `$REPO_ROOT` and reads its script on stdin).
    pub setup: Option<Setup>,
}

/// The surroundings of a brush case, honoured by every runner.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The shell's standard input. Bash without `args` reads its script
    /// from it; the in-process runners then get [`Job::script`] (the same
    /// text) and an empty stdin.
    pub stdin: Vec<u8>,
    /// The shell's arguments: bash runs `bash --norc --noprofile ARGS`; the
    /// other shells run the script `bash ARGS` (quoted) with `stdin`.
    pub args: Option<Vec<String>>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Files created in the working directory first.
    pub files: Vec<brush::TestFile>,
    /// `$HOME` relative to the working directory.
    pub home_dir: Option<String>,
}

impl Job {
    /// The job for `case`'s script.
    pub fn new(case: &corpus::Case) -> Job {
        Job {
            script: prelude::wrap(&case.script),
            needs_testdata: case.script.contains("REPO_ROOT") || case.script.contains("testdata"),
            setup: None,
        }
    }

    /// The job for a brush case.
    pub fn brush(case: &brush::Case) -> Job {
        let script = match &case.args {
            Some(args) => {
                let mut s = String::from("bash");
                for a in args {
                    s.push(' ');
                    s.push_str(&shell_quote(a));
                }
                s.push('\n');
                s
            }
            None => case.stdin.clone(),
        };
        Job {
            script,
            needs_testdata: false,
            setup: Some(Setup {
                stdin: case.stdin.clone().into_bytes(),
                args: case.args.clone(),
                env: case.env.clone(),
                files: case.files.clone(),
                home_dir: case.home_dir.clone(),
            }),
        }
    }

    /// The bytes the in-process runners put on the script's stdin.
    pub fn inline_stdin(&self) -> Vec<u8> {
        match &self.setup {
            Some(s) if s.args.is_some() => s.stdin.clone(),
            _ => Vec::new(),
        }
    }
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
