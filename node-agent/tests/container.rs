//! The container runtime of a real `node-agent local` process (root, with
//! bubblewrap): the exec contract it shares with the other runtimes, files
//! shared with the shell and JavaScript at once, and the sandbox's walls.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::*;
use pb::exec_event::Event;
use tonic::Code;

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

async fn boxed(c: &mut Client, computer: &str, script: &str) -> Ran {
    run(c, box_req(computer, script)).await
}

/// Host processes whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[tokio::test]
async fn the_exec_contract_holds_in_the_container() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;

    // Exit codes, as bash gives them; a signal is 128+N.
    assert_eq!(boxed(&mut c, "box", "exit 3").await.code, 3);
    assert_eq!(boxed(&mut c, "box", "true").await.code, 0);
    let r = boxed(&mut c, "box", "kill -9 $$").await;
    assert_eq!((r.code, r.error.as_str()), (137, ""), "{r:?}");
    assert_eq!(boxed(&mut c, "box", "no-such-command-here").await.code, 127);

    // Each stream keeps its order.
    let r = boxed(&mut c, "box", "echo a; echo b >&2; echo c; echo d >&2").await;
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("a\nc\n", "b\nd\n"));

    // stdin, env, cwd; work starts in /workspace.
    let mut req = box_req("box", "cat; echo \"$FOO\"; pwd; echo $HOME");
    req.stdin = b"from stdin\n".to_vec();
    req.env.insert("FOO".into(), "bar baz".into());
    let r = run(&mut c, req).await;
    assert_eq!(
        r.stdout, "from stdin\nbar baz\n/workspace\n/workspace\n",
        "{r:?}"
    );
    sh(&mut c, "box", "mkdir -p src/deep").await;
    let mut req = box_req("box", "pwd");
    req.cwd = "src/deep".into();
    assert_eq!(run(&mut c, req).await.stdout, "/workspace/src/deep\n");
    let mut req = box_req("box", "pwd");
    req.cwd = "nope".into();
    let err = c.exec(req).await.unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");

    // Output is streamed as it comes, not at the end.
    let started = Instant::now();
    let mut stream = c
        .exec(box_req("box", "echo first; sleep 2; echo second"))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().event.unwrap();
    assert_eq!(first, Event::Stdout(b"first\n".to_vec()));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    while stream.message().await.unwrap().is_some() {}

    // The output cap cuts exactly there and stops the script.
    let mut req = box_req("box", "yes");
    req.max_output_bytes = 1000;
    let r = run(&mut c, req).await;
    assert_eq!(r.code, 141, "{r:?}");
    assert_eq!(r.stdout.len(), 1000);
    assert!(r.error.contains("output exceeded 1000 bytes"), "{r:?}");
    assert!(
        r.stderr.ends_with("output truncated and script stopped\n"),
        "{r:?}"
    );

    // A timeout kills the whole tree, background children included.
    let marker = format!("{}.{}", 100 + std::process::id() % 800, 7);
    let mut req = box_req(
        "box",
        &format!("sleep {marker} & (sleep {marker} &) ; sleep {marker}"),
    );
    req.timeout_ms = 2000;
    let started = Instant::now();
    let r = run(&mut c, req).await;
    let took = started.elapsed();
    assert_eq!(r.code, 124, "{r:?}");
    assert_eq!(r.error, "container: script timed out after 2s");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!(
        host_processes_with(&format!("sleep {marker}")),
        Vec::<String>::new()
    );

    // Background jobs do not outlive a script that ends by itself either.
    let marker2 = format!("{}.{}", 100 + std::process::id() % 800, 3);
    let r = boxed(&mut c, "box", &format!("sleep {marker2} & echo started")).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "started\n"));
    assert_eq!(
        host_processes_with(&format!("sleep {marker2}")),
        Vec::<String>::new()
    );

    // A client that goes away stops the run and its processes.
    let marker3 = format!("{}.{}", 100 + std::process::id() % 800, 9);
    let script = format!(
        "sleep {marker3} & i=0; while true; do i=$((i+1)); echo $i > counter; echo tick; sleep 0.1; done"
    );
    assert_run_stops_when_client_leaves(&mut c, "box", box_req("box", &script), "container").await;
    assert_eq!(
        host_processes_with(&format!("sleep {marker3}")),
        Vec::<String>::new()
    );

    // input_json belongs to JavaScript.
    let mut req = box_req("box", "true");
    req.input_json = "{}".into();
    assert_errno(
        &c.exec(req).await.unwrap_err(),
        Code::InvalidArgument,
        "EINVAL",
    );
    agent.stop().await;
}

