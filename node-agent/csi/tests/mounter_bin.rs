//! The `agentcomputer-mounter` binary: flags and environment variables,
//! its sockets and directories, readiness following the agent's hand-over
//! connection, and a clean stop on SIGTERM. Runs as any user: the agent's
//! uid and gid are this process's own.

mod common;
use common::channel;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_csi::pb::csi::ProbeRequest;
use agentcomputer_csi::pb::csi::identity_client::IdentityClient;
use agentcomputer_csi::pb::registration::InfoRequest;
use agentcomputer_csi::pb::registration::registration_client::RegistrationClient;
use agentcomputer_handover::mounter::AgentEnd;

struct Mounter {
    child: Child,
}

impl Drop for Mounter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_for(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ready(csi: &Path) -> bool {
    IdentityClient::new(channel(csi.to_path_buf()).await)
        .probe(ProbeRequest {})
        .await
        .unwrap()
        .into_inner()
        .ready
        .unwrap()
}

#[tokio::test]
async fn the_binary_serves_its_sockets_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let csi = dir.path().join("plugins/agentcomputer.dev/csi.sock");
    let registry = dir.path().join("plugins_registry");
    let handover = dir.path().join("run/mounter.sock");
    let data = dir.path().join("data");
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    // A stale socket file from a "previous run" must not stop the start.
    std::fs::create_dir_all(&registry).unwrap();
    let reg_sock = registry.join("agentcomputer.dev-reg.sock");
    drop(std::os::unix::net::UnixListener::bind(&reg_sock).unwrap());
    let mut mounter = Mounter {
        child: Command::new(env!("CARGO_BIN_EXE_agentcomputer-mounter"))
            .args(["--node-name", "node-x"])
            .arg(format!("--csi-endpoint=unix://{}", csi.display()))
            .arg("--registration-dir")
            .arg(&registry)
            .env("AGENTCOMPUTER_HANDOVER_SOCKET", &handover)
            .env("AGENTCOMPUTER_AGENT_UID", uid.to_string())
            .env("AGENTCOMPUTER_AGENT_GID", gid.to_string())
            .env("AGENTCOMPUTER_DATA_DIR", &data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    };
    wait_for("sockets", async || {
        csi.exists() && handover.exists() && {
            // The stale registration socket is replaced by a live one.
            std::os::unix::net::UnixStream::connect(&reg_sock).is_ok()
        }
    })
    .await;

    let info = RegistrationClient::new(channel(reg_sock.clone()).await)
        .get_info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.endpoint, csi.display().to_string());
    for (path, mode) in [
        (&csi, 0o600),
        (&reg_sock, 0o600),
        (&handover, 0o600),
        (&data, 0o700),
    ] {
        let m = std::fs::metadata(path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, mode, "{}", path.display());
    }
    let run_dir = std::fs::metadata(handover.parent().unwrap()).unwrap();
    assert_eq!(
        (
            run_dir.uid(),
            run_dir.gid(),
            run_dir.permissions().mode() & 0o777
        ),
        (uid, gid, 0o700)
    );

    assert!(!ready(&csi).await, "ready with no agent");
    let agent = AgentEnd::connect(&handover).await.unwrap();
    wait_for("ready", async || ready(&csi).await).await;
    drop(agent);
    wait_for("not ready", async || !ready(&csi).await).await;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(mounter.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = mounter.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "mounter did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        !csi.exists() && !reg_sock.exists(),
        "sockets left after stop"
    );
}

#[test]
fn a_bad_endpoint_is_refused_with_a_clear_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentcomputer-mounter"))
        .args(["--node-name", "n", "--csi-endpoint", "tcp://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("expected unix:///absolute/path"),
        "{stderr}"
    );
}
