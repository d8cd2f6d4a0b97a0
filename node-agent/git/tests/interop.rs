//! Repositories cross between this git and real git 2.39 both ways: what
//! this writes passes `git fsck --strict` and real git's status sees a
//! clean tree; what real git wrote (packed objects with deltas, packed
//! refs, an index of version 4) is read and extended here.

mod common;

use common::*;

#[test]
fn a_repository_made_here_passes_real_gits_fsck_and_status() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "proj"]);
    put(&fs, "/proj/README", b"hello\n");
    put(&fs, "/proj/src/deep/mod.rs", b"pub fn f() {}\n");
    put(&fs, "/proj/empty", b"");
    put(&fs, "/proj/blob.bin", &[0u8, 1, 2, 255, 0, 10]);
    let files = agentcomputer_git::Files::new(
        fs.clone(),
        agentcomputer_fs::Owner {
            uid: 1000,
            gid: 1000,
        },
    );
    files
        .write(b"/proj/run.sh", b"#!/bin/sh\necho hi\n", 0o755)
        .unwrap();
    files.symlink(b"/proj/link", b"README").unwrap();
    ours_ok(&fs, "/proj", &["add", "-A"]);
    ours_ok(&fs, "/proj", &["commit", "-q", "-m", "first"]);
    put(&fs, "/proj/README", b"hello again\n");
    ours_ok(&fs, "/proj", &["commit", "-q", "-a", "-m", "second"]);
    ours_ok(&fs, "/proj", &["tag", "-a", "v1", "-m", "one"]);
    ours_ok(&fs, "/proj", &["branch", "side"]);

    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("proj");
    export(&fs, "/proj", &repo);
    // Nothing unreferenced is left behind either.
    let fsck = real(&repo, &["fsck", "--strict", "--dangling"]);
    assert_eq!(fsck.code, 0);
    assert!(
        !String::from_utf8_lossy(&fsck.stdout).contains("dangling"),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    assert_eq!(real_ok(&repo, &["status", "--porcelain"]), "");
    let log = real_ok(&repo, &["log", "--format=%s"]);
    assert_eq!(log, "second\nfirst\n");
    assert_eq!(
        real_ok(&repo, &["ls-files", "-s", "link", "run.sh"])
            .lines()
            .map(|l| &l[..6])
            .collect::<Vec<_>>(),
        ["120000", "100755"]
    );
    assert_eq!(real_ok(&repo, &["cat-file", "-t", "v1"]), "tag\n");
    assert_eq!(
        real_ok(&repo, &["branch", "--format=%(refname:short)"]),
        "master\nside\n"
    );
    // The ids agree with real git's hashing of the same content.
    assert_eq!(
        real_ok(&repo, &["hash-object", "blob.bin"]).trim(),
        real_ok(&repo, &["rev-parse", "HEAD:blob.bin"]).trim()
    );
}

