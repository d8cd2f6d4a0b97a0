//! One computer's container run floods its egress proxy with idle
//! connections, more than the agent has descriptors; another computer's
//! exec, API calls, share download and host mount keep working, the agent
//! keeps its FUSE descriptor holder, and the flood ends without harm.
//!
//! The agent runs with the common default descriptor limits (soft 1024,
//! hard 4096), and the flood (five processes of 1000 connections each, the
//! sandbox's per-process limit) is larger than the hard limit.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::*;

/// Connections the flooding run opens: `PROCESSES` × `PER_PROCESS`.
const PROCESSES: usize = 5;
const PER_PROCESS: usize = 1000;

/// Opens the connections to the proxy and holds them for 10 s; writes
/// `opened.txt` (how many each process opened) once all are open.
fn flood_script() -> String {
    format!(
        r#"python3 - <<'PY'
import os, socket, time
counts = []
for p in range({PROCESSES}):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        held = []
        for i in range({PER_PROCESS} - 20):
            try:
                s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
                held.append(s)
            except OSError:
                break
        os.write(w, str(len(held)).encode())
        os.close(w)
        time.sleep(10)
        os._exit(0)
    os.close(w)
    counts.append(int(os.read(r, 64) or b"0"))
    os.close(r)
open("/workspace/opened.txt", "w").write(" ".join(map(str, counts)))
print("opened", sum(counts), flush=True)
for _ in range({PROCESSES}):
    os.wait()
PY"#
    )
}

/// The sandbox, and the FUSE device its workspace needs.
fn flood_possible() -> bool {
    if !sandbox_possible() {
        return false;
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent");
        return false;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_flood_from_one_computer_leaves_the_others_working() {
    if !flood_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut wrapper = Command::new("prlimit");
    wrapper.args(["--nofile=1024:4096", "--"]);
    wrapper.arg(env!("CARGO_BIN_EXE_node-agent"));
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = Agent::start_wrapped_with(wrapper, dir.path(), &[], |cmd| {
        cmd.stderr(log);
    });
    let mut c = agent.client().await;
    c.create_computer(pb::CreateComputerRequest {
        name: "flood".into(),
        egress: Some(pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    create(&mut c, "other", 0).await;
    write(
        &mut c,
        "other",
        "f.txt",
        pb::WriteMode::Truncate,
        b"other's bytes",
    )
    .await
    .unwrap();
    c.mount(pb::MountRequest {
        computer: "other".into(),
        host_path: mnt.path().to_str().unwrap().into(),
        nonempty: false,
    })
    .await
    .unwrap();
    let link = c
        .share(pb::ShareRequest {
            computer: "other".into(),
            path: "f.txt".into(),
            expires_in_seconds: 600,
        })
        .await
        .unwrap()
        .into_inner()
        .url;

    let flooding = {
        let mut c = agent.client().await;
        tokio::spawn(async move {
            let mut req = pb::ExecRequest {
                computer: "flood".into(),
                script: flood_script(),
                runtime: pb::Runtime::Container as i32,
                ..Default::default()
            };
            req.timeout_ms = 60_000;
            run(&mut c, req).await
        })
    };
    // Until every flooding process has opened what it could.
    let deadline = Instant::now() + Duration::from_secs(40);
    let opened = loop {
        if let Ok(bytes) = read(&mut c, "flood", "opened.txt").await {
            break String::from_utf8(bytes).unwrap();
        }
        assert!(
            Instant::now() < deadline && !flooding.is_finished(),
            "the flood did not start: {:?}",
            if flooding.is_finished() {
                Some(flooding.await.unwrap())
            } else {
                None
            }
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("flood: connections opened per process: {opened}");

    // Everything of the other computer, on new connections, while the
    // flood is held.
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let mut c = agent.client().await;
        let ran = sh(
            &mut c,
            "other",
            "cat f.txt; echo; echo ok > g.txt; echo done",
        )
        .await;
        assert_eq!(ran.stdout, "other's bytes\ndone\n", "{ran:?}");
        let names = names(&mut c, "other", ".").await;
        assert!(names.contains(&"g.txt".to_string()), "{names:?}");
    })
    .await;
    assert!(
        answered.is_ok(),
        "the other computer's exec and API calls were not answered within 20 s during the flood"
    );
    let mounted = mnt.path().join("g.txt");
    let on_mount = tokio::task::spawn_blocking(move || std::fs::read_to_string(mounted))
        .await
        .unwrap();
    assert_eq!(
        on_mount.as_deref().map_err(|e| e.to_string()),
        Ok("ok\n"),
        "the host mount failed during the flood"
    );
    let got = tokio::task::spawn_blocking(move || curl(&link))
        .await
        .unwrap();
    assert_eq!(
        got.as_deref(),
        Ok(&b"other's bytes"[..]),
        "the share link was not served during the flood"
    );

    let ran = tokio::time::timeout(Duration::from_secs(40), flooding)
        .await
        .expect("the flooding run ended")
        .unwrap();
    assert!(ran.stdout.starts_with("opened "), "{ran:?}");
    assert!(agent.alive(), "the agent died under the flood");
    // The descriptor holder was never taken for dead.
    let log = std::fs::read_to_string(&log_path).unwrap();
    eprintln!(
        "agent log (last 4000 bytes): {}",
        &log[log.len().saturating_sub(4000)..]
    );
    assert!(
        !log.contains("FUSE descriptor holder"),
        "the holder's supervision failed during the flood:\n{log}"
    );
    // The limit held the flood, not luck: the agent never ran out.
    assert!(
        !log.contains("Too many open files"),
        "the agent ran out of descriptors:\n{log}"
    );
    assert!(
        log.contains("the computer holds its limit of proxy connections"),
        "the flood was not refused by the per-computer limit:\n{log}"
    );
    let mut c = agent.client().await;
    c.unmount(pb::UnmountRequest {
        computer: "other".into(),
        host_path: mnt.path().to_str().unwrap().into(),
    })
    .await
    .unwrap();
}