#[tokio::test]
async fn files_are_shared_with_the_shell_and_javascript_at_once() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "shared", 0).await;

    let r = boxed(
        &mut c,
        "shared",
        "echo from-container > /workspace/c.txt; mkdir d; echo x > d/y",
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let r = sh(&mut c, "shared", "cat c.txt d/y").await;
    assert_eq!(r.stdout, "from-container\nx\n", "{r:?}");
    // The container writes as the user the shell writes as.
    sh(&mut c, "shared", "echo s > owner.txt").await;
    let r = boxed(&mut c, "shared", "stat -c %u:%g c.txt owner.txt").await;
    assert_eq!(r.stdout, "1000:1000\n1000:1000\n", "{r:?}");
    // Links resolve inside the sandbox (host mounts are nosymfollow; the
    // sandbox's own mount is not).
    sh(
        &mut c,
        "shared",
        "ln -s c.txt link.txt; ln -s /workspace/d dlink",
    )
    .await;
    let r = boxed(
        &mut c,
        "shared",
        "cat link.txt dlink/y; echo via-link >> dlink/y",
    )
    .await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "from-container\nx\n"),
        "{r:?}"
    );
    assert_eq!(
        sh(&mut c, "shared", "cat d/y").await.stdout,
        "x\nvia-link\n"
    );
    let js = r#"import fs from "node:fs/promises";
export default async () => (await fs.readFile("/workspace/c.txt", "utf8")).trim();"#;
    assert_eq!(
        run(&mut c, js_req("shared", js, "")).await.result,
        r#""from-container""#
    );

    sh(&mut c, "shared", "echo from-shell > s.txt").await;
    let js = r#"import fs from "node:fs/promises";
export default async () => { await fs.writeFile("/workspace/j.txt", "from-js\n"); return 1; };"#;
    run(&mut c, js_req("shared", js, "")).await;
    let r = boxed(&mut c, "shared", "cat s.txt j.txt; echo more >> s.txt").await;
    assert_eq!(r.stdout, "from-shell\nfrom-js\n", "{r:?}");
    assert_eq!(
        sh(&mut c, "shared", "cat s.txt").await.stdout,
        "from-shell\nmore\n"
    );

    // While a container run is going, a file the shell writes appears in
    // it, and a file it writes appears to the shell.
    let mut stream = c
        .exec(box_req(
            "shared",
            "ls late.txt 2>/dev/null; echo ready; for i in $(seq 200); do if [ -f late.txt ]; then cat late.txt; echo back > reply.txt; exit 0; fi; sleep 0.02; done; exit 1",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stream.message().await.unwrap().unwrap().event.unwrap(),
        Event::Stdout(b"ready\n".to_vec())
    );
    let mut c2 = agent.client().await;
    sh(&mut c2, "shared", "echo written-meanwhile > late.txt").await;
    let mut out = String::new();
    let mut code = None;
    while let Some(ev) = stream.message().await.unwrap() {
        match ev.event.unwrap() {
            Event::Stdout(b) => out.push_str(&String::from_utf8_lossy(&b)),
            Event::Exit(e) => code = Some(e.code),
            Event::Stderr(_) => {}
        }
    }
    assert_eq!((code, out.as_str()), (Some(0), "written-meanwhile\n"));
    assert_eq!(sh(&mut c, "shared", "cat reply.txt").await.stdout, "back\n");
    agent.stop().await;
}

