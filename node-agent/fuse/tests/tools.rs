//! Real programs on the mount: git (lock files, renames, fsync, mmap of
//! pack files) from init to gc, fsck and clone.

mod common;

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "gc.auto=0",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn git_repository_lifecycle() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("SKIPPED: git is not installed");
        return;
    }
    let Some(m) = common::mount_new() else { return };
    let repo = m.path("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for i in 0..50 {
        std::fs::write(
            repo.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("f0.txt"), "changed\n").unwrap();
    std::fs::remove_file(repo.join("f1.txt")).unwrap();
    git(&repo, &["commit", "-q", "-a", "-m", "second"]);
    git(&repo, &["gc", "-q"]);
    git(&repo, &["fsck", "--strict"]);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]).trim(), "2");
    git(&m.mnt, &["clone", "-q", "repo", "copy"]);
    assert_eq!(
        std::fs::read_to_string(m.path("copy/f0.txt")).unwrap(),
        "changed\n"
    );
    assert!(!m.path("copy/f1.txt").exists());
    assert!(m.fs.check().unwrap().is_empty());
}
