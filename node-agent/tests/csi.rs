//! The cluster node side end to end: the mounter (`agentcomputer_csi`,
//! in-process) serves CSI and kubelet registration on real unix sockets, the
//! agent's `fuse_link::run` serves the volumes over a real Registry, and the
//! test plays the kubelet with tonic clients. Mounts are real FUSE mounts.
//! Needs root and /dev/fuse (prints SKIPPED otherwise).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentcomputer_csi::mounter::{self, MounterConfig};
use agentcomputer_csi::mountinfo;
use agentcomputer_csi::pb::csi::identity_client::IdentityClient;
use agentcomputer_csi::pb::csi::node_client::NodeClient;
use agentcomputer_csi::pb::csi::volume_capability::access_mode::Mode;
use agentcomputer_csi::pb::csi::volume_capability::{
    AccessMode, AccessType, BlockVolume, MountVolume,
};
use agentcomputer_csi::pb::csi::{self as csi, node_service_capability, volume_usage};
use agentcomputer_csi::pb::registration as reg;
use agentcomputer_csi::pb::registration::registration_client::RegistrationClient;
use agentcomputer_egress::EgressConfig;
use agentcomputer_fs::{Limits, ROOT_INO, SetAttr};
use agentcomputer_handover::mounter::{AgentEnd, HandoverError, Reply, Request};
use agentcomputer_node_agent::cluster::fuse_link;
use agentcomputer_node_agent::registry::Registry;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};

/// The sandbox user of the tests' volumes.
const SANDBOX: u32 = 1000;

fn can_run() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent, the mounter cannot mount here");
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the mounter needs root (mount(2))");
        return false;
    }
    true
}

/// A mounter and (optionally) an agent on fresh directories.
struct Node {
    dir: tempfile::TempDir,
    config: MounterConfig,
    stop_mounter: Option<tokio::sync::oneshot::Sender<()>>,
    mounter: Option<JoinHandle<anyhow::Result<()>>>,
    registry: Registry,
    agent: Option<(CancellationToken, JoinHandle<()>)>,
}

impl Node {
    /// Starts a mounter accepting agents of uid `agent_uid`.
    async fn start(agent_uid: u32) -> Node {
        let dir = tempfile::tempdir().unwrap();
        // The sandbox user must reach the targets below it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = MounterConfig {
            node_name: "node-a".into(),
            csi_socket: dir.path().join("plugins/agentcomputer.dev/csi.sock"),
            registration_dir: dir.path().join("plugins_registry"),
            handover_socket: dir.path().join("run/mounter.sock"),
            agent_uid,
            agent_gid: 0,
            data_dir: dir.path().join("data"),
            agent_grace: agentcomputer_csi::grace::DEFAULT_AGENT_GRACE,
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mounter = tokio::spawn(mounter::run(config.clone(), async move {
            let _ = rx.await;
        }));
        wait_for(|| config.csi_socket.exists() && config.registration_socket().exists()).await;
        let data_mode = std::fs::metadata(&config.data_dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(data_mode & 0o777, 0o700, "data directory mode");
        let registry = Registry::new(&config.data_dir, Duration::from_secs(300)).unwrap();
        std::fs::create_dir_all(dir.path().join("pods")).unwrap();
        Node {
            dir,
            config,
            stop_mounter: Some(tx),
            mounter: Some(mounter),
            registry,
            agent: None,
        }
    }

    fn start_agent(&mut self) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(fuse_link::run(
            self.registry.clone(),
            self.config.handover_socket.clone(),
            stop.clone(),
        ));
        self.agent = Some((stop, task));
    }

    async fn stop_agent(&mut self) {
        let (stop, task) = self.agent.take().unwrap();
        stop.cancel();
        task.await.unwrap();
    }

    /// A kubelet-style target path (its parent exists, it does not).
    fn target(&self, pod: &str) -> PathBuf {
        let parent = self.dir.path().join("pods").join(pod);
        std::fs::create_dir_all(&parent).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        parent.join("mount")
    }

    async fn csi(&self) -> Channel {
        channel(self.config.csi_socket.clone()).await
    }

    /// Creates computer `name` whose root directory belongs to the sandbox user.
    async fn computer(&self, name: &str, max_bytes: u64) {
        let limits = Limits {
            max_bytes,
            ..Limits::default()
        };
        self.registry
            .create(name, limits, EgressConfig::default())
            .await
            .unwrap();
        let lease = self.registry.acquire(name).await.unwrap();
        let set = SetAttr {
            uid: Some(SANDBOX),
            gid: Some(SANDBOX),
            ..SetAttr::default()
        };
        lease.fs().setattr(ROOT_INO, &set).unwrap();
    }

