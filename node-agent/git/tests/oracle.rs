//! The same session run by real git (2.39) in a host directory and by
//! this crate in an engine: every command's stdout and exit status must
//! match, and so must the commit ids (the same objects, byte for byte).

mod common;

use common::*;
use std::path::Path;

/// One step of a session.
enum Step<'a> {
    /// Write a file (repository-relative) with this content.
    Write(&'a str, &'a str),
    /// Remove a file.
    Remove(&'a str),
    /// Run git; stdout and status are compared.
    Git(&'a [&'a str]),
    /// Run git; only the status is compared (messages that name
    /// directories differ: `/workspace/…` against the host path).
    GitStatusOnly(&'a [&'a str]),
}
use Step::*;

/// Runs `steps` in both gits and compares them step by step; the file
/// contents of the work tree are compared at the end.
fn agree(steps: &[Step]) {
    let (_engine_dir, fs) = engine();
    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    put(&fs, "/repo/.keep", b"");
    std::fs::write(repo.join(".keep"), b"").unwrap();
    for (n, step) in steps.iter().enumerate() {
        match step {
            Write(path, data) => {
                put(&fs, &format!("/repo/{path}"), data.as_bytes());
                let p = repo.join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, data).unwrap();
            }
            Remove(path) => {
                let files =
                    agentcomputer_git::Files::new(fs.clone(), agentcomputer_fs::Owner::ROOT);
                files
                    .remove_file(format!("/repo/{path}").as_bytes())
                    .unwrap();
                std::fs::remove_file(repo.join(path)).unwrap();
            }
            Git(args) | GitStatusOnly(args) => {
                let a = real(&repo, args);
                let b = ours(&fs, "/repo", args);
                let context = format!(
                    "step {n}: git {}\n--- real git (status {}):\n{}{}\n--- ours (status {}):\n{}{}",
                    args.join(" "),
                    a.code,
                    String::from_utf8_lossy(&a.stdout),
                    String::from_utf8_lossy(&a.stderr),
                    b.code,
                    String::from_utf8_lossy(&b.stdout),
                    String::from_utf8_lossy(&b.stderr)
                );
                assert_eq!(a.code, b.code, "{context}");
                if matches!(step, Git(_)) {
                    assert_eq!(
                        String::from_utf8_lossy(&a.stdout),
                        String::from_utf8_lossy(&b.stdout),
                        "{context}"
                    );
                }
            }
        }
    }
    compare_trees(&fs, "/repo", &repo);
}

fn compare_trees(fs: &agentcomputer_fs::Fs, engine_dir: &str, host_dir: &Path) {
    let exported = tempfile::tempdir().unwrap();
    export(fs, engine_dir, exported.path());
    for entry in walk(host_dir) {
        let rel = entry.strip_prefix(host_dir).unwrap();
        if rel.starts_with(".git") {
            continue;
        }
        let mine = exported.path().join(rel);
        assert_eq!(
            std::fs::read(&entry).ok(),
            std::fs::read(&mine).ok(),
            "{}",
            rel.display()
        );
    }
    for entry in walk(exported.path()) {
        let rel = entry.strip_prefix(exported.path()).unwrap();
        if !rel.starts_with(".git") {
            assert!(
                host_dir.join(rel).exists(),
                "only ours has {}",
                rel.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn first_commits_status_log_and_diff_match_real_git() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Git(&["status"]),
        Write("a.txt", "one\ntwo\nthree\n"),
        Write("src/lib.rs", "fn main() {}\n"),
        Git(&["status"]),
        Git(&["status", "--short"]),
        Git(&["add", "-A"]),
        Git(&["status"]),
        Git(&["commit", "-q", "-m", "first"]),
        Git(&["log"]),
        Git(&["log", "--oneline"]),
        Git(&["rev-parse", "HEAD"]),
        Git(&["status"]),
        Git(&["commit", "-m", "again"]),
        Write("a.txt", "one\n2\nthree\nfour\n"),
        Write("new.txt", "n\n"),
        Git(&["status"]),
        Git(&["status", "--porcelain"]),
        Git(&["diff"]),
        Git(&["diff", "--stat"]),
        Git(&["add", "a.txt"]),
        Git(&["diff", "--cached"]),
        Git(&["diff", "--name-status", "--cached"]),
        Git(&["commit", "-m", "second\n\nwith a body"]),
        Git(&["log", "-n", "1"]),
        Git(&["log", "--format=%H %s %an <%ae>"]),
        Git(&["show", "HEAD"]),
        Git(&["show", "HEAD~1:a.txt"]),
        Git(&["diff", "HEAD~1", "HEAD"]),
        Git(&["log", "--oneline", "--", "src"]),
        Git(&["rev-parse", "--short", "HEAD~1"]),
        Git(&["diff", "no-such-revision"]),
        Git(&["diff", "HEAD~9"]),
        Git(&["diff", "a.txt"]),
        Git(&["branch", "HEAD"]),
    ]);
}

#[test]
fn adding_everything_in_an_empty_work_tree_adds_nothing() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Remove(".keep"),
        Git(&["add", "-A"]),
        Git(&["status", "--short"]),
        GitStatusOnly(&["commit", "-q", "-m", "nothing"]),
    ]);
}

