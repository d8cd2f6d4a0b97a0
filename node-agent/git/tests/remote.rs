//! clone, fetch, pull and push against real git: a `git http-backend`
//! served on 127.0.0.1, and repositories in the same engine. What ours
//! writes must pass real `git fsck --strict`, and real git on the server
//! must see what ours pushed.

mod common;

use common::http::{Backend, Loopback, bare_repo};
use common::*;
use std::path::Path;
use std::time::Instant;

fn net(fs: &agentcomputer_fs::Fs, cwd: &str, args: &[&str]) -> agentcomputer_git::Output {
    ours_with(fs, cwd, args, Some(&Loopback))
}

fn net_ok(fs: &agentcomputer_fs::Fs, cwd: &str, args: &[&str]) -> agentcomputer_git::Output {
    let out = net(fs, cwd, args);
    assert_eq!(
        out.code,
        0,
        "git {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn err(out: &agentcomputer_git::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fsck(dir: &Path) {
    real_ok(dir, &["fsck", "--strict", "--no-progress"]);
}

#[test]
fn clone_commit_push_fetch_pull_over_http() {
    let host = tempfile::tempdir().unwrap();
    let served = host.path().join("served");
    let bare = bare_repo(&served, "repo", 3);
    let server = Backend::start(&served);
    let url = server.url("repo.git");
    let (_d, fs) = engine();

    let out = net_ok(&fs, "/", &["clone", &url]);
    assert_eq!(err(&out), "Cloning into 'repo'...\n");
    assert_eq!(get(&fs, "/repo/file.txt"), b"line 2\n");
    let head = real_ok(&bare, &["rev-parse", "main"]);
    assert_eq!(text(&net_ok(&fs, "/repo", &["rev-parse", "HEAD"])), head);
    assert_eq!(
        text(&net_ok(&fs, "/repo", &["rev-parse", "origin/main"])),
        head
    );
    let config = String::from_utf8(get(&fs, "/repo/.git/config")).unwrap();
    assert!(
        config.contains(&format!(
            "[remote \"origin\"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        )),
        "{config}"
    );
    assert!(
        config.contains("[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n"),
        "{config}"
    );

    // Real git reads the clone; the pack and index pass fsck --strict.
    let exported = host.path().join("exported");
    export(&fs, "/repo", &exported);
    fsck(&exported);
    assert_eq!(real_ok(&exported, &["status", "--porcelain"]), "");

    // A change, committed and pushed: the server has it.
    put(&fs, "/repo/new.txt", b"new\n");
    net_ok(&fs, "/repo", &["add", "new.txt"]);
    net_ok(&fs, "/repo", &["commit", "-q", "-m", "from ours"]);
    let ours_head = text(&net_ok(&fs, "/repo", &["rev-parse", "HEAD"]));
    let out = net_ok(&fs, "/repo", &["push"]);
    assert_eq!(
        err(&out),
        format!(
            "To {url}\n   {}..{}  main -> main\n",
            &head[..7],
            &ours_head[..7]
        )
    );
    assert_eq!(real_ok(&bare, &["rev-parse", "main"]), ours_head);
    assert_eq!(real_ok(&bare, &["log", "-1", "--format=%s"]), "from ours\n");
    fsck(&bare);
    assert_eq!(
        text(&net_ok(&fs, "/repo", &["rev-parse", "origin/main"])),
        ours_head
    );

    // Someone else pushes with real git; ours pulls (a fast-forward).
    let other = host.path().join("other");
    real_ok(host.path(), &["clone", "-q", &url, other.to_str().unwrap()]);
    std::fs::write(other.join("theirs.txt"), "theirs\n").unwrap();
    real_ok(&other, &["add", "."]);
    real_ok(&other, &["commit", "-q", "-m", "from real git"]);
    real_ok(&other, &["push", "-q"]);
    let theirs_head = real_ok(&other, &["rev-parse", "HEAD"]);
    let out = net_ok(&fs, "/repo", &["fetch"]);
    assert_eq!(
        err(&out),
        format!(
            "From {}\n   {}..{}  main       -> origin/main\n",
            url.trim_end_matches(".git"),
            &ours_head[..7],
            &theirs_head[..7]
        )
    );
    let out = net_ok(&fs, "/repo", &["pull"]);
    assert!(text(&out).contains("Fast-forward"), "{}", text(&out));
    assert_eq!(get(&fs, "/repo/theirs.txt"), b"theirs\n");
    assert_eq!(
        text(&net_ok(&fs, "/repo", &["rev-parse", "HEAD"])),
        theirs_head
    );

    // Both sides commit: ours is rejected as real git rejects it.
    std::fs::write(other.join("theirs.txt"), "theirs 2\n").unwrap();
    real_ok(&other, &["commit", "-q", "-am", "second from real git"]);
    real_ok(&other, &["push", "-q"]);
    put(&fs, "/repo/new.txt", b"new 2\n");
    net_ok(&fs, "/repo", &["commit", "-q", "-am", "second from ours"]);
    let out = net(&fs, "/repo", &["push"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        err(&out),
        format!(
            "To {url}\n ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs to '{url}'\nhint: Updates were rejected because the remote contains work that you do\nhint: not have locally. This is usually caused by another repository pushing\nhint: to the same ref. You may want to first integrate the remote changes\nhint: (e.g., 'git pull ...') before pushing again.\nhint: See the 'Note about fast-forwards' in 'git push --help' for details.\n"
        )
    );
    net_ok(&fs, "/repo", &["fetch"]);
    let out = net(&fs, "/repo", &["push"]);
    assert_eq!(out.code, 1);
    assert!(
        err(&out).contains(" ! [rejected]        main -> main (non-fast-forward)\n"),
        "{}",
        err(&out)
    );
    // Divergent pull asks how to reconcile, like git 2.39; --no-rebase merges.
    let out = net(&fs, "/repo", &["pull"]);
    assert_eq!(out.code, 128, "{}", err(&out));
    assert!(err(&out).ends_with("fatal: Need to specify how to reconcile divergent branches.\n"));
    net_ok(&fs, "/repo", &["pull", "--no-rebase"]);
    net_ok(&fs, "/repo", &["push"]);
    let log = real_ok(&bare, &["log", "-1", "--format=%s %p"]);
    assert!(log.starts_with("Merge branch 'main' of "), "{log}");
    fsck(&bare);

    // A new branch, with -u.
    net_ok(&fs, "/repo", &["switch", "-c", "topic"]);
    let out = net_ok(&fs, "/repo", &["push", "-u", "origin", "topic"]);
    assert_eq!(
        text(&out),
        "branch 'topic' set up to track 'origin/topic'.\n"
    );
    assert!(
        err(&out).contains(" * [new branch]      topic -> topic\n"),
        "{}",
        err(&out)
    );
    assert_eq!(
        real_ok(&bare, &["rev-parse", "topic"]),
        text(&net_ok(&fs, "/repo", &["rev-parse", "HEAD"]))
    );
    let exported = host.path().join("exported2");
    export(&fs, "/repo", &exported);
    fsck(&exported);
}

#[test]
fn errors_name_the_url_like_git() {
    let host = tempfile::tempdir().unwrap();
    let served = host.path().join("served");
    bare_repo(&served, "repo", 1);
    let server = Backend::start(&served);
    let (_d, fs) = engine();
    let missing = server.url("nope.git");
    let out = net(&fs, "/", &["clone", &missing]);
    assert_eq!(out.code, 128);
    assert_eq!(
        err(&out),
        format!("Cloning into 'nope'...\nfatal: repository '{missing}/' not found\n")
    );
    assert!(get_missing(&fs, "/nope"));
    // Without a network.
    let out = ours(&fs, "/", &["clone", &server.url("repo.git")]);
    assert_eq!(out.code, 128);
    assert!(
        err(&out).contains("network access is not available here"),
        "{}",
        err(&out)
    );
    // A closed port: the connection error, in git's words.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("http://127.0.0.1:{port}/repo.git");
    let out = net(&fs, "/", &["clone", &url]);
    assert_eq!(out.code, 128);
    assert!(
        err(&out).contains(&format!(
            "fatal: unable to access '{url}/': Failed to connect"
        )),
        "{}",
        err(&out)
    );
    // Credentials are sent but never shown or stored.
    let with_creds = format!("http://me:s3cret@127.0.0.1:{}/repo.git", server.port);
    let out = net_ok(&fs, "/", &["clone", &with_creds, "creds"]);
    assert!(!err(&out).contains("s3cret"));
    let config = String::from_utf8(get(&fs, "/creds/.git/config")).unwrap();
    assert!(!config.contains("s3cret"), "{config}");
    assert!(config.contains(&format!(
        "url = http://me@127.0.0.1:{}/repo.git",
        server.port
    )));
}

fn get_missing(fs: &agentcomputer_fs::Fs, path: &str) -> bool {
    fs.resolve(agentcomputer_fs::ROOT_INO, path.as_bytes(), true)
        .is_err()
}

#[test]
fn clone_fetch_and_push_between_repositories_of_the_engine() {
    let (_d, fs) = engine();
    put(&fs, "/a/x.txt", b"x\n");
    ours_ok(&fs, "/a", &["init", "-q", "-b", "main"]);
    ours_ok(&fs, "/a", &["add", "."]);
    ours_ok(&fs, "/a", &["commit", "-q", "-m", "one"]);
    let out = ours(&fs, "/", &["clone", "/workspace/a", "b"]);
    assert_eq!(out.code, 0, "{}", err(&out));
    assert_eq!(err(&out), "Cloning into 'b'...\ndone.\n");
    assert_eq!(get(&fs, "/b/x.txt"), b"x\n");
    // Push to a non-bare repository's checked-out branch is refused.
    put(&fs, "/b/y.txt", b"y\n");
    ours_ok(&fs, "/b", &["add", "."]);
    ours_ok(&fs, "/b", &["commit", "-q", "-m", "two"]);
    let out = ours(&fs, "/b", &["push"]);
    assert_eq!(out.code, 1);
    assert!(
        err(&out).contains(" ! [remote rejected] main -> main (branch is currently checked out)"),
        "{}",
        err(&out)
    );
    // To another branch it goes through.
    let out = ours(&fs, "/b", &["push", "origin", "main:side"]);
    assert_eq!(out.code, 0, "{}", err(&out));
    assert_eq!(
        ours_ok(&fs, "/a", &["rev-parse", "side"]),
        ours_ok(&fs, "/b", &["rev-parse", "HEAD"])
    );
    // And back: a fetch and a fast-forward merge in `a`.
    ours_ok(&fs, "/a", &["fetch", "/workspace/b", "main"]);
    ours_ok(&fs, "/a", &["merge", "side"]);
    assert_eq!(get(&fs, "/a/y.txt"), b"y\n");
    let host = tempfile::tempdir().unwrap();
    export(&fs, "/a", &host.path().join("a"));
    export(&fs, "/b", &host.path().join("b"));
    fsck(&host.path().join("a"));
    fsck(&host.path().join("b"));
}

#[test]
fn clone_of_a_thousand_commits_against_real_git() {
    let host = tempfile::tempdir().unwrap();
    let served = host.path().join("served");
    let bare = bare_repo(&served, "big", 1000);
    real_ok(&bare, &["gc", "-q"]);
    let server = Backend::start(&served);
    let url = server.url("big.git");
    let (_d, fs) = engine();
    let t = Instant::now();
    net_ok(&fs, "/", &["clone", &url]);
    let ours_time = t.elapsed();
    let t = Instant::now();
    real_ok(host.path(), &["clone", "-q", &url, "real-clone"]);
    let real_time = t.elapsed();
    println!(
        "clone of 1000 commits over HTTP: ours {ours_time:?}, real git {real_time:?}, ratio {:.2}",
        ours_time.as_secs_f64() / real_time.as_secs_f64()
    );
    assert_eq!(
        text(&net_ok(&fs, "/big", &["rev-parse", "HEAD"])),
        real_ok(&bare, &["rev-parse", "main"])
    );
    let out = net_ok(&fs, "/big", &["log", "--oneline"]);
    assert_eq!(text(&out).lines().count(), 1000);
    let exported = host.path().join("exported");
    export(&fs, "/big", &exported);
    fsck(&exported);
}
