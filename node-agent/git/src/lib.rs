//! git for the in-process runtimes, over the filesystem engine.
//!
//! The shell's `git` command and the JavaScript runtime's `git` module
//! both call [`run`] with a command line. Repositories are kept in git's
//! own on-disk format (gitrepository-layout(5)) inside the computer, so
//! real git (in the container runtime, or through the FUSE mount) reads
//! and changes them too, and this code reads what real git wrote (loose
//! and packed objects, packed refs, index versions 2–4).
//!
//! The formats come from gitoxide's crates (`gix-object`, `gix-index`,
//! `gix-pack`, `gix-config`, `gix-ignore`, `gix-merge`); what is written
//! here is the porcelain: which objects and files each command reads and
//! changes, and what it prints. The choice and its measurements are in
//! docs/git.md.

pub mod commit;
pub mod config;
pub mod error;
pub mod files;
pub mod index;
pub mod odb;
pub mod paths;
pub mod publish;
pub mod refs;
pub mod remote;
pub mod repo;
pub mod revision;
pub mod tree;
pub mod worktree;

mod changes;
mod checkout;
mod commands;
mod diff_text;

pub use error::{Error, Result};
pub use files::Files;

/// How long a command's engine writes may wait to be committed together.
const COMMIT_WINDOW: std::time::Duration = std::time::Duration::from_millis(50);

/// Where and how one `git` command runs.
pub struct Invocation<'a> {
    /// Engine access; inodes made belong to its owner.
    pub files: Files,
    /// The current directory, engine-absolute (`/proj`).
    pub cwd: Vec<u8>,
    /// What the runtime shows before an engine path (`/workspace` in the
    /// shell), for messages naming a directory.
    pub shown_root: String,
    /// The exec's environment (`GIT_AUTHOR_NAME`, …).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Polled between steps: true once the exec is cancelled or out of
    /// time; the command then stops with [`Error::Stopped`].
    pub stop: &'a dyn Fn() -> bool,
    /// Author and committer name when neither the environment nor
    /// `user.name` gives one.
    pub fallback_name: String,
    /// Author and committer email likewise.
    pub fallback_email: String,
    /// The network, for `clone`, `fetch`, `pull` and `push` over HTTP(S);
    /// `None` where the runtime offers none.
    pub transport: Option<&'a dyn remote::transport::Transport>,
}

impl Invocation<'_> {
    /// How engine path `path` is shown to the user.
    pub fn shown(&self, path: &[u8]) -> String {
        let p = String::from_utf8_lossy(path);
        if self.shown_root.is_empty() {
            p.into_owned()
        } else if p == "/" {
            self.shown_root.clone()
        } else {
            format!("{}{}", self.shown_root, p)
        }
    }

    /// The engine path of `typed` (as given on the command line, relative
    /// to the current directory or absolute in the runtime's view);
    /// `None` for an absolute path outside [`Invocation::shown_root`].
    pub fn engine_path(&self, typed: &[u8]) -> Option<Vec<u8>> {
        if !typed.starts_with(b"/") {
            return paths::normalize(&files::join(&self.cwd, typed));
        }
        let root = self.shown_root.as_bytes();
        if root.is_empty() {
            return paths::normalize(typed);
        }
        match typed.strip_prefix(root) {
            Some(b"") => Some(b"/".to_vec()),
            Some(rest) if rest.starts_with(b"/") => paths::normalize(rest),
            _ => None,
        }
    }

    /// [`Error::Stopped`] once the exec is stopped.
    pub fn check_stop(&self) -> Result<()> {
        if (self.stop)() {
            Err(Error::Stopped)
        } else {
            Ok(())
        }
    }
}

/// What a command printed and its exit status.
#[derive(Debug, Default, Clone)]
pub struct Output {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit status (0 success, 1 a "no" answer or a conflict, 128 fatal,
    /// 129 usage).
    pub code: i32,
}

/// Whether `git NAME` is one of the subcommands implemented here; the
/// shell's `--runtime auto` sends scripts using others to real git.
pub fn has_subcommand(name: &str) -> bool {
    commands::COMMANDS.contains(&name) || matches!(name, "version" | "help")
}

/// The subcommand of `git ARGS…`: the first operand after the global
/// options (`-C DIR`, `-c KEY=VALUE`, `--no-pager`…); `None` for a bare
/// `git` or `git --version`.
pub fn subcommand(args: &[String]) -> Option<&str> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-C" | "-c" => i += 2,
            s if s.starts_with('-') => i += 1,
            s => return Some(s),
        }
    }
    None
}

/// Runs `git ARGS…` (without the leading `git`).
pub fn run(inv: &Invocation, args: &[String]) -> Output {
    let mut out = Output::default();
    // One command's many small writes (an object per file) share engine
    // transactions; everything is committed before the command answers.
    let grouped = Invocation {
        files: inv.files.with_commit_window(COMMIT_WINDOW),
        cwd: inv.cwd.clone(),
        shown_root: inv.shown_root.clone(),
        env: inv.env,
        stop: inv.stop,
        fallback_name: inv.fallback_name.clone(),
        fallback_email: inv.fallback_email.clone(),
        transport: inv.transport,
    };
    let inv = &grouped;
    let result = commands::dispatch(inv, args, &mut out);
    // Committed whatever happened: a stopped or failed command's objects
    // are harmless, and the answer must not run ahead of the writes.
    let flushed = inv.files.flush();
    let result = result.and_then(|code| flushed.map(|()| code));
    match result {
        Ok(code) => out.code = code,
        Err(e) => {
            // Engine paths in messages are shown as the runtime shows them.
            let e = match e {
                Error::Locked(p) => Error::Locked(inv.shown(p.as_bytes())),
                Error::Engine { path, errno } if !path.is_empty() => Error::Engine {
                    path: inv.shown(path.as_bytes()),
                    errno,
                },
                other => other,
            };
            let message = e.to_string();
            if !message.is_empty() {
                out.stderr.extend_from_slice(message.as_bytes());
                if !message.ends_with('\n') {
                    out.stderr.push(b'\n');
                }
            }
            out.code = e.exit_code();
        }
    }
    out
}