/// Makes a repository with real git whose history is packed with deltas,
/// whose refs are packed and whose index is version 4.
fn real_packed_repo(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    real_ok(dir, &["init", "-q"]);
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(&format!(
            "line {i} of a file that changes a little in every commit\n"
        ));
        std::fs::write(dir.join("grow.txt"), &text).unwrap();
        std::fs::write(dir.join(format!("f{}.txt", i % 7)), format!("{i}\n")).unwrap();
        real_ok(dir, &["add", "-A"]);
        real_ok(dir, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    real_ok(dir, &["branch", "topic", "HEAD~5"]);
    real_ok(dir, &["tag", "-a", "v0", "-m", "zero", "HEAD~10"]);
    real_ok(dir, &["gc", "-q", "--aggressive"]);
    real_ok(dir, &["update-index", "--index-version", "4"]);
    assert!(
        !dir.join(".git/refs/heads/master").exists(),
        "refs are packed"
    );
    std::fs::write(dir.join("grow.txt"), "edited\n").unwrap();
    std::fs::write(dir.join("new.txt"), "new\n").unwrap();
}

#[test]
fn a_packed_repository_from_real_git_is_read_and_extended_here() {
    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("r");
    real_packed_repo(&repo);
    let (_d, fs) = engine();
    import(&repo, &fs, "/r");

    // Reading: history, packed refs, deltified blobs, annotated tags, the v4 index.
    assert_eq!(
        ours_ok(&fs, "/r", &["log", "--oneline"]),
        real_ok(&repo, &["log", "--oneline"])
    );
    assert_eq!(
        ours_ok(&fs, "/r", &["status", "--porcelain"]),
        real_ok(&repo, &["status", "--porcelain"])
    );
    assert_eq!(
        ours_ok(&fs, "/r", &["show", "HEAD~30:grow.txt"]),
        real_ok(&repo, &["show", "HEAD~30:grow.txt"])
    );
    assert_eq!(
        ours_ok(&fs, "/r", &["rev-parse", "topic", "v0", "v0^{commit}"]),
        real_ok(&repo, &["rev-parse", "topic", "v0", "v0^{commit}"])
    );
    assert_eq!(ours_ok(&fs, "/r", &["diff"]), real_ok(&repo, &["diff"]));
    assert_eq!(
        ours_ok(&fs, "/r", &["diff", "HEAD~3", "HEAD~1"]),
        real_ok(&repo, &["diff", "HEAD~3", "HEAD~1"])
    );

    // Changing: a commit here, on top of packed history, then a branch deleted from packed-refs.
    ours_ok(&fs, "/r", &["add", "-A"]);
    ours_ok(&fs, "/r", &["commit", "-q", "-m", "made here"]);
    ours_ok(&fs, "/r", &["branch", "-D", "topic"]);
    let back = host.path().join("back");
    export(&fs, "/r", &back);
    real_ok(&back, &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(
        real_ok(&back, &["log", "-n", "2", "--format=%s"]),
        "made here\ncommit 39\n"
    );
    assert_eq!(real_ok(&back, &["status", "--porcelain"]), "");
    assert_eq!(
        real_ok(&back, &["branch", "--format=%(refname:short)"]),
        "master\n"
    );
    assert_eq!(real_ok(&back, &["show", "HEAD:new.txt"]), "new\n");
}

#[test]
fn commands_outside_a_repository_say_so_like_git() {
    let (_d, fs) = engine();
    put(&fs, "/plain/file", b"x");
    let out = ours(&fs, "/plain", &["status"]);
    assert_eq!(out.code, 128);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "fatal: not a git repository (or any of the parent directories): .git\n"
    );
    let out = ours(&fs, "/plain", &["frobnicate"]);
    assert_eq!(out.code, 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("'frobnicate' is not a git command"));
}

#[test]
fn a_held_lock_stops_a_commit_with_gits_message_and_changes_nothing() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "p"]);
    put(&fs, "/p/a", b"a\n");
    ours_ok(&fs, "/p", &["add", "a"]);
    ours_ok(&fs, "/p", &["commit", "-q", "-m", "one"]);
    let before = ours_ok(&fs, "/p", &["rev-parse", "HEAD"]);
    put(&fs, "/p/.git/refs/heads/master.lock", b"");
    put(&fs, "/p/a", b"b\n");
    let out = ours(&fs, "/p", &["commit", "-q", "-a", "-m", "two"]);
    assert_eq!(out.code, 128);
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(
            "fatal: Unable to create '/workspace/p/.git/refs/heads/master.lock': File exists."
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ours_ok(&fs, "/p", &["rev-parse", "HEAD"]), before);
}

