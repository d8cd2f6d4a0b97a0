//! What the git tests share: a computer's engine in a temporary SQLite
//! file, this crate's git run in it, real git run in a host directory
//! with the same identity and dates, and copies between the two.

#![allow(dead_code)]

pub(crate) mod http;

use agentcomputer_fs::{FileKind, Fs, Limits, Owner, ROOT_INO};
use agentcomputer_git::{Files, Invocation, Output, files::join};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Fixed identity and dates, so both gits make byte-identical objects.
pub(crate) const ENV: &[(&str, &str)] = &[
    ("GIT_AUTHOR_NAME", "Ada"),
    ("GIT_AUTHOR_EMAIL", "ada@example.org"),
    ("GIT_AUTHOR_DATE", "@1700000000 +0100"),
    ("GIT_COMMITTER_NAME", "Ada"),
    ("GIT_COMMITTER_EMAIL", "ada@example.org"),
    ("GIT_COMMITTER_DATE", "@1700000000 +0100"),
];

/// A fresh engine in a temporary directory.
pub(crate) fn engine() -> (tempfile::TempDir, Fs) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    (dir, fs)
}

/// Runs this crate's `git ARGS` in engine directory `cwd`.
pub(crate) fn ours(fs: &Fs, cwd: &str, args: &[&str]) -> Output {
    ours_with(fs, cwd, args, None)
}

/// Like [`ours`], with a network.
pub(crate) fn ours_with(
    fs: &Fs,
    cwd: &str,
    args: &[&str],
    transport: Option<&dyn agentcomputer_git::remote::transport::Transport>,
) -> Output {
    let env = |name: &str| {
        ENV.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let stop = || false;
    let inv = Invocation {
        files: Files::new(
            fs.clone(),
            Owner {
                uid: 1000,
                gid: 1000,
            },
        ),
        cwd: cwd.as_bytes().to_vec(),
        shown_root: "/workspace".into(),
        env: &env,
        stop: &stop,
        fallback_name: "sandbox".into(),
        fallback_email: "sandbox@computer".into(),
        transport,
    };
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    agentcomputer_git::run(&inv, &args)
}

/// Like [`ours`], panicking with the output unless the status is 0.
pub(crate) fn ours_ok(fs: &Fs, cwd: &str, args: &[&str]) -> String {
    let out = ours(fs, cwd, args);
    assert_eq!(
        out.code,
        0,
        "git {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs real git `ARGS` in host directory `dir`, isolated from the
/// machine's configuration.
pub(crate) fn real(dir: &Path, args: &[&str]) -> Output {
    let home = dir.parent().unwrap().join(".home");
    std::fs::create_dir_all(&home).unwrap();
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .envs(ENV.iter().copied())
        .output()
        .expect("real git runs");
    Output {
        stdout: o.stdout,
        stderr: o.stderr,
        code: o.status.code().unwrap_or(-1),
    }
}

/// Like [`real`], panicking unless the status is 0.
pub(crate) fn real_ok(dir: &Path, args: &[&str]) -> String {
    let out = real(dir, args);
    assert_eq!(
        out.code,
        0,
        "real git {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs real git `ARGS` in `dir` with `input` on its stdin (isolated
/// from the machine's configuration); returns its trimmed stdout.
pub(crate) fn real_with_input(dir: &Path, args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.parent().unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("real git runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "real git {args:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Writes `data` at engine path `path`, making parents.
pub(crate) fn put(fs: &Fs, path: &str, data: &[u8]) {
    let files = Files::new(
        fs.clone(),
        Owner {
            uid: 1000,
            gid: 1000,
        },
    );
    files.write(path.as_bytes(), data, 0o644).unwrap();
}

/// Reads engine path `path`.
pub(crate) fn get(fs: &Fs, path: &str) -> Vec<u8> {
    let a = fs.resolve(ROOT_INO, path.as_bytes(), true).unwrap();
    fs.read_all(a.ino).unwrap()
}

/// Copies engine directory `from` into host directory `to`, with modes
/// and symlinks, as the FUSE mount would show it.
pub(crate) fn export(fs: &Fs, from: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let files = Files::new(fs.clone(), Owner::ROOT);
    for (name, attr) in files.list(from.as_bytes()).unwrap() {
        let name = String::from_utf8(name).unwrap();
        let src = String::from_utf8(join(from.as_bytes(), name.as_bytes())).unwrap();
        let dst = to.join(&name);
        match attr.kind {
            FileKind::Directory => export(fs, &src, &dst),
            FileKind::Symlink => {
                let target = fs.readlink(attr.ino).unwrap();
                std::os::unix::fs::symlink(String::from_utf8(target).unwrap(), &dst).unwrap();
            }
            _ => {
                std::fs::write(&dst, fs.read_all(attr.ino).unwrap()).unwrap();
                std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(attr.perm & 0o7777))
                    .unwrap();
            }
        }
    }
}

/// Copies host directory `from` into engine directory `to`.
pub(crate) fn import(from: &Path, fs: &Fs, to: &str) {
    let files = Files::new(
        fs.clone(),
        Owner {
            uid: 1000,
            gid: 1000,
        },
    );
    files.mkdir_p(to.as_bytes()).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let dst = format!("{}/{}", to.trim_end_matches('/'), name);
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        if meta.is_dir() {
            import(&entry.path(), fs, &dst);
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            files
                .symlink(dst.as_bytes(), target.to_str().unwrap().as_bytes())
                .unwrap();
        } else {
            files
                .write(
                    dst.as_bytes(),
                    &std::fs::read(entry.path()).unwrap(),
                    meta.permissions().mode() & 0o7777,
                )
                .unwrap();
        }
    }
}

/// stdout as text.
pub(crate) fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
