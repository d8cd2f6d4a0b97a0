//! The `git` module: the same porcelain as the shell's `git`
//! (`agentcomputer_git::run`), on the computer's files, from JavaScript.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_fs::{Fs, Owner, ROOT_INO, WriteMode};
use common::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Runs `git ARGS` on `fs` as the shell runtime does: `/workspace` is the
/// engine's root, `cwd` an engine path.
fn shell_git(fs: &Fs, cwd: &str, args: &[&str]) -> agentcomputer_git::Output {
    let env = |name: &str| {
        Some(match name {
            "GIT_AUTHOR_NAME" | "GIT_COMMITTER_NAME" => "Shell User".to_string(),
            "GIT_AUTHOR_EMAIL" | "GIT_COMMITTER_EMAIL" => "shell@example.com".to_string(),
            "GIT_AUTHOR_DATE" | "GIT_COMMITTER_DATE" => "@1700000000 +0000".to_string(),
            _ => return None,
        })
    };
    let stop = || false;
    let inv = agentcomputer_git::Invocation {
        files: agentcomputer_git::Files::new(fs.clone(), Owner::ROOT),
        cwd: cwd.as_bytes().to_vec(),
        shown_root: "/workspace".into(),
        env: &env,
        stop: &stop,
        fallback_name: "user".into(),
        fallback_email: "user@computer".into(),
        transport: None,
    };
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = agentcomputer_git::run(&inv, &args);
    assert_eq!(
        out.code,
        0,
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn write(fs: &Fs, path: &str, text: &str) {
    fs.write_all(
        ROOT_INO,
        path.as_bytes(),
        text.as_bytes(),
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
}

#[tokio::test]
async fn a_commit_made_in_the_shell_is_seen_by_git_log() {
    let c = computer();
    shell_git(&c.fs, "/", &["init", "-q", "-b", "main", "proj"]);
    write(&c.fs, "/proj/README", "hello\n");
    shell_git(&c.fs, "/proj", &["add", "README"]);
    shell_git(
        &c.fs,
        "/proj",
        &["commit", "-q", "-m", "from the shell\n\nwith a body"],
    );
    let head = String::from_utf8(shell_git(&c.fs, "/proj", &["rev-parse", "HEAD"]).stdout)
        .unwrap()
        .trim()
        .to_string();

    let r = run(
        &c.fs,
        "import git from 'git';\n\
         const log = await git.log({ dir: '/workspace/proj' });\n\
         console.log(JSON.stringify(log));\n\
         export default () => log;",
    )
    .await;
    let log = r.ok();
    assert_eq!(
        log,
        &json!([{
            "oid": head,
            "message": "from the shell\n\nwith a body",
            "parents": [],
            "author": { "name": "Shell User", "email": "shell@example.com", "timestamp": 1700000000 },
            "committer": { "name": "Shell User", "email": "shell@example.com", "timestamp": 1700000000 },
        }])
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(r.stdout.trim()).unwrap(),
        *log
    );
}

#[tokio::test]
async fn init_add_commit_status_diff_branch_and_a_conflicting_merge() {
    let c = computer();
    let r = run(
        &c.fs,
        r#"
import git from 'git';
import fs from 'node:fs';
export default async () => {
  const out = {};
  out.init = await git.init({ dir: 'repo', initialBranch: 'main' });
  process.chdir('repo');
  fs.writeFileSync('a.txt', 'one\ntwo\nthree\n');
  fs.mkdirSync('src');
  fs.writeFileSync('src/b.js', 'b\n');
  out.untracked = await git.status();
  await git.add({ all: true });
  out.staged = await git.status();
  const env = { GIT_AUTHOR_DATE: '@1700000000 +0000', GIT_COMMITTER_DATE: '@1700000000 +0000' };
  const first = await git.commit({ message: 'first', author: { name: 'Ada', email: 'ada@example.com' }, env });
  out.first = first.oid;
  out.head = await git.resolveRef('HEAD');
  out.branch = await git.currentBranch();
  out.clean = await git.status();

  fs.writeFileSync('a.txt', 'one\nTWO\nthree\n');
  out.modified = await git.status();
  out.diff = await git.diff();
  out.names = await git.diff({ nameOnly: true });
  await git.add('a.txt');
  out.cachedNames = await git.diff({ cached: true, nameOnly: true });
  const second = await git.commit({ message: 'main changes two' });

  await git.branch('topic', { start: first.oid });
  out.branches = await git.branch();
  await git.checkout('topic');
  out.onTopic = await git.currentBranch();
  out.topicA = fs.readFileSync('a.txt', 'utf8');
  fs.writeFileSync('a.txt', 'one\n2\nthree\n');
  const topic = await git.commit({ message: 'topic changes two', all: true });
  out.between = await git.diff({ from: first.oid, to: topic.oid, nameOnly: true });
  await git.checkout('main');
  out.merge = await git.merge('topic');
  out.conflicted = await git.status();
  out.markers = fs.readFileSync('a.txt', 'utf8');
  fs.writeFileSync('a.txt', 'one\nboth\nthree\n');
  await git.add('a.txt');
  const merged = await git.commit({ message: 'merge topic' });
  out.log = (await git.log({ n: 2 })).map((c) => ({ message: c.message, parents: c.parents.length }));
  out.mergeParents = (await git.log({ n: 1 }))[0].parents;
  out.second = second.oid;
  out.topic = topic.oid;
  out.merged = merged.oid;

  await git.tag('v1', { ref: first.oid });
  await git.tag('v2', { message: 'annotated' });
  out.tags = await git.tag();
  out.tagged = await git.resolveRef('v1');
  out.pathLog = (await git.log({ path: 'src' })).map((c) => c.message);

  await git.reset({ mode: 'hard', ref: second.oid });
  out.afterReset = await git.resolveRef('HEAD');
  out.afterResetA = fs.readFileSync('a.txt', 'utf8');
  await git.branch({ delete: 'topic', force: true });
  out.branchesAfter = await git.branch();
  return out;
};
"#,
    )
    .await;
    let o = r.ok();
    assert_eq!(o["init"], json!({ "dir": "/workspace/repo" }));
    assert_eq!(
        o["untracked"],
        json!([
            { "path": "a.txt", "index": "?", "worktree": "?" },
            { "path": "src/b.js", "index": "?", "worktree": "?" },
        ])
    );
    assert_eq!(
        o["staged"],
        json!([
            { "path": "a.txt", "index": "A", "worktree": " " },
            { "path": "src/b.js", "index": "A", "worktree": " " },
        ])
    );
    let first = o["first"].as_str().unwrap();
    assert_eq!(first.len(), 40);
    assert_eq!(o["head"], json!(first));
    assert_eq!(o["branch"], json!("main"));
    assert_eq!(o["clean"], json!([]));
    assert_eq!(
        o["modified"],
        json!([{ "path": "a.txt", "index": " ", "worktree": "M" }])
    );
    let diff = o["diff"].as_str().unwrap();
    assert!(diff.starts_with("diff --git a/a.txt b/a.txt\n"), "{diff}");
    assert!(diff.contains("\n-two\n+TWO\n"), "{diff}");
    assert_eq!(o["names"], json!(["a.txt"]));
    assert_eq!(o["cachedNames"], json!(["a.txt"]));
    assert_eq!(o["branches"], json!(["main", "topic"]));
    assert_eq!(o["onTopic"], json!("topic"));
    assert_eq!(o["topicA"], json!("one\ntwo\nthree\n"));
    assert_eq!(o["between"], json!(["a.txt"]));
    assert_eq!(o["merge"], json!({ "conflicts": ["a.txt"] }));
    assert_eq!(
        o["conflicted"],
        json!([{ "path": "a.txt", "index": "U", "worktree": "U" }])
    );
    let markers = o["markers"].as_str().unwrap();
    assert!(
        markers.contains("<<<<<<< HEAD\nTWO\n=======\n2\n>>>>>>> topic\n"),
        "{markers}"
    );
    assert_eq!(
        o["log"][0],
        json!({ "message": "merge topic", "parents": 2 })
    );
    assert_eq!(o["mergeParents"], json!([o["second"], o["topic"]]));
    assert_eq!(o["tags"], json!(["v1", "v2"]));
    assert_eq!(o["tagged"], json!(first));
    assert_eq!(o["pathLog"], json!(["first"]));
    assert_eq!(o["afterReset"], o["second"]);
    assert_eq!(o["afterResetA"], json!("one\nTWO\nthree\n"));
    assert_eq!(o["branchesAfter"], json!(["main"]));

    // What JavaScript did is what the shell's git sees.
    let log = shell_git(&c.fs, "/repo", &["log", "--format=%s"]).stdout;
    assert_eq!(String::from_utf8(log).unwrap(), "main changes two\nfirst\n");
}

#[tokio::test]
async fn a_merge_without_conflicts_gives_the_commit() {
    let c = computer();
    let r = run(
        &c.fs,
        r#"
import git from 'git';
import fs from 'node:fs';
export default async () => {
  await git.init({ dir: 'r', initialBranch: 'main' });
  const dir = '/workspace/r';
  fs.writeFileSync('r/a', 'a\n');
  const base = await git.commit({ dir, message: 'base', allowEmpty: true });
  await git.add({ dir, all: true });
  await git.commit({ dir, message: 'add a' });
  await git.checkout('side', { dir, create: true, start: base.oid });
  return { branch: await git.currentBranch({ dir }), merge: await git.merge('main', { dir }) };
};
"#,
    )
    .await;
    let o = r.ok();
    assert_eq!(o["merge"]["conflicts"], json!([]));
    let head = String::from_utf8(shell_git(&c.fs, "/r", &["rev-parse", "main"]).stdout).unwrap();
    assert_eq!(o["merge"]["oid"], json!(head.trim()));
}

#[tokio::test]
async fn run_gives_non_zero_exits_and_the_calls_throw_them() {
    let c = computer();
    let r = run(
        &c.fs,
        r#"
import git from 'git';
import { run } from 'git';
export default async () => {
  const out = {};
  out.version = await run(['--version']);
  out.notRepo = await run(['status']);
  await git.init({ dir: 'r' });
  out.unknownRev = await run(['rev-parse', '--verify', 'nope'], { cwd: 'r' });
  out.unknownCommand = await run(['frobnicate'], { cwd: '/workspace/r' });
  out.inTmp = await run(['init'], { cwd: '/tmp' });
  out.noDir = await run(['status'], { cwd: '/workspace/missing' });
  try {
    await git.log({ dir: 'r' });
    out.thrown = 'nothing';
  } catch (e) {
    out.thrown = { isError: e instanceof Error, message: e.message, code: e.code, stderr: e.stderr, args: e.args };
  }
  try { await git.resolveRef('nope', { dir: 'r' }); } catch (e) { out.resolveCode = e.code; }
  try { await import('node:git'); } catch (e) { out.nodeGit = e.message; }
  return out;
};
"#,
    )
    .await;
    let o = r.ok();
    assert_eq!(o["version"]["code"], json!(0));
    assert!(
        o["version"]["stdout"]
            .as_str()
            .unwrap()
            .starts_with("git version ")
    );
    assert_eq!(o["notRepo"]["code"], json!(128));
    assert!(
        o["notRepo"]["stderr"]
            .as_str()
            .unwrap()
            .starts_with("fatal: not a git repository"),
        "{}",
        o["notRepo"]
    );
    assert_eq!(o["unknownRev"]["code"], json!(128));
    assert_eq!(o["unknownRev"]["stdout"], json!(""));
    assert_eq!(o["unknownCommand"]["code"], json!(1));
    assert!(
        o["unknownCommand"]["stderr"]
            .as_str()
            .unwrap()
            .starts_with("git: 'frobnicate' is not a git command")
    );
    assert_eq!(
        o["inTmp"],
        json!({
            "code": 128,
            "stdout": "",
            "stderr": "fatal: not a git repository: /tmp is outside /workspace, where this runtime keeps repositories\n",
        })
    );
    assert_eq!(
        o["noDir"]["stderr"],
        json!("fatal: cannot change to '/workspace/missing': No such file or directory\n")
    );
    let thrown = &o["thrown"];
    assert_eq!(thrown["isError"], json!(true));
    assert_eq!(thrown["code"], json!(128));
    assert_eq!(
        thrown["message"],
        json!("fatal: your current branch 'master' does not have any commits yet")
    );
    assert_eq!(
        thrown["stderr"],
        json!("fatal: your current branch 'master' does not have any commits yet\n")
    );
    assert_eq!(thrown["args"][0], json!("log"));
    assert_eq!(o["resolveCode"], json!(128));
    assert!(
        o["nodeGit"]
            .as_str()
            .unwrap()
            .contains("No such built-in module: node:git"),
        "{}",
        o["nodeGit"]
    );
}

/// A repository at `/big` with `n` untracked files: `git add -A` there
/// takes seconds.
fn big_repo(c: &Computer, n: usize) {
    shell_git(&c.fs, "/", &["init", "-q", "big"]);
    for i in 0..n {
        write(&c.fs, &format!("/big/f{i:05}"), &format!("file {i}\n"));
    }
}

const ADD_ALL: &str = "import git from 'git';\n\
    await git.add({ dir: '/workspace/big', all: true });\n\
    console.log('added');";

/// How long `git add -A` of the big repository takes when nothing stops it.
async fn unbounded_add(n: usize) -> Duration {
    let c = computer();
    big_repo(&c, n);
    let t = Instant::now();
    let r = run(&c.fs, ADD_ALL).await;
    r.ok();
    t.elapsed()
}

/// Runs `req`; gives the outcome, how long it took to come (not waiting
/// for the exec thread to end), and the exec's stderr.
async fn timed(
    fs: &Fs,
    req: agentcomputer_js::JsRequest,
    cancel: CancellationToken,
) -> (agentcomputer_js::JsOutcome, Duration, String) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let collector = tokio::spawn(async move {
        let mut err = Vec::new();
        while let Some(c) = rx.recv().await {
            if let agentcomputer_js::OutputChunk::Stderr(b) = c {
                err.extend_from_slice(&b);
            }
        }
        String::from_utf8_lossy(&err).into_owned()
    });
    let t = Instant::now();
    let outcome = agentcomputer_js::run(fs.clone(), req, tx, cancel).await;
    let took = t.elapsed();
    (outcome, took, collector.await.unwrap())
}

/// The outcome of a stopped exec comes within this of the stop when git
/// sees it; an exec thread stuck in git is answered for only after the
/// runtime's grace of 500 ms.
const PROMPT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_timeout_stops_git_between_steps() {
    const FILES: usize = 3000;
    let whole = unbounded_add(FILES).await;
    let c = computer();
    big_repo(&c, FILES);
    let timeout = (whole / 4).max(Duration::from_millis(50));
    let mut req = request(ADD_ALL);
    req.timeout = timeout;
    let (outcome, took, stderr) = timed(&c.fs, req, CancellationToken::new()).await;
    assert_eq!(
        outcome.exit_code,
        agentcomputer_js::EXIT_TIMEOUT,
        "{outcome:?}"
    );
    let error = outcome.error.unwrap_or_default();
    assert!(error.starts_with("javascript: timed out after"), "{error}");
    assert!(stderr.contains("timed out after"), "{stderr}");
    assert!(
        took < timeout + PROMPT,
        "answered after {took:?}; timeout {timeout:?}, the whole add takes {whole:?}"
    );
    eprintln!(
        "git add -A of {FILES} files: {whole:?}; timed out at {took:?} (timeout {timeout:?})"
    );
    // What git left is consistent: the shell's git still reads it.
    shell_git(&c.fs, "/big", &["status", "--porcelain"]);
}

#[tokio::test]
async fn cancelling_stops_git_between_steps() {
    const FILES: usize = 3000;
    let whole = unbounded_add(FILES).await;
    let c = computer();
    big_repo(&c, FILES);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let after = (whole / 4).max(Duration::from_millis(50));
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        trigger.cancel();
    });
    let (outcome, took, stderr) = timed(&c.fs, request(ADD_ALL), cancel).await;
    assert_eq!(
        outcome.exit_code,
        agentcomputer_js::EXIT_CANCELLED,
        "{outcome:?}"
    );
    assert_eq!(outcome.error.as_deref(), Some("javascript: cancelled"));
    assert!(stderr.contains("javascript: cancelled"), "{stderr}");
    assert!(
        took < after + PROMPT,
        "answered after {took:?}; cancelled at {after:?}, the whole add takes {whole:?}"
    );
    eprintln!(
        "git add -A of {FILES} files: {whole:?}; cancelled at {took:?} (cancel at {after:?})"
    );
    shell_git(&c.fs, "/big", &["status", "--porcelain"]);
}

