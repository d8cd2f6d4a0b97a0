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

#[tokio::test]
async fn a_working_directory_through_a_link_stays_inside_the_sandbox() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;
    // A link to a descriptor bubblewrap holds on the host's /proc while it
    // changes directory as root; the computer has a directory of the same
    // path, so the agent's check of `cwd` passes.
    let marker = format!("agentcomputer-escape-{}", std::process::id());
    let r = run(
        &mut c,
        box_req(
            "box",
            "mkdir -p /workspace/proc/self/fd/3 sub && ln -s /proc/self/fd/3 /workspace/esc3 && ln -s sub inside",
        ),
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let mut req = box_req(
        "box",
        &format!("touch ../tmp/{marker}; ls -a ..; ls /proc | grep -c '^[0-9]'"),
    );
    req.cwd = "esc3".into();
    let r = run(&mut c, req).await;
    let host_file = Path::new("/tmp").join(&marker);
    let escaped = host_file.exists();
    let _ = std::fs::remove_file(&host_file);
    assert!(!escaped, "the script wrote into the host's /tmp: {r:?}");
    assert_eq!(r.code, 125, "{r:?}");
    assert!(
        r.stderr
            .contains("container: cannot enter the working directory /workspace/esc3"),
        "{r:?}"
    );
    // A link inside the computer is followed as the sandbox user would.
    let mut req = box_req("box", "pwd; pwd -P");
    req.cwd = "inside".into();
    let r = run(&mut c, req).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "/workspace/sub\n/workspace/sub\n"),
        "{r:?}"
    );
}

#[tokio::test]
async fn descriptors_and_ignored_signals_of_the_agents_parent_stay_out() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("root-only");
    std::fs::write(&secret, "root secret\n").unwrap();
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&secret)
        .unwrap();
    use std::os::fd::AsRawFd;
    let raw = file.as_raw_fd();
    // The agent starts with the file open as descriptor 7 (not
    // close-on-exec) and SIGHUP ignored, as under `nohup ... 7>>file`.
    let data = dir.path().join("data");
    let agent = Agent::start_with(&data, &[], move |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: dup2 and signal are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
    });
    drop(file);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;
    let r = run(
        &mut c,
        box_req(
            "box",
            // The shell's own table, read while it holds no pipe of a
            // pipeline.
            "ls /proc/$$/fd > /tmp/fds; tr '\\n' ' ' < /tmp/fds; echo; echo written >&7; grep SigIgn /proc/self/status",
        ),
    )
    .await;
    assert!(r.stdout.starts_with("0 1 2 \n"), "{r:?}");
    assert!(r.stderr.contains("7: Bad file descriptor"), "{r:?}");
    // No standard signal (1 to 31) is ignored; 32 and 33 belong to the C
    // library's threads.
    let ignored = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn line: {r:?}"));
    assert_eq!(ignored & 0x7fff_ffff, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root secret\n");
}
