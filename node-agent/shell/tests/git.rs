//! `git` in the shell runtime: the acceptance steps as an agent types
//! them, real git reading the result, and git's refusals.

mod common;

use common::Computer;
use std::process::Command;

/// Copies engine directory `from` to host directory `to` (files, modes,
/// symlinks), as the FUSE mount would show it to real git.
fn export(fs: &agentcomputer_fs::Fs, from: &str, to: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).unwrap();
    let dir = fs
        .resolve(agentcomputer_fs::ROOT_INO, from.as_bytes(), true)
        .unwrap();
    for e in fs.readdir(dir.ino, 0, 100_000).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let name = String::from_utf8(e.name.clone()).unwrap();
        let a = fs.getattr(e.ino).unwrap();
        let dst = to.join(&name);
        match a.kind {
            agentcomputer_fs::FileKind::Directory => export(fs, &format!("{from}/{name}"), &dst),
            agentcomputer_fs::FileKind::Symlink => std::os::unix::fs::symlink(
                String::from_utf8(fs.readlink(e.ino).unwrap()).unwrap(),
                &dst,
            )
            .unwrap(),
            _ => {
                std::fs::write(&dst, fs.read_all(e.ino).unwrap()).unwrap();
                std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(a.perm & 0o7777))
                    .unwrap();
            }
        }
    }
}

fn real_git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("real git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn init_add_commit_in_the_shell_is_a_repository_real_git_accepts() {
    let c = Computer::new();
    let out = c
        .sh("mkdir proj && cd proj && git init && echo x > a && git add -A && git commit -m first && git log --oneline && git status")
        .await
        .ok();
    assert!(
        out.starts_with("Initialized empty Git repository in /workspace/proj/.git/\n"),
        "{out}"
    );
    assert!(out.contains("[master (root-commit) "), "{out}");
    assert!(
        out.contains(" first\n 1 file changed, 1 insertion(+)\n create mode 100644 a\n"),
        "{out}"
    );
    assert!(
        out.ends_with("On branch master\nnothing to commit, working tree clean\n"),
        "{out}"
    );
    let host = tempfile::tempdir().unwrap();
    export(&c.fs, "/proj", host.path());
    real_git(host.path(), &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(
        real_git(host.path(), &["log", "--format=%s|%an|%ae"]),
        "first|sandbox|sandbox@computer\n"
    );
    assert_eq!(real_git(host.path(), &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn identity_comes_from_the_environment_then_config() {
    let c = Computer::new();
    let out = c
        .sh("git init -q p && cd p && git config user.name 'Ada L' && git config user.email ada@example.org && echo 1 > f && git add f && git commit -qm one && GIT_AUTHOR_NAME=Bob git commit -q --allow-empty -m two && git log --format='%an <%ae>|%cn'")
        .await
        .ok();
    assert_eq!(
        out,
        "Bob <ada@example.org>|Ada L\nAda L <ada@example.org>|Ada L\n"
    );
}

#[tokio::test]
async fn git_outside_the_workspace_and_unknown_subcommands_are_refused_clearly() {
    let c = Computer::new();
    let run = c.sh("cd /tmp && git status").await;
    assert_eq!(run.code(), 128);
    assert!(
        run.stderr().contains("/tmp is outside /workspace"),
        "{}",
        run.stderr()
    );
    let run = c.sh("git init -q r && cd r && git bisect start").await;
    assert_eq!(run.code(), 1);
    assert!(
        run.stderr().contains("'bisect' is not a git command here"),
        "{}",
        run.stderr()
    );
    let run = c.sh("git status").await;
    assert_eq!(run.code(), 128);
    assert_eq!(
        run.stderr(),
        "fatal: not a git repository (or any of the parent directories): .git\n"
    );
    assert_eq!(c.sh("git --version").await.ok(), "git version 2.39.5\n");
}

#[tokio::test]
async fn a_full_quota_fails_the_commit_and_keeps_the_last_one() {
    let c = Computer::with_limits(agentcomputer_fs::Limits {
        max_bytes: 2 * 1024 * 1024,
        max_inodes: 10_000,
    });
    c.sh("git init -q p && cd p && echo small > a && git add a && git commit -qm one")
        .await
        .ok();
    let run = c
        .sh("cd p && head -c 1500000 /dev/urandom > big && git add big && git commit -qm two")
        .await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    assert!(
        run.stderr().contains("No space left on device"),
        "{}",
        run.stderr()
    );
    assert_eq!(c.sh("cd p && git log --format=%s").await.ok(), "one\n");
}