#[tokio::test]
async fn the_sandbox_walls_hold() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "walled", 0).await;
    create(&mut c, "other", 0).await;
    sh(&mut c, "other", "echo other-secret-7731 > secret.txt").await;
    let data = dir.path().display().to_string();
    let port = agent.url.rsplit(':').next().unwrap().to_string();

    let check = |script: String| box_req("walled", &script);
    let cases: Vec<(&str, String)> = vec![
        ("the data directory", format!("ls {data}")),
        (
            "the data directory's databases",
            format!("cat {data}/computers/other/fs.db"),
        ),
        (
            "another computer's files",
            "grep -rs other-secret-7731 / --exclude-dir=proc --exclude-dir=sys -l".into(),
        ),
        ("/root", "ls /root".into()),
        ("/home", "ls /home".into()),
        ("writing the userland", "touch /usr/bin/planted".into()),
        ("writing /etc", "echo x >> /etc/passwd".into()),
        ("adding to /etc", "touch /etc/planted".into()),
        ("adding to /", "mkdir /planted".into()),
        (
            "the agent's API",
            format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
        ),
        ("the network", "exec 3<>/dev/tcp/1.1.1.1/80".into()),
        ("raising privileges", "su -c true root </dev/null".into()),
    ];
    for (what, script) in cases {
        let r = run(&mut c, check(format!("{script} && echo REACHED"))).await;
        assert!(
            !r.stdout.contains("REACHED") && !r.stdout.contains("other-secret"),
            "the container reached {what}: {r:?}"
        );
    }

    // Identity and privileges: the sandbox user, no capabilities.
    let r = boxed(
        &mut c,
        "walled",
        "id -u; id -g; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
    )
    .await;
    assert!(r.stdout.starts_with("1000\n1000\n"), "{r:?}");
    assert!(r.stdout.contains("CapEff:\t0000000000000000"), "{r:?}");
    assert!(r.stdout.contains("CapBnd:\t0000000000000000"), "{r:?}");
    assert!(r.stdout.contains("NoNewPrivs:\t1"), "{r:?}");

    // Host processes are invisible: only the sandbox's own are in /proc.
    let r = boxed(&mut c, "walled", "ls /proc | grep -cE '^[0-9]+$'").await;
    let count: u32 = r.stdout.trim().parse().unwrap();
    assert!(count <= 5, "the container sees {count} processes");

    // Only loopback exists under deny-all.
    let r = boxed(
        &mut c,
        "walled",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!(r.stdout, "lo\n", "{r:?}");
    let r = boxed(&mut c, "walled", "env | grep -ci proxy").await;
    assert_eq!(
        r.stdout.trim(),
        "0",
        "deny-all gets no proxy settings: {r:?}"
    );

    // Host binaries work; /tmp is private and writable.
    let r = boxed(
        &mut c,
        "walled",
        "echo t > /tmp/t && cat /tmp/t && git --version >/dev/null && echo ok",
    )
    .await;
    assert_eq!(r.stdout, "t\nok\n", "{r:?}");
    let r = boxed(&mut c, "walled", "cat /tmp/t").await;
    assert_ne!(r.code, 0, "/tmp survived between runs: {r:?}");

    // A process limit holds (the pids cgroup, 1024 tasks by default):
    // threads count as tasks and are cheap to make.
    let r = boxed(
        &mut c,
        "walled",
        "python3 -c '\nimport threading, time\nn = 0\ntry:\n    for i in range(1100):\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\nexcept RuntimeError as e:\n    print(\"refused after\", n)\n'",
    )
    .await;
    let refused: u32 = r
        .stdout
        .trim()
        .strip_prefix("refused after ")
        .unwrap_or_else(|| panic!("no process limit: {r:?}"))
        .parse()
        .unwrap();
    assert!(refused < 1024, "{refused} threads started");
    agent.stop().await;
}

