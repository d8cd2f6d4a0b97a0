//! [`Repo`]: one repository found from the current directory, with its
//! object database, references, configuration and work tree.

use crate::Invocation;
use crate::commit::Identity;
use crate::config::{Config, ConfigFile, GLOBAL};
use crate::error::{Error, Result};
use crate::files::{Files, join};
use crate::odb::Odb;
use crate::refs::Refs;
use agentcomputer_fs::FileKind;
use bstr::ByteSlice;

/// An open repository.
pub struct Repo {
    /// Engine access.
    pub files: Files,
    /// The work tree's top directory, engine-absolute.
    pub top: Vec<u8>,
    /// The `.git` directory, engine-absolute.
    pub git_dir: Vec<u8>,
    /// The current directory as a repository path (empty at the top).
    pub prefix: Vec<u8>,
    /// Objects.
    pub odb: Odb,
    /// References.
    pub refs: Refs,
    /// `.git/config` over the global file.
    pub config: Config,
}

/// git's message when no repository is found.
pub const NOT_A_REPO: &str = "not a git repository (or any of the parent directories): .git";

impl Repo {
    /// Opens the repository whose `.git` is at `git_dir` with work tree
    /// `top`, seen from engine directory `cwd`.
    pub fn open(files: &Files, top: Vec<u8>, git_dir: Vec<u8>, cwd: &[u8]) -> Result<Self> {
        let prefix = crate::paths::repo_path(&top, cwd, b".").unwrap_or_default();
        let local = ConfigFile::load(files, &join(&git_dir, b"config"))?;
        if let Some(format) = local.get("extensions.objectformat")
            && !format.eq_ignore_ascii_case("sha1")
        {
            return Err(Error::fatal(format!(
                "unsupported object format '{format}'"
            )));
        }
        let global = ConfigFile::load(files, GLOBAL)?;
        Ok(Self {
            odb: Odb::new(files.clone(), join(&git_dir, b"objects")),
            refs: Refs::new(files.clone(), git_dir.clone()),
            config: Config { local, global },
            files: files.clone(),
            top,
            git_dir,
            prefix,
        })
    }

    /// Finds the repository containing engine directory `cwd`, as git
    /// does: the nearest directory upwards holding a `.git` directory (or
    /// a `.git` file naming one with `gitdir: PATH`).
    ///
    /// Errors: [`NOT_A_REPO`] when there is none.
    pub fn discover(files: &Files, cwd: &[u8]) -> Result<Self> {
        let mut dir = crate::paths::normalize(cwd).unwrap_or_else(|| b"/".to_vec());
        loop {
            let dot_git = join(&dir, b".git");
            match files.stat(&dot_git)? {
                Some(a)
                    if a.kind == FileKind::Directory
                        && files.lstat(&join(&dot_git, b"HEAD"))?.is_some() =>
                {
                    return Self::open(files, dir, dot_git, cwd);
                }
                Some(a) if a.kind == FileKind::RegularFile => {
                    let text = files.read(&dot_git)?.unwrap_or_default();
                    if let Some(target) = text.to_str_lossy().trim().strip_prefix("gitdir:") {
                        let target = target.trim().as_bytes();
                        let git_dir = if target.starts_with(b"/") {
                            target.to_vec()
                        } else {
                            crate::paths::normalize(&join(&dir, target)).unwrap_or_default()
                        };
                        return Self::open(files, dir, git_dir, cwd);
                    }
                }
                _ => {}
            }
            if dir == b"/" {
                return Err(Error::fatal(NOT_A_REPO));
            }
            let cut = dir.iter().rposition(|b| *b == b'/').unwrap_or(0);
            dir.truncate(cut.max(1));
        }
    }

    /// Engine path of repository path `path`.
    pub fn work_path(&self, path: &[u8]) -> Vec<u8> {
        if path.is_empty() {
            self.top.clone()
        } else {
            join(&self.top, path)
        }
    }

    /// The branch `HEAD` is on, short (`main`), or `None` when detached.
    pub fn current_branch(&self) -> Result<Option<String>> {
        Ok(self.refs.head_branch()?.map(|b| {
            b.strip_prefix("refs/heads/")
                .map(str::to_string)
                .unwrap_or(b)
        }))
    }

    /// The identity for `kind` (`AUTHOR` or `COMMITTER`): the
    /// `GIT_<kind>_NAME`/`_EMAIL`/`_DATE` variables, then `user.name` and
    /// `user.email`, then the invocation's fallback, as git-commit-tree(1)
    /// orders them.
    pub fn identity(&self, inv: &Invocation, kind: &str) -> Result<Identity> {
        let name = (inv.env)(&format!("GIT_{kind}_NAME"))
            .or_else(|| self.config.get("user.name"))
            .unwrap_or_else(|| inv.fallback_name.clone());
        let email = (inv.env)(&format!("GIT_{kind}_EMAIL"))
            .or_else(|| self.config.get("user.email"))
            .unwrap_or_else(|| inv.fallback_email.clone());
        if name.trim().is_empty() {
            return Err(Error::fatal("empty ident name (for <>) not allowed"));
        }
        let now = std::time::SystemTime::now();
        let (seconds, offset) = match (inv.env)(&format!("GIT_{kind}_DATE")) {
            Some(text) => crate::commit::parse_date(&text, now)
                .ok_or_else(|| Error::fatal(format!("invalid date format: {text}")))?,
            None => (
                now.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs() as i64)
                    .unwrap_or(0),
                0,
            ),
        };
        Ok(Identity {
            name,
            email,
            seconds,
            offset,
        })
    }
}
