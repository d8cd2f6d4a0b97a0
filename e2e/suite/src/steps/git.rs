//! git across the runtimes: a repository made by the shell runtime's
//! `git` is a repository for real git in the sandbox pod (through the
//! FUSE mount), and a commit real git makes there is read back by the
//! shell.

use super::Context;
use anyhow::{Result, ensure};

/// Shell `git init/add/commit`, then real git's `fsck --strict` and `log`
/// in the container runtime, then a commit by real git read by the shell.
pub(super) fn across_runtimes(cx: &mut Context) -> Result<String> {
    cx.exec(
        "box",
        "shell",
        "mkdir -p gp && cd gp && git init -q && echo x > a && git add -A && git commit -qm first",
    )?;
    let out = cx.exec(
        "box",
        "container",
        "cd /workspace/gp && git fsck --strict --no-dangling && git log --format=%s",
    )?;
    ensure!(
        out.ends_with("first\n"),
        "real git in the pod printed {out:?}"
    );
    cx.exec(
        "box",
        "container",
        "cd /workspace/gp && echo y > b && git add b && git -c user.name=pod -c user.email=pod@example.org commit -qm second",
    )?;
    let out = cx.exec(
        "box",
        "shell",
        "cd gp && git log --format='%s %an' && git status --porcelain",
    )?;
    ensure!(
        out == "second pod\nfirst sandbox\n",
        "the shell's git printed {out:?}"
    );
    Ok(
        "shell commit passes fsck --strict in the pod; the pod's commit is read by the shell"
            .into(),
    )
}