/// The seccomp filter (`agentcomputer_container::seccomp`) is in force in
/// the sandbox: calls that an unprivileged user could otherwise make (and
/// that would answer something other than EPERM without it) get EPERM,
/// `clone3` gets ENOSYS, `unshare -U` cannot make a user namespace, and
/// ordinary work (threads, fork, python3, perl, git, a C compiler) still
/// works.
#[tokio::test]
async fn the_seccomp_filter_denies_the_listed_calls_and_ordinary_work_goes_on() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "filtered", 0).await;

    // Each call with arguments that, without the filter, the kernel would
    // answer with success or another errno for the sandbox user.
    let calls: Vec<(&str, i64, &str, i32)> = vec![
        ("keyctl", libc::SYS_keyctl, "-1", libc::EPERM),
        (
            "io_uring_setup",
            libc::SYS_io_uring_setup,
            "1, None",
            libc::EPERM,
        ),
        ("ptrace", libc::SYS_ptrace, "-1, 0", libc::EPERM),
        ("setns", libc::SYS_setns, "-1, 0", libc::EPERM),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            "os.getpid(), None, 0, None, 0, 0",
            libc::EPERM,
        ),
        (
            "kcmp",
            libc::SYS_kcmp,
            "os.getpid(), os.getpid(), 0, 0, 0",
            libc::EPERM,
        ),
        (
            "personality(ADDR_NO_RANDOMIZE)",
            libc::SYS_personality,
            "0x0040000",
            libc::EPERM,
        ),
        (
            "unshare(CLONE_NEWUSER)",
            libc::SYS_unshare,
            "0x10000000",
            libc::EPERM,
        ),
        ("clone3", libc::SYS_clone3, "None, 88", libc::ENOSYS),
        ("personality(query)", libc::SYS_personality, "0xffffffff", 0),
    ];
    let mut script = String::from(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         def call(nr, *args):\n    ctypes.set_errno(0)\n    r = libc.syscall(nr, *args)\n    \
         return ctypes.get_errno() if r == -1 else 0\n",
    );
    for (_, nr, args, _) in &calls {
        script.push_str(&format!("print(call({nr}, {args}))\n"));
    }
    let r = boxed(&mut c, "filtered", &format!("python3 -c '{script}'")).await;
    assert_eq!(r.code, 0, "{r:?}");
    let got: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(got.len(), calls.len(), "{r:?}");
    for ((name, _, _, want), got) in calls.iter().zip(got) {
        assert_eq!(got, want.to_string(), "{name}: errno {got}, wanted {want}");
    }

    // The same through perl's syscall(), and the tools' own errors.
    let r = boxed(
        &mut c,
        "filtered",
        &format!(
            "perl -e 'syscall({}, -1) == -1 and print 0+$!, \"\\n\"'; \
             unshare -U true || echo unshare-refused",
            libc::SYS_keyctl
        ),
    )
    .await;
    assert!(
        r.stdout.starts_with(&format!("{}\n", libc::EPERM)),
        "perl: {r:?}"
    );
    assert!(r.stdout.contains("unshare-refused\n"), "{r:?}");
    assert!(r.stderr.contains("Operation not permitted"), "{r:?}");

    // Ordinary work: fork, threads (glibc tries clone3 first and falls
    // back to clone), python3, perl, git, and a compiler when the host has
    // one.
    let r = boxed(
        &mut c,
        "filtered",
        "set -e; (echo forked) ; sh -c 'echo from sh'; \
         python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join()'; \
         perl -e 'print \"perl\\n\"'; \
         git init -q repo && cd repo && echo x > f && git add f && \
         git -c user.name=a -c user.email=a@example.com commit -qm first && git log --format=%s",
    )
    .await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "forked\nfrom sh\nthread\nperl\nfirst\n"),
        "{r:?}"
    );
    if which("cc").is_some() {
        let r = boxed(
            &mut c,
            "filtered",
            "printf '#include <pthread.h>\\nstatic void *f(void *a) { return a; }\\n\
             int main(void) { pthread_t t; void *r; pthread_create(&t, 0, f, (void *)42); \
             pthread_join(t, &r); return (int)(long)r; }\\n' > /tmp/t.c && \
             cc -pthread -o /tmp/t /tmp/t.c && /tmp/t; echo $?",
        )
        .await;
        assert_eq!(r.stdout, "42\n", "{r:?}");
    } else {
        eprintln!("no C compiler on this host: the compiler check is skipped");
    }
    agent.stop().await;
}

/// An agent that is not root refuses container runs and says which walls
/// it cannot build.
#[tokio::test]
async fn without_root_container_runs_are_refused_with_the_reason() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: starting an agent as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    nix::unistd::chown(&data, Some(65534.into()), Some(65534.into())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = Agent::start_as(&data, &[], 65534);
    let mut c = agent.client().await;
    create(&mut c, "plain", 0).await;
    let err = c.exec(box_req("plain", "true")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("not running as root"), "{err:?}");
    assert!(err.message().contains("PID namespace"), "{err:?}");
    // The other runtimes still work.
    assert_eq!(sh(&mut c, "plain", "echo ok").await.stdout, "ok\n");
    agent.stop().await;
}