#[test]
fn branches_checkout_and_merges_match_real_git() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Write("f.txt", "1\n2\n3\n4\n5\n6\n7\n8\n"),
        Git(&["add", "."]),
        Git(&["commit", "-q", "-m", "base"]),
        Git(&["branch", "feature"]),
        Git(&["branch"]),
        Git(&["checkout", "-q", "feature"]),
        Write("f.txt", "1\n2\n3\nfeature\n5\n6\n7\n8\n"),
        Write("g.txt", "g\n"),
        Git(&["add", "-A"]),
        Git(&["commit", "-q", "-m", "on feature"]),
        Git(&["checkout", "-q", "master"]),
        Git(&["merge", "feature"]),
        Git(&["log", "--oneline"]),
        Git(&["reset", "-q", "--hard", "HEAD~1"]),
        Write("f.txt", "1\n2\n3\nmaster\n5\n6\n7\n8\n"),
        Git(&["commit", "-q", "-a", "-m", "on master"]),
        Git(&["merge", "feature"]),
        Git(&["status"]),
        Git(&["status", "--short"]),
        Git(&["diff", "--cached", "--name-only"]),
        Write("f.txt", "1\n2\n3\nboth\n5\n6\n7\n8\n"),
        Git(&["add", "f.txt"]),
        Git(&["status"]),
        Git(&["commit", "-q", "--no-edit", "-m", "Merge branch 'feature'"]),
        Git(&["log", "--oneline"]),
        Git(&["log", "--oneline", "feature..master"]),
        Git(&["log", "--oneline", "master..feature"]),
        Git(&["log", "--format=%s", "^feature", "master"]),
        Git(&["log", "--oneline", "--all"]),
        Git(&["branch", "-d", "feature"]),
        Git(&["tag", "v1"]),
        Git(&["tag", "-a", "v2", "-m", "release two"]),
        Git(&["tag"]),
        Git(&["rev-parse", "v2^{commit}"]),
        Git(&["switch", "-c", "other"]),
        Git(&["branch", "--show-current"]),
        Git(&["checkout", "-q", "master"]),
        Git(&["checkout", "-q", "-b", "bin"]),
    ]);
}

#[test]
fn a_binary_conflict_keeps_our_file_whole_like_real_git() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Write("bin", "\u{0}base\n"),
        Git(&["add", "bin"]),
        Git(&["commit", "-q", "-m", "base"]),
        Git(&["checkout", "-q", "-b", "other"]),
        Write("bin", "\u{0}theirs\n"),
        Git(&["commit", "-q", "-a", "-m", "theirs"]),
        Git(&["checkout", "-q", "master"]),
        Write("bin", "\u{0}ours\n"),
        Git(&["commit", "-q", "-a", "-m", "ours"]),
        Git(&["merge", "other"]),
        Git(&["status", "--short"]),
        Git(&["merge", "--abort"]),
        Git(&["status", "--short"]),
    ]);
}

