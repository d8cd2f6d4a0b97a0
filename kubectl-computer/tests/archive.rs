//! `export` and `import` through the real `kubectl-computer` binary
//! against a node agent served in-process, with real `git`, `tar` and GNU
//! `diff -r` on FUSE mounts of the computers as oracles. Needs /dev/fuse
//! and root (prints SKIPPED otherwise).

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

fn fuse_available() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent, FUSE tests cannot run on this machine");
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting from the node agent needs root");
        return false;
    }
    true
}

/// The CLI, set to reach `agent` and find its token.
fn cli(agent: &common::Agent) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn run(agent: &common::Agent, args: &[&str]) -> String {
    ok(&args.join(" "), cli(agent).args(args).output().unwrap())
}

/// Runs the CLI with stdout into `file`.
fn run_into(agent: &common::Agent, args: &[&str], file: &Path) {
    let out = cli(agent)
        .args(args)
        .stdout(std::fs::File::create(file).unwrap())
        .output()
        .unwrap();
    ok(&args.join(" "), out);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(["-c", "init.defaultBranch=main", "-c", "safe.directory=*"])
        .args(args)
        .output()
        .unwrap();
    ok(&format!("git {args:?}"), out)
}

/// `diff -r` of two trees, symlinks compared as links; asserts no difference.
fn same_tree(a: &Path, b: &Path) {
    let out = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    ok(&format!("diff -r {} {}", a.display(), b.display()), out);
}

/// Mounts `name` at a new directory `dir`.
fn mount(agent: &common::Agent, name: &str, dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    run(agent, &["mount", name, dir.to_str().unwrap()]);
}

/// A computer holding a git repository goes out with `export` (tar and
/// tar.gz) and into a new computer with `import`; there `git status` is
/// clean and `diff -r` finds the same tree, as `tar x` of the export does.
#[test]
fn a_git_repository_goes_out_and_back_in_whole() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(&dir.path().join("data"), None, false);
    run(&agent, &["create", "demo"]);
    run(&agent, &["create", "copy"]);
    let m1 = dir.path().join("m1");
    mount(&agent, "demo", &m1);

    git(&m1, &["init", "-q", "repo"]);
    let repo = m1.join("repo");
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    std::fs::write(repo.join("src/deep/data.bin"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(repo.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(repo.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/deep/data.bin", repo.join("link")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("README"), "hello again\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "second"]);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    let tar = dir.path().join("demo.tar");
    let tgz = dir.path().join("demo.tar.gz");
    run_into(&agent, &["export", "demo"], &tar);
    run_into(&agent, &["export", "demo", "--format", "tar.gz"], &tgz);
    // GNU tar reads both; what it unpacks is the mounted tree.
    for (archive, flags) in [(&tar, "-xf"), (&tgz, "-xzf")] {
        let out = dir.path().join(format!("x{flags}"));
        std::fs::create_dir(&out).unwrap();
        let unpacked = Command::new("tar")
            .arg(flags)
            .arg(archive)
            .arg("-C")
            .arg(&out)
            .output()
            .unwrap();
        ok("tar x", unpacked);
        same_tree(&m1, &out);
    }

    let said = run(
        &agent,
        &["import", "copy", tgz.to_str().unwrap(), "restored"],
    );
    assert!(said.starts_with("imported "), "{said}");
    let m2 = dir.path().join("m2");
    mount(&agent, "copy", &m2);
    same_tree(&m1, &m2.join("restored"));
    let repo2 = m2.join("restored/repo");
    assert_eq!(git(&repo2, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&repo2, &["log", "--format=%s"]),
        "second\nfirst\n",
        "the history came too"
    );
    git(&repo2, &["fsck", "--no-progress"]);
    // The copy changes on its own.
    std::fs::write(repo2.join("README"), "only the copy\n").unwrap();
    assert_eq!(git(&repo2, &["status", "--porcelain"]), " M README\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A plain tar from standard input, into the top.
    let piped = cli(&agent)
        .args(["import", "copy", "-"])
        .stdin(std::fs::File::open(&tar).unwrap())
        .output()
        .unwrap();
    ok("import -", piped);
    same_tree(&repo, &m2.join("repo"));

    run(&agent, &["unmount", "copy", m2.to_str().unwrap()]);
    run(&agent, &["unmount", "demo", m1.to_str().unwrap()]);
}

/// The USED and INODES columns of `list`'s one row.
fn used(agent: &common::Agent) -> (String, String) {
    let listed = run(agent, &["list"]);
    let row = listed.lines().nth(1).unwrap();
    (row[31..41].to_string(), row[64..72].to_string())
}

/// An import past the quota fails with ENOSPC and leaves the directory as
/// it was: not the files before the one that did not fit, nor its space.
#[test]
fn an_import_past_the_quota_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(&dir.path().join("data"), None, false);
    run(&agent, &["create", "small", "--quota", "2Mi"]);
    run(
        &agent,
        &["exec", "small", "--", "mkdir d && echo kept > d/kept"],
    );
    let before = used(&agent);

    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/first.txt"), "fits\n").unwrap();
    std::fs::write(src.join("a/second.bin"), vec![1u8; 3 << 20]).unwrap();
    let archive = dir.path().join("big.tar");
    let made = Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .args(["a/first.txt", "a/second.bin"])
        .output()
        .unwrap();
    ok("tar c", made);

    let out = cli(&agent)
        .args(["import", "small", archive.to_str().unwrap(), "d"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("ENOSPC") || err.contains("EDQUOT"), "{err}");
    assert!(err.contains("a/second.bin"), "{err}");
    let left = run(&agent, &["exec", "small", "--", "ls -A d"]);
    assert_eq!(left, "kept\n");
    assert_eq!(used(&agent), before, "the space is given back");

    // A file that is not a tar archive changes nothing either.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![b'x'; 4096]).unwrap();
    let out = cli(&agent)
        .args(["import", "small", junk.to_str().unwrap(), "d"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(run(&agent, &["exec", "small", "--", "ls -A d"]), "kept\n");
}