/// A computer whose settings turn the container runtime off is refused.
#[tokio::test]
async fn a_computer_without_the_container_runtime_is_refused() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "nobox", 0).await;
    drop(c);
    assert!(agent.stop().await.success());
    let file = dir.path().join("computers/nobox/computer.json");
    let mut settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    settings["runtimes"]["container"] = serde_json::Value::Bool(false);
    std::fs::write(&file, serde_json::to_vec(&settings).unwrap()).unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    let err = c.exec(box_req("nobox", "true")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("runtime container is disabled"),
        "{err:?}"
    );
    assert_eq!(sh(&mut c, "nobox", "echo ok").await.stdout, "ok\n");
    agent.stop().await;
}

/// The memory cgroup directory this process (and so the agent it starts)
/// lives in, and the name of its limit file: cgroup v2 `memory.max` under
/// the unified tree, or v1 `memory.limit_in_bytes` under the memory tree.
fn own_memory_cgroup() -> Option<(std::path::PathBuf, &'static str)> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let unified = root.join("cgroup.controllers").exists();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if unified && controllers.is_empty() {
            return Some((root.join(path), "memory.max"));
        }
        if !unified && controllers.split(',').any(|c| c == "memory") {
            return Some((root.join("memory").join(path), "memory.limit_in_bytes"));
        }
    }
    None
}

/// The memory limit of the first cgroup of `agent_pid`'s runs
/// (`agentcomputer-<pid>-<n>`) under `dir`, waiting up to 10 s for one.
fn run_memory_limit(dir: &std::path::Path, file: &str, agent_pid: u32) -> u64 {
    let prefix = format!("agentcomputer-{agent_pid}-");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::fs::read_dir(dir).unwrap().flatten().find(|e| {
            e.file_name().to_string_lossy().starts_with(&prefix) && e.path().join(file).exists()
        });
        if let Some(entry) = found
            && let Ok(text) = std::fs::read_to_string(entry.path().join(file))
        {
            return text.trim().parse().expect("a limit in bytes");
        }
        assert!(Instant::now() < deadline, "no cgroup {prefix}* in {dir:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A container run's cgroup memory limit is the budget admission reserved
/// for it from the agent's exec memory: the default budget (256 MiB on an
/// idle agent) when the request names none, else the one it names.
#[tokio::test]
async fn a_container_run_is_limited_to_the_memory_it_reserved() {
    if !sandbox_possible() {
        return;
    }
    let Some((cgroup, file)) = own_memory_cgroup() else {
        eprintln!("SKIPPED: no memory cgroup on this host");
        return;
    };
    let probe = cgroup.join(format!("agentcomputer-probe-{}", std::process::id()));
    if std::fs::create_dir(&probe).is_err() {
        eprintln!("SKIPPED: the memory cgroup {cgroup:?} does not take child cgroups");
        return;
    }
    std::fs::remove_dir(&probe).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "box", 0).await;
    for (asked, limit) in [(0, 256u64 << 20), (96 << 20, 96 << 20)] {
        let mut req = box_req("box", "sleep 3; echo done");
        req.memory_limit_bytes = asked;
        let mut client = c.clone();
        let running = tokio::spawn(async move { run(&mut client, req).await });
        let seen = tokio::task::spawn_blocking({
            let cgroup = cgroup.clone();
            let pid = agent.pid();
            move || run_memory_limit(&cgroup, file, pid)
        })
        .await
        .unwrap();
        assert_eq!(seen, limit, "asked for {asked} bytes");
        let r = running.await.unwrap();
        assert_eq!((r.code, r.stdout.as_str()), (0, "done\n"), "{r:?}");
        // The run's cgroup is gone before the next one is looked for.
        let deadline = Instant::now() + Duration::from_secs(10);
        let prefix = format!("agentcomputer-{}-", agent.pid());
        while std::fs::read_dir(&cgroup)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        {
            assert!(Instant::now() < deadline, "the run's cgroup stayed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    agent.stop().await;
}