    async fn shutdown(mut self) {
        if self.agent.is_some() {
            self.stop_agent().await;
        }
        let _ = self.stop_mounter.take().unwrap().send(());
        self.mounter.take().unwrap().await.unwrap().unwrap();
        assert!(!self.config.csi_socket.exists(), "CSI socket left behind");
    }
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gRPC channel over the unix socket at `path`.
async fn channel(path: PathBuf) -> Channel {
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .unwrap()
}

async fn probe(c: &Channel) -> bool {
    IdentityClient::new(c.clone())
        .probe(csi::ProbeRequest {})
        .await
        .unwrap()
        .into_inner()
        .ready
        .unwrap()
}

async fn wait_ready(c: &Channel, ready: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe(c).await != ready {
        assert!(Instant::now() < deadline, "Probe did not become {ready}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn publish_request(volume: &str, target: &Path, readonly: bool) -> csi::NodePublishVolumeRequest {
    let mut r = csi::NodePublishVolumeRequest {
        volume_id: volume.into(),
        target_path: target.display().to_string(),
        volume_capability: Some(csi::VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        readonly,
        ..Default::default()
    };
    r.volume_context
        .insert("agentcomputer.dev/namespace".into(), "team".into());
    r.volume_context
        .insert("agentcomputer.dev/name".into(), "box".into());
    r.volume_context
        .insert("agentcomputer.dev/uid".into(), SANDBOX.to_string());
    r.volume_context
        .insert("agentcomputer.dev/gid".into(), SANDBOX.to_string());
    r
}

async fn publish(c: &Channel, r: csi::NodePublishVolumeRequest) -> Result<(), tonic::Status> {
    NodeClient::new(c.clone())
        .node_publish_volume(r)
        .await
        .map(|_| ())
}

async fn unpublish(c: &Channel, volume: &str, target: &Path) -> Result<(), tonic::Status> {
    NodeClient::new(c.clone())
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: volume.into(),
            target_path: target.display().to_string(),
        })
        .await
        .map(|_| ())
}

fn mounts_at(p: &Path) -> usize {
    mountinfo::count_at(p).unwrap()
}

/// Runs `sh -c script` as the sandbox user; returns (success, stderr).
fn sh_as_sandbox(script: &str) -> (bool, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .uid(SANDBOX)
        .gid(SANDBOX)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubelet_registers_publishes_writes_reads_stats_and_unpublishes() {
    if !can_run() {
        return;
    }
    let mut node = Node::start(0).await;

    // Plugin registration, as the kubelet's plugin watcher does it.
    let reg_channel = channel(node.config.registration_socket()).await;
    let mut registration = RegistrationClient::new(reg_channel);
    let info = registration
        .get_info(reg::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, "agentcomputer.dev");
    assert_eq!(info.endpoint, node.config.csi_socket.display().to_string());
    assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
    for (ok, error) in [(true, ""), (false, "driver name taken")] {
        registration
            .notify_registration_status(reg::RegistrationStatus {
                plugin_registered: ok,
                error: error.into(),
            })
            .await
            .unwrap();
    }
    let sock_mode = std::fs::metadata(&node.config.csi_socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(sock_mode & 0o777, 0o600, "CSI socket mode");

    let c = node.csi().await;
    let plugin = IdentityClient::new(c.clone())
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plugin.name, "agentcomputer.dev");
    assert_eq!(plugin.vendor_version, env!("CARGO_PKG_VERSION"));
    assert!(!probe(&c).await, "ready before any agent connected");
    node.start_agent();
    wait_ready(&c, true).await;

    let mut nodes = NodeClient::new(c.clone());
    let info = nodes
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, "node-a");
    assert_eq!(info.max_volumes_per_node, 0);
    assert!(info.accessible_topology.is_none());
    let caps = nodes
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let rpc = node_service_capability::Rpc {
        r#type: node_service_capability::rpc::Type::GetVolumeStats as i32,
    };
    assert_eq!(
        caps,
        vec![csi::NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(rpc))
        }]
    );