#[test]
fn resets_restores_removals_and_ignores_match_real_git() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Write(".gitignore", "*.log\nbuild/\n!keep.log\n"),
        Write("a", "a\n"),
        Write("x.log", "noise\n"),
        Write("keep.log", "kept\n"),
        Write("build/out.bin", "bin\n"),
        Write("docs/readme", "r\n"),
        Git(&["status", "--short"]),
        Git(&["status", "--short", "-uall"]),
        Git(&["ls-files", "--others", "--exclude-standard"]),
        Git(&["ls-files", "-o"]),
        Git(&["add", "."]),
        Git(&["status", "--porcelain"]),
        Git(&["ls-files"]),
        Git(&["ls-files", "-s"]),
        Git(&["add", "x.log"]),
        Git(&["commit", "-q", "-m", "one"]),
        Write("a", "changed\n"),
        Git(&["restore", "a"]),
        Git(&["status", "--short"]),
        Write("a", "changed again\n"),
        Git(&["add", "a"]),
        Git(&["restore", "--staged", "a"]),
        Git(&["status", "--short"]),
        Git(&["ls-files", "-m"]),
        Git(&["checkout", "--", "a"]),
        Git(&["rm", "-q", "docs/readme"]),
        Git(&["status", "--short"]),
        Git(&["reset", "-q", "HEAD", "docs/readme"]),
        Git(&["status", "--short"]),
        Git(&["mv", "keep.log", "kept.log"]),
        Git(&["status", "--short"]),
        Git(&["commit", "-q", "-m", "two"]),
        Git(&["reset", "--soft", "HEAD~1"]),
        Git(&["status", "--short"]),
        Git(&["reset"]),
        Git(&["status", "--short"]),
        Git(&["reset", "-q", "--hard"]),
        Git(&["status", "--short"]),
        Remove("a"),
        Git(&["status"]),
        Git(&["commit", "-q", "-a", "-m", "three"]),
        Git(&["log", "--format=%h %s", "--reverse"]),
        Git(&["rm", "nope"]),
        Git(&["log", "does-not-exist"]),
        Git(&["config", "user.name", "Someone"]),
        Git(&["config", "user.name"]),
        Git(&["config", "--get", "user.missing"]),
    ]);
}

#[test]
fn unusual_file_names_are_listed_as_git_quotes_them() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Write("sp ace.txt", "1\n"),
        Write("\u{fc}n\u{ef}.txt", "2\n"),
        Write("q\"uote", "3\n"),
        Write("back\\slash", "4\n"),
        Write("dir with space/f", "5\n"),
        Git(&["status"]),
        Git(&["status", "--short"]),
        Git(&["status", "--porcelain"]),
        Git(&["status", "-s", "-uall"]),
        Git(&["add", "-A"]),
        Git(&["status"]),
        Git(&["status", "--porcelain"]),
        Git(&["ls-files"]),
        Git(&["diff", "--cached", "--name-only"]),
        Git(&["diff", "--cached", "--name-status"]),
        Git(&["commit", "-q", "-m", "names"]),
        Git(&["mv", "sp ace.txt", "new name.txt"]),
        Git(&["status", "--short"]),
        Git(&["status"]),
    ]);
}

#[test]
fn each_kind_of_unmerged_path_is_named_as_git_names_it() {
    agree(&[
        GitStatusOnly(&["init", "-q"]),
        Write("f", "1\n2\n3\n"),
        Write("d", "keep\n"),
        Git(&["add", "-A"]),
        Git(&["commit", "-q", "-m", "base"]),
        Git(&["checkout", "-q", "-b", "other"]),
        Write("f", "1\nother\n3\n"),
        Remove("d"),
        Write("n", "theirs\n"),
        Git(&["add", "-A"]),
        Git(&["commit", "-q", "-m", "other"]),
        Git(&["checkout", "-q", "master"]),
        Write("f", "1\nmaster\n3\n"),
        Write("d", "changed\n"),
        Write("n", "ours\n"),
        Git(&["add", "-A"]),
        Git(&["commit", "-q", "-m", "master"]),
        GitStatusOnly(&["merge", "other"]),
        Git(&["status"]),
        Git(&["status", "--short"]),
        Git(&["status", "--porcelain"]),
        Git(&["ls-files", "-s"]),
    ]);
}