#[test]
fn a_file_larger_than_a_step_is_streamed_in_and_out_intact() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "big"]);
    // 5 MiB of varied bytes: several streaming steps each way.
    let data: Vec<u8> = (0..5 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    put(&fs, "/big/data.bin", &data);
    ours_ok(&fs, "/big", &["add", "data.bin"]);
    ours_ok(&fs, "/big", &["commit", "-q", "-m", "big"]);
    put(&fs, "/big/data.bin", b"small now\n");
    ours_ok(&fs, "/big", &["checkout", "--", "data.bin"]);
    assert!(
        get(&fs, "/big/data.bin") == data,
        "checked-out content differs"
    );
    assert_eq!(ours_ok(&fs, "/big", &["status", "--porcelain"]), "");
    let host = tempfile::tempdir().unwrap();
    let repo = host.path().join("big");
    export(&fs, "/big", &repo);
    real_ok(&repo, &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(
        real_ok(&repo, &["hash-object", "data.bin"]),
        real_ok(&repo, &["rev-parse", "HEAD:data.bin"])
    );
}

#[test]
fn a_checkout_never_writes_through_a_symlink_or_into_dot_git() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "p"]);
    put(&fs, "/p/a", b"a\n");
    ours_ok(&fs, "/p", &["add", "a"]);
    ours_ok(&fs, "/p", &["commit", "-q", "-m", "one"]);
    ours_ok(&fs, "/p", &["checkout", "-q", "-b", "feature"]);
    put(&fs, "/p/d/x", b"payload\n");
    ours_ok(&fs, "/p", &["add", "d/x"]);
    ours_ok(&fs, "/p", &["commit", "-q", "-m", "d/x"]);
    ours_ok(&fs, "/p", &["checkout", "-q", "master"]);
    // An untracked symlink where the branch has a directory.
    let files = agentcomputer_git::Files::new(fs.clone(), agentcomputer_fs::Owner::ROOT);
    files.mkdir_p(b"/victim").unwrap();
    files.symlink(b"/p/d", b"/victim").unwrap();
    let out = ours(&fs, "/p", &["checkout", "feature"]);
    assert_ne!(out.code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        files.lstat(b"/victim/x").unwrap().is_none(),
        "written through the symlink"
    );
    // A tree naming `.git/...` is refused before anything is written.
    let hostile = tempfile::tempdir().unwrap();
    let repo = hostile.path().join("h");
    std::fs::create_dir_all(&repo).unwrap();
    real_ok(&repo, &["init", "-q"]);
    let blob = real_with_input(
        &repo,
        &["hash-object", "-w", "--stdin"],
        b"[core]\n\tfsmonitor = evil\n",
    );
    // mktree accepts the name; real git's own checkout would refuse it too.
    let inner = real_with_input(
        &repo,
        &["mktree", "--missing"],
        format!("100644 blob {blob}\tconfig\n").as_bytes(),
    );
    let top = real_with_input(
        &repo,
        &["mktree", "--missing"],
        format!("040000 tree {inner}\t.GIT\n").as_bytes(),
    );
    let commit = real_ok(&repo, &["commit-tree", &top, "-m", "hostile"])
        .trim()
        .to_string();
    real_ok(&repo, &["update-ref", "refs/heads/hostile", &commit]);
    import(&repo, &fs, "/h");
    let out = ours(&fs, "/h", &["checkout", "hostile"]);
    assert_eq!(out.code, 128, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid path '.GIT/config'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = get(&fs, "/h/.git/config");
    assert!(!String::from_utf8_lossy(&config).contains("evil"));
}

#[test]
fn an_object_inflating_past_the_memory_limit_is_refused_not_held() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "p"]);
    // 64 MiB of zeros deflate to about 64 KiB: a small file on disk.
    let zeros = vec![0u8; 64 << 20];
    let id = {
        let files = agentcomputer_git::Files::new(fs.clone(), agentcomputer_fs::Owner::ROOT);
        let odb = agentcomputer_git::odb::Odb::new(files, b"/p/.git/objects".to_vec());
        odb.write(gix_object::Kind::Blob, &zeros).unwrap()
    };
    let hex = id.to_hex().to_string();
    let env = |_: &str| None;
    let stop = || false;
    let inv = agentcomputer_git::Invocation {
        files: agentcomputer_git::Files::new(fs.clone(), agentcomputer_fs::Owner::ROOT)
            .with_max_whole(16 << 20),
        cwd: b"/p".to_vec(),
        shown_root: String::new(),
        env: &env,
        stop: &stop,
        fallback_name: "a".into(),
        fallback_email: "a@b".into(),
        transport: None,
    };
    let out = agentcomputer_git::run(&inv, &["show".into(), hex.clone()]);
    assert_eq!(out.code, 128);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("object {hex}"))
            && err.contains("more than this exec may hold in memory (16777216 bytes)"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn checking_out_a_remote_only_branch_creates_it_tracking_the_remote() {
    let (_d, fs) = engine();
    ours_ok(&fs, "/", &["init", "-q", "a"]);
    put(&fs, "/a/f", b"1\n");
    ours_ok(&fs, "/a", &["add", "f"]);
    ours_ok(&fs, "/a", &["commit", "-q", "-m", "one"]);
    ours_ok(&fs, "/a", &["branch", "s2"]);
    ours_ok(&fs, "/", &["clone", "-q", "/workspace/a", "b"]);
    let out = ours(&fs, "/b", &["checkout", "s2"]);
    assert_eq!(out.code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "branch 's2' set up to track 'origin/s2'.\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Switched to a new branch 's2'\n"
    );
    assert_eq!(
        ours_ok(&fs, "/b", &["config", "branch.s2.merge"]),
        "refs/heads/s2\n"
    );
    assert_eq!(ours_ok(&fs, "/b", &["branch", "--show-current"]), "s2\n");
    // A name that is neither a branch anywhere nor a path is an error.
    let out = ours(&fs, "/b", &["switch", "nowhere"]);
    assert_eq!(out.code, 128);
}
