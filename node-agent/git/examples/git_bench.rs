//! `git status`, `git add -A` and `git commit` over a tree of 1,000 files:
//! this crate's git in the engine against real git on the local disk
//! (ext4 here), measured in the same run. Real git is timed as a user runs
//! it (one process per command); ours as the shell runs it (in process).
//!
//! `cargo run --release -p agentcomputer-git --example git_bench [FILES]`
//! prints one row per command: median of the runs, both sides, and the
//! ratio ours / real git (below 1: ours is faster).

#[path = "../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

use agentcomputer_fs::{Fs, Limits, Owner};
use agentcomputer_git::{Files, Invocation};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 7;
const ENV: &[(&str, &str)] = &[
    ("GIT_AUTHOR_NAME", "Bench"),
    ("GIT_AUTHOR_EMAIL", "bench@example.org"),
    ("GIT_COMMITTER_NAME", "Bench"),
    ("GIT_COMMITTER_EMAIL", "bench@example.org"),
];

fn content(i: usize) -> Vec<u8> {
    format!("// file {i}\n{}\n", "let x = 1;\n".repeat(20 + i % 50)).into_bytes()
}

fn path_of(i: usize) -> String {
    format!("src/d{}/f{i}.rs", i % 20)
}

fn ours(fs: &Fs, cwd: &str, args: &[&str]) -> Duration {
    ours_with(fs, cwd, args, None)
}

fn ours_with(
    fs: &Fs,
    cwd: &str,
    args: &[&str],
    transport: Option<&dyn agentcomputer_git::remote::transport::Transport>,
) -> Duration {
    let env = |n: &str| {
        ENV.iter()
            .find(|(k, _)| *k == n)
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
        shown_root: String::new(),
        env: &env,
        stop: &stop,
        fallback_name: "b".into(),
        fallback_email: "b@b".into(),
        transport,
    };
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    settle();
    let t = Instant::now();
    let out = agentcomputer_git::run(&inv, &args);
    let took = t.elapsed();
    assert_eq!(
        out.code,
        0,
        "ours {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Writes back what earlier steps left dirty, so neither side pays for
/// the other's page cache.
fn settle() {
    let _ = Command::new("sync").status();
}

fn real(dir: &Path, args: &[&str]) -> Duration {
    settle();
    let t = Instant::now();
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.parent().unwrap())
        .envs(ENV.iter().copied())
        .output()
        .expect("real git");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "real {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let mut rows: Vec<(&str, Vec<Duration>, Vec<Duration>)> = vec![
        ("add -A", vec![], vec![]),
        ("commit", vec![], vec![]),
        ("status (clean)", vec![], vec![]),
        ("status (10 changed)", vec![], vec![]),
    ];
    for run in 0..RUNS {
        let tmp = tempfile::tempdir().unwrap();
        let fs = Fs::create(&tmp.path().join("fs.db"), Limits::default()).unwrap();
        let files = Files::new(
            fs.clone(),
            Owner {
                uid: 1000,
                gid: 1000,
            },
        );
        let host = tmp.path().join("host/repo");
        for i in 0..n {
            let p = path_of(i);
            files
                .write(format!("/repo/{p}").as_bytes(), &content(i), 0o644)
                .unwrap();
            std::fs::create_dir_all(host.join(&p).parent().unwrap()).unwrap();
            std::fs::write(host.join(&p), content(i)).unwrap();
        }
        // Real git's steps first, then ours: the engine checkpoints its
        // log in the background after commits, which must not overlap
        // real git's timings.
        real(&host, &["init", "-q"]);
        let real_times = [
            real(&host, &["add", "-A"]),
            real(&host, &["commit", "-q", "-m", "bench"]),
            real(&host, &["status", "--porcelain"]),
        ];
        for i in 0..10 {
            std::fs::write(host.join(path_of(i * 7)), b"changed\n").unwrap();
        }
        let real_changed = real(&host, &["status", "--porcelain"]);
        ours(&fs, "/repo", &["init", "-q"]);
        let ours_times = [
            ours(&fs, "/repo", &["add", "-A"]),
            ours(&fs, "/repo", &["commit", "-q", "-m", "bench"]),
            ours(&fs, "/repo", &["status", "--porcelain"]),
        ];
        for i in 0..10 {
            files
                .write(
                    format!("/repo/{}", path_of(i * 7)).as_bytes(),
                    b"changed\n",
                    0o644,
                )
                .unwrap();
        }
        let ours_changed = ours(&fs, "/repo", &["status", "--porcelain"]);
        let m: Vec<(Duration, Duration)> = ours_times.into_iter().zip(real_times).collect();
        let changed = (ours_changed, real_changed);
        if run == 0 {
            continue; // warm-up
        }
        for (row, (o, r)) in rows.iter_mut().zip(m.into_iter().chain([changed])) {
            row.1.push(o);
            row.2.push(r);
        }
    }
    // Clone of a 1,000-commit repository served by real git's
    // http-backend on loopback.
    let served = tempfile::tempdir().unwrap();
    http::bare_repo(served.path(), "big", 1000);
    let backend = http::Backend::start(served.path());
    let url = backend.url("big.git");
    let mut clone_ours = Vec::new();
    let mut clone_real = Vec::new();
    for run in 0..RUNS {
        let tmp = tempfile::tempdir().unwrap();
        let fs = Fs::create(&tmp.path().join("fs.db"), Limits::default()).unwrap();
        let host = tmp.path().join("host");
        std::fs::create_dir_all(&host).unwrap();
        let r = real(&host, &["clone", "-q", &url, "c"]);
        let o = ours_with(&fs, "/", &["clone", "-q", &url, "c"], Some(&http::Loopback));
        if run > 0 {
            clone_ours.push(o);
            clone_real.push(r);
        }
    }
    rows.push(("clone (1,000 commits, HTTP)", clone_ours, clone_real));
    println!("git over {n} files, median of {} runs", RUNS - 1);
    println!("| command | ours (engine) ms | real git (ext4) ms | ratio ours/real |");
    println!("|---|---:|---:|---:|");
    for (name, o, r) in rows {
        let (o, r) = (median(o), median(r));
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} |",
            o.as_secs_f64() * 1e3,
            r.as_secs_f64() * 1e3,
            o.as_secs_f64() / r.as_secs_f64()
        );
    }
}
