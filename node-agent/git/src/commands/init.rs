//! `git init [-q] [-b BRANCH | --initial-branch=BRANCH] [DIRECTORY]`.

use super::{option_value, unknown_option};
use crate::error::{Error, Result};
use crate::files::{FILE_PERM, join};
use crate::{Invocation, Output};

/// What `git init` writes to `.git/config` (git 2.39, non-bare).
const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";

/// `info/exclude` as git's template has it.
const EXCLUDE: &str = "# git ls-files --others --exclude-from=.git/info/exclude\n# Lines that start with '#' are comments.\n# For a project mostly in C, the following would be a good set of\n# exclude patterns (uncomment them if you want to use them):\n# *.[oa]\n# *~\n";

pub(super) fn run(inv: &Invocation, args: &[String], out: &mut Output) -> Result<i32> {
    let mut quiet = false;
    let mut branch = None;
    let mut dir = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-q" || a == "--quiet" {
            quiet = true;
        } else if let Some(b) = option_value(args, &mut i, Some("-b"), Some("--initial-branch"))? {
            branch = Some(b);
        } else if a.starts_with('-') {
            return Err(unknown_option("init", a));
        } else if dir.is_none() {
            dir = Some(a.clone());
        } else {
            return Err(Error::Usage(
                "usage: git init [-q] [-b <branch-name>] [<directory>]".into(),
            ));
        }
        i += 1;
    }
    let top = match &dir {
        Some(d) => inv.engine_path(d.as_bytes()).ok_or_else(|| {
            Error::fatal(format!(
                "cannot mkdir {d}: repositories are kept under {}",
                inv.shown(b"/")
            ))
        })?,
        None => inv.cwd.clone(),
    };
    let files = &inv.files;
    files.mkdir_p(&top)?;
    let git_dir = join(&top, b".git");
    let existed = files.lstat(&join(&git_dir, b"HEAD"))?.is_some();
    if !existed {
        let global = crate::config::ConfigFile::load(files, crate::config::GLOBAL)?;
        let branch = branch
            .or_else(|| global.get("init.defaultbranch"))
            .unwrap_or_else(|| "master".into());
        if !crate::refs::valid_name(&branch) {
            return Err(Error::fatal(format!(
                "invalid initial branch name: '{branch}'"
            )));
        }
        for d in [
            "objects/info",
            "objects/pack",
            "refs/heads",
            "refs/tags",
            "info",
            "branches",
            "hooks",
        ] {
            files.mkdir_p(&join(&git_dir, d.as_bytes()))?;
        }
        files.write(&join(&git_dir, b"config"), CONFIG.as_bytes(), FILE_PERM)?;
        files.write(
            &join(&git_dir, b"description"),
            b"Unnamed repository; edit this file 'description' to name the repository.\n",
            FILE_PERM,
        )?;
        files.write(
            &join(&git_dir, b"info/exclude"),
            EXCLUDE.as_bytes(),
            FILE_PERM,
        )?;
        files.write(
            &join(&git_dir, b"HEAD"),
            format!("ref: refs/heads/{branch}\n").as_bytes(),
            FILE_PERM,
        )?;
    }
    if !quiet {
        let verb = if existed {
            "Reinitialized existing"
        } else {
            "Initialized empty"
        };
        out.stdout.extend_from_slice(
            format!("{verb} Git repository in {}/\n", inv.shown(&git_dir)).as_bytes(),
        );
    }
    Ok(0)
}
