//! The container runtime's privilege boundary in a real `node-agent
//! local` process (root, with bubblewrap): nothing of the caller (its
//! environment, its script) reaches a program running as root, and nothing
//! of the host (the run's paths) reaches the sandbox or other local users.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

fn sandbox_possible() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: the local container sandbox needs root");
        return false;
    }
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(name).is_file())
    };
    if !on_path("bwrap") {
        eprintln!("SKIPPED: bwrap (Debian package bubblewrap) is not installed");
        return false;
    }
    true
}

fn box_req(computer: &str, script: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: computer.into(),
        script: script.into(),
        runtime: pb::Runtime::Container as i32,
        ..Default::default()
    }
}

/// Builds `fixtures/preload_record.c` into `dir/preload.so`, recording to
/// `record`, and checks that it works: a host program run with it
/// preloaded leaves a line with its uid.
fn preload_library(dir: &Path, record: &Path) -> PathBuf {
    let so = dir.join("preload.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/preload_record.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(format!("-DRECORD=\"{}\"", record.display()))
        .arg(&src)
        .status()
        .expect("cc (build-essential) builds the preload library");
    assert!(status.success(), "cc failed on {}", src.display());
    let status = Command::new("/bin/true")
        .env("LD_PRELOAD", &so)
        .status()
        .unwrap();
    assert!(status.success());
    let seen = std::fs::read_to_string(record).expect("the preload library records its loads");
    assert!(seen.starts_with("uid=0 euid=0 exe="), "{seen}");
    std::fs::remove_file(record).unwrap();
    so
}

#[tokio::test]
async fn a_callers_preload_library_never_runs_as_root() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let record = host.path().join("record");
    let so = preload_library(host.path(), &record);
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;
    // The same library inside the computer too, where the script's own
    // processes (the sandbox user) may load it.
    write(
        &mut c,
        "box",
        "preload.so",
        pb::WriteMode::Truncate,
        &std::fs::read(&so).unwrap(),
    )
    .await
    .unwrap();

    // Every program before the privilege drop (bwrap, setpriv) would find
    // the host copy; every program after it, the computer's.
    let mut req = box_req("box", "/bin/true; cat preload-record");
    req.env.insert(
        "LD_PRELOAD".into(),
        format!("{} /workspace/preload.so", so.display()),
    );
    req.env
        .insert("LD_LIBRARY_PATH".into(), host.path().display().to_string());
    let r = run(&mut c, req).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        !record.exists(),
        "a program outside the sandbox loaded the caller's library: {}",
        std::fs::read_to_string(&record).unwrap_or_default()
    );
    // The script's processes did load it, as the sandbox user only.
    assert!(r.stdout.contains("uid=1000 euid=1000"), "{r:?}");
    assert!(!r.stdout.contains("uid=0"), "{r:?}");

    // The variables still reach the script as before.
    let mut req = box_req("box", "echo \"$GREETING\"; env | grep -c '^GREETING='");
    req.env.insert("GREETING".into(), "hello 'there'".into());
    let r = run(&mut c, req).await;
    assert_eq!(r.stdout, "hello 'there'\n1\n", "{r:?}");
}

#[tokio::test]
async fn the_run_is_on_no_argv_and_its_host_path_is_not_seen_inside() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;

    // A script carrying a secret, asleep while the host is searched.
    let secret = "s3cr3t-7f1c2e";
    let mut stream = c
        .exec(box_req(
            "box",
            &format!("TOKEN={secret}; echo up; sleep 3; echo \"${{#TOKEN}}\""),
        ))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(
        first.event,
        Some(pb::exec_event::Event::Stdout(b"up\n".to_vec()))
    );
    let data_dir = dir.path().display().to_string();
    let exec_dir = dir.path().join("run/exec").display().to_string();
    let mut leaks = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(secret) || cmd.contains(&exec_dir) {
                leaks.push(cmd);
            }
        }
    }
    assert!(leaks.is_empty(), "visible to every local user: {leaks:?}");
    // The run's mountpoint is named by nothing a caller knows.
    let runs: Vec<String> = std::fs::read_dir(dir.path().join("run/exec"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        runs[0].len() == 64 && runs[0].bytes().all(|b| b.is_ascii_hexdigit()),
        "{runs:?}"
    );
    while stream.message().await.unwrap().is_some() {}

    // Inside, no process's command line nor the mount table names the
    // host's paths.
    let r = run(
        &mut c,
        box_req(
            "box",
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; cat /proc/self/mountinfo",
        ),
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("bwrap --args"), "{}", r.stdout);
    assert!(!r.stdout.contains(&data_dir), "{}", r.stdout);
    assert!(!r.stdout.contains("run/exec"), "{}", r.stdout);
}

#[tokio::test]
async fn variables_the_sandboxs_shell_cannot_set_are_refused_by_name() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;
    for name in ["a-b", "1X", "SHELLOPTS", "BASH_FUNC_f%%"] {
        let mut req = box_req("box", "true");
        req.env.insert(name.into(), "v".into());
        let err = c.exec(req).await.unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
        assert!(err.message().contains(name), "{err:?}");
    }
    // The agent is unharmed and the shell runtime takes any C-string name.
    let mut req = exec_req("box", "echo ok");
    req.env.insert("a-b".into(), "v".into());
    let r = tokio::time::timeout(Duration::from_secs(30), run(&mut c, req))
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n");
}