    let vol = "0b6c3f9e-4a1d-4c55-9d7e-2f1a5b8c9d01";
    node.computer(vol, 64 << 20).await;
    let target = node.target("pod-1");
    publish(&c, publish_request(vol, &target, false))
        .await
        .unwrap();
    publish(&c, publish_request(vol, &target, false))
        .await
        .unwrap();
    assert_eq!(mounts_at(&target), 1, "publishing twice must mount once");
    let m = mountinfo::mount_at(&target).unwrap().unwrap();
    assert_eq!(m.fstype, "fuse.agentcomputer");
    assert_eq!(m.source, format!("agentcomputer:{vol}"));
    assert!(m.options.iter().any(|o| o == "nosuid") && m.options.iter().any(|o| o == "nodev"));
    assert_eq!(node.registry.connection_count(vol), 1);
    // The same target read-only is incompatible.
    let err = publish(&c, publish_request(vol, &target, true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{}", err.message());

    // The sandbox user writes through the mount; the engine has it.
    let (ok, stderr) = sh_as_sandbox(&format!("echo hi > {}/a", target.display()));
    assert!(ok, "echo as uid {SANDBOX} failed: {stderr}");
    let lease = node.registry.acquire(vol).await.unwrap();
    let a = lease.fs().lookup(ROOT_INO, b"a").unwrap();
    assert_eq!(lease.fs().read_all(a.ino).unwrap(), b"hi\n");
    assert_eq!((a.uid, a.gid), (SANDBOX, SANDBOX));
    // Written through the engine, read through the mount.
    lease
        .fs()
        .write_all(
            ROOT_INO,
            b"b",
            b"from the engine\n",
            agentcomputer_fs::WriteMode::Truncate,
            0o644,
            agentcomputer_fs::Owner {
                uid: SANDBOX,
                gid: SANDBOX,
            },
        )
        .unwrap();
    assert_eq!(
        std::fs::read(target.join("b")).unwrap(),
        b"from the engine\n"
    );

    // Stats are the engine's counters.
    let usage = nodes
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: vol.into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .usage;
    let st = lease.fs().statfs().unwrap();
    let bytes = usage
        .iter()
        .find(|u| u.unit == volume_usage::Unit::Bytes as i32)
        .unwrap();
    let inodes = usage
        .iter()
        .find(|u| u.unit == volume_usage::Unit::Inodes as i32)
        .unwrap();
    assert_eq!(bytes.total, 64 << 20);
    assert_eq!(bytes.used as u64, st.used_bytes);
    assert_eq!(bytes.available as u64, (64u64 << 20) - st.used_bytes);
    assert!(st.used_bytes >= 3 + 16);
    assert_eq!(inodes.total as u64, st.files);
    assert_eq!(inodes.used as u64, st.used_inodes);
    assert_eq!(inodes.available as u64, st.files_free);
    drop(lease);

    // Concurrent publishes of one volume at one target: serialised, one mount.
    let race = node.target("pod-race");
    let (r1, r2) = tokio::join!(
        publish(&c, publish_request(vol, &race, false)),
        publish(&c, publish_request(vol, &race, false))
    );
    r1.unwrap();
    r2.unwrap();
    assert_eq!(mounts_at(&race), 1, "concurrent publishes mounted twice");
    unpublish(&c, vol, &race).await.unwrap();

    // A second, read-only publish of the same volume.
    let ro_target = node.target("pod-ro");
    publish(&c, publish_request(vol, &ro_target, true))
        .await
        .unwrap();
    assert!(
        mountinfo::mount_at(&ro_target)
            .unwrap()
            .unwrap()
            .read_only()
    );
    assert_eq!(std::fs::read(ro_target.join("a")).unwrap(), b"hi\n");
    let err = std::fs::write(ro_target.join("c"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(nix::errno::Errno::EROFS as i32));
    unpublish(&c, vol, &ro_target).await.unwrap();

    // Unpublish: no mount left, target removed, connection gone; twice is fine.
    unpublish(&c, vol, &target).await.unwrap();
    assert_eq!(mounts_at(&target), 0);
    assert!(!target.exists(), "target directory left behind");
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.registry.connection_count(vol) != 0 {
        assert!(
            Instant::now() < deadline,
            "connection still attached after unpublish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unpublish(&c, vol, &target).await.unwrap();
    let err = nodes
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: vol.into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_volumes_and_a_missing_agent_leave_no_mount() {
    if !can_run() {
        return;
    }
    let mut node = Node::start(0).await;
    let c = node.csi().await;
    let vol = "vol-known";
    node.computer(vol, 1 << 20).await;

    // No agent yet.
    let target = node.target("pod-early");
    let err = publish(&c, publish_request(vol, &target, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert!(
        err.message().contains("node agent not connected"),
        "{}",
        err.message()
    );
    assert_eq!(mounts_at(&target), 0);

    node.start_agent();
    wait_ready(&c, true).await;
    let target = node.target("pod-unknown");
    let err = publish(&c, publish_request("vol-unknown", &target, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    assert_eq!(mounts_at(&target), 0);
    assert!(!target.exists());

    // The agent goes away: Probe turns false, publishing is unavailable.
    node.stop_agent().await;
    wait_ready(&c, false).await;
    let target = node.target("pod-late");
    let err = publish(&c, publish_request(vol, &target, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert_eq!(mounts_at(&target), 0);

    // It comes back (the link reconnects) and publishing works again.
    node.start_agent();
    wait_ready(&c, true).await;
    publish(&c, publish_request(vol, &target, false))
        .await
        .unwrap();
    assert_eq!(mounts_at(&target), 1);
    unpublish(&c, vol, &target).await.unwrap();
    assert_eq!(mounts_at(&target), 0);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_their_csi_codes() {
    if !can_run() {
        return;
    }
    let mut node = Node::start(0).await;
    node.start_agent();
    let c = node.csi().await;
    wait_ready(&c, true).await;
    let vol = "vol-bad";
    node.computer(vol, 1 << 20).await;
    let target = node.target("pod-bad");

    let good = || publish_request(vol, &target, false);
    let mut cases: Vec<(&str, csi::NodePublishVolumeRequest)> = Vec::new();
    let mut r = good();
    r.volume_id.clear();
    cases.push(("no volume id", r));
    let mut r = good();
    r.target_path.clear();
    cases.push(("no target", r));
    let mut r = good();
    r.volume_capability = None;
    cases.push(("no capability", r));
    let mut r = good();
    r.volume_capability.as_mut().unwrap().access_type = Some(AccessType::Block(BlockVolume {}));
    cases.push(("block", r));
    let mut r = good();
    r.volume_capability.as_mut().unwrap().access_mode = Some(AccessMode {
        mode: Mode::MultiNodeMultiWriter as i32,
    });
    cases.push(("multi-node", r));
    let mut r = good();
    r.volume_context
        .insert("agentcomputer.dev/uid".into(), "sandbox".into());
    cases.push(("non-numeric uid", r));
    for (what, r) in cases {
        let err = publish(&c, r).await.unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{what}: {}",
            err.message()
        );
    }
    assert_eq!(mounts_at(&target), 0);
    assert!(!target.exists());

    let mut nodes = NodeClient::new(c.clone());
    let err = unpublish(&c, "", &target).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = nodes
        .node_stage_volume(csi::NodeStageVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let err = nodes
        .node_expand_volume(csi::NodeExpandVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let err = nodes
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: vol.into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "stats of an unpublished path");
    // Unpublishing what was never published is a success.
    unpublish(&c, vol, &target).await.unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_handover_socket_refuses_a_peer_with_another_uid() {
    if !can_run() {
        return;
    }
    // The mounter expects the agent as uid 4242; this process is root.
    let node = Node::start(4242).await;
    let c = node.csi().await;
    let meta = std::fs::metadata(&node.config.handover_socket).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 4242);
    match AgentEnd::connect(&node.config.handover_socket).await {
        Err(HandoverError::Refused(message)) => {
            assert!(
                message.contains("uid 0") && message.contains("4242"),
                "{message}"
            );
        }
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("a peer with the wrong uid was accepted"),
    }
    assert!(!probe(&c).await, "a refused peer made the plugin ready");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serve_the_agent_fails_is_unmounted() {
    if !can_run() {
        return;
    }
    let node = Node::start(0).await;
    let c = node.csi().await;
    // An agent that knows every volume but fails to serve any.
    let end = AgentEnd::connect(&node.config.handover_socket)
        .await
        .unwrap();
    let agent = tokio::spawn(async move {
        let mut served = 0;
        while let Ok(Some(incoming)) = end.next().await {
            let reply = match incoming.request {
                Request::Check { .. } => Reply::Known,
                Request::Serve { .. } => {
                    assert!(incoming.fd.is_some(), "serve without a descriptor");
                    served += 1;
                    Reply::Error {
                        message: "engine exploded".into(),
                    }
                }
                Request::Stats { .. } | Request::Resume { .. } | Request::Give { .. } => {
                    Reply::NotFound
                }
            };
            end.reply(incoming.id, reply, None).await.unwrap();
        }
        served
    });
    wait_ready(&c, true).await;
    let target = node.target("pod-fail");
    let err = publish(&c, publish_request("vol-x", &target, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{}", err.message());
    assert!(
        err.message().contains("engine exploded"),
        "{}",
        err.message()
    );
    assert_eq!(mounts_at(&target), 0, "a failed serve left a mount");
    assert!(
        !target.exists(),
        "a failed publish left the target it created"
    );
    node.shutdown().await;
    assert_eq!(agent.await.unwrap(), 1);
}