#[tokio::test]
async fn output_larger_than_the_heap_is_refused_before_it_is_copied() {
    let c = computer();
    shell_git(&c.fs, "/", &["init", "-q", "r"]);
    // Three blobs of some 3 MiB each: each fits the 8 MiB heap, their
    // patch together does not.
    for name in ["a", "b", "c"] {
        let text: String = (0..(3 << 16)).map(|i| format!("{name}{i:015}\n")).collect();
        write(&c.fs, &format!("/r/{name}.txt"), &text);
    }
    shell_git(&c.fs, "/r", &["add", "-A"]);
    shell_git(&c.fs, "/r", &["commit", "-q", "-m", "abc"]);
    // One blob larger than the heap is refused by git itself.
    let big: String = (0..(12 << 16)).map(|i| format!("{i:016}\n")).collect();
    write(&c.fs, "/r/big.txt", &big);
    shell_git(&c.fs, "/r", &["add", "-A"]);
    shell_git(&c.fs, "/r", &["commit", "-q", "-m", "big"]);
    let mut req = request(
        "import git from 'git';\n\
         try { await git.run(['show', 'HEAD~1'], { cwd: '/workspace/r' }); }\n\
         catch (e) { console.log(e.code, e.message); }\n\
         const r = await git.run(['show', 'HEAD:big.txt'], { cwd: '/workspace/r' });\n\
         console.log(r.code, r.stderr.includes('more than this exec may hold in memory'));\n\
         console.log(JSON.stringify((await git.log({ dir: '/workspace/r' })).map((c) => c.message)));",
    );
    req.memory_limit_bytes = 8 << 20;
    let r = run_req(&c.fs, req).await;
    r.ok();
    assert!(
        r.stdout
            .starts_with("ERR_GIT_OUTPUT_TOO_LARGE git printed "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with("128 true\n[\"big\",\"abc\"]\n"),
        "{}",
        r.stdout
    );
}

#[tokio::test]
async fn a_commit_message_cannot_forge_entries_of_the_log() {
    let c = computer();
    shell_git(&c.fs, "/", &["init", "-q", "q"]);
    write(&c.fs, "/q/a", "a\n");
    shell_git(&c.fs, "/q", &["add", "a"]);
    shell_git(
        &c.fs,
        "/q",
        &["commit", "-q", "-m", "real\u{1e}forged-oid-here\u{0}x"],
    );
    let r = run_req(
        &c.fs,
        request(
            "import git from 'git';\n\
             const log = await git.log({ dir: '/workspace/q' });\n\
             console.log(log.length, /^[0-9a-f]{40}$/.test(log[0].oid), JSON.stringify(log[0].message));",
        ),
    )
    .await;
    r.ok();
    assert_eq!(r.stdout, "1 true \"real\\u001eforged-oid-here\\u0000x\"\n");
}
