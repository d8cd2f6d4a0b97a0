//! `node-agent cluster` against a real kube-apiserver and etcd (started by
//! the operator's test support), running as the node agent's service
//! account under the RBAC docs/cluster.md lists, with real gRPC clients.

mod cluster_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use cluster_support::support::{self, Cluster, Proc, SYSTEM_NS, eventually};
use cluster_support::*;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use pb::exec_event::Event;
use sha2::{Digest, Sha256};
use tonic::Code;
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_agent_in_a_cluster() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;

    let data = cluster.dir.path().join("node-data");
    let agent = Agent::start(&cluster, &data, "node-agent-1.log").await;

    // Capacity: published before ready, by the formula (no computers yet:
    // the free space of the data directory's filesystem, which other work
    // on this machine changes a little meanwhile).
    let (empty_room, cap) = published_capacity(&admin)
        .await
        .expect("capacity published");
    let free = available(&data);
    assert!(
        empty_room.abs_diff(free) < 2 << 30,
        "capacity {empty_room} vs free {free}"
    );
    assert_eq!(cap.storage_class_name, "agentcomputer");
    assert_eq!(cap.maximum_volume_size, cap.capacity);
    let labels = cap.metadata.labels.clone().unwrap();
    assert_eq!(labels["agentcomputer.dev/node"], NODE);
    let topology = cap.node_topology.clone().unwrap().match_labels.unwrap();
    assert_eq!(topology["kubernetes.io/hostname"], NODE);

    // Computers: two on n1 (same name in two namespaces), one on n2.
    let (ta, tb, tc) = (token("a"), token("b"), token("c"));
    let uid_a = computer(
        &admin,
        NS_A,
        "demo",
        NODE,
        serde_json::json!({"storage": {"size": "2Mi"}}),
        &ta,
    )
    .await;
    let uid_b = computer(
        &admin,
        NS_B,
        "demo",
        NODE,
        serde_json::json!({"storage": {"size": "1Gi", "reclaimPolicy": "Retain"},
                           "runtimes": {"javascript": false},
                           "limits": {"timeoutSeconds": 2, "outputBytes": 1024}}),
        &tb,
    )
    .await;
    let uid_c = computer(
        &admin,
        NS_A,
        "elsewhere",
        "n2",
        serde_json::json!({"storage": {"size": "1Mi"}}),
        &tc,
    )
    .await;
    let db = |uid: &str| data.join("computers").join(uid).join("fs.db");
    for uid in [&uid_a, &uid_b] {
        let path = db(uid);
        eventually(20, "the computer's database", || {
            let exists = path.exists();
            async move { exists.then_some(()) }
        })
        .await;
    }
    assert!(
        !data.join("computers").join(&uid_c).exists(),
        "a computer of n2 got a database on n1"
    );

    // The quotas are taken off the published room: 2 MiB + 1 GiB.
    let quotas = (2u64 << 20) + (1 << 30);
    eventually(20, "capacity minus the new quotas", || {
        let admin = admin.clone();
        async move {
            let (room, _) = published_capacity(&admin).await?;
            let expected = empty_room.saturating_sub(quotas);
            (room.abs_diff(expected) < 256 << 20 && room < empty_room - (512 << 20)).then_some(())
        }
    })
    .await;

    // Credentials.
    let mut a = agent.client(Some(&ta)).await;
    write(&mut a, "team-a/demo", "hello.txt", b"hi")
        .await
        .expect("right token writes");
    let got = a
        .get_computer(pb::GetComputerRequest {
            name: uid_a.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.name, "team-a/demo");
    assert_eq!(got.max_bytes, 2 << 20);
    assert_eq!(got.max_inodes, 1024);
    assert_eq!(stat(&mut a, &uid_a, "hello.txt").await.unwrap().size, 2);
    let mut none = agent.client(None).await;
    let mut wrong = agent.client(Some(&token("nobody"))).await;
    let mut other = agent.client(Some(&tb)).await;
    assert_eq!(
        code_of(write(&mut none, "team-a/demo", "x.txt", b"x").await).0,
        Code::Unauthenticated
    );
    assert_eq!(
        code_of(write(&mut wrong, "team-a/demo", "x.txt", b"x").await).0,
        Code::Unauthenticated
    );
    // Another tenant's computer is answered as one that does not exist.
    let (code, msg) = code_of(write(&mut other, "team-a/demo", "x.txt", b"x").await);
    assert_eq!(code, Code::NotFound);
    assert_eq!(
        msg,
        "computer \"team-a/demo\" not found on this node for this credential"
    );
    assert_eq!(
        code_of(exec(&mut other, &uid_a, pb::Runtime::Shell, "echo x > y.txt").await).0,
        Code::NotFound
    );
    assert_eq!(
        code_of(stat(&mut a, &uid_a, "x.txt").await).0,
        Code::NotFound,
        "a refused write changed nothing"
    );
    assert_eq!(
        code_of(stat(&mut a, &uid_a, "y.txt").await).0,
        Code::NotFound,
        "a refused exec changed nothing"
    );
    // A name two namespaces share means the token's own computer.
    assert_eq!(stat(&mut a, "demo", "hello.txt").await.unwrap().size, 2);
    let (code, msg) = code_of(stat(&mut a, "team-a/elsewhere", "/").await);
    assert_eq!(
        code,
        Code::NotFound,
        "a computer of another node is not served here: {msg}"
    );
    let (code, msg) = code_of(
        a.create_computer(pb::CreateComputerRequest {
            name: "x".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(code, Code::FailedPrecondition);
    assert!(msg.contains("kubectl computer create"), "{msg}");

    // Runtimes: team-b/demo has JavaScript off.
    let (code, msg) = code_of(
        exec(
            &mut other,
            "team-b/demo",
            pb::Runtime::Javascript,
            "export default () => 1",
        )
        .await,
    );
    assert_eq!(code, Code::FailedPrecondition);
    assert_eq!(
        msg,
        "runtime javascript is disabled for this computer (spec.runtimes.javascript)"
    );
    // Exec limits: the computer's are the default and the maximum.
    let noisy = "for i in $(seq 1 200); do echo 0123456789; done";
    for asked in [0, 1 << 20] {
        let (out, exit) = run(
            &mut other,
            pb::ExecRequest {
                computer: "team-b/demo".into(),
                script: noisy.into(),
                max_output_bytes: asked,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(
            out.len() <= 1024 && !exit.error.is_empty(),
            "asked {asked}: {} bytes, {exit:?}",
            out.len()
        );
    }
    let started = std::time::Instant::now();
    let (_, exit) = run(
        &mut other,
        pb::ExecRequest {
            computer: "team-b/demo".into(),
            script: "sleep 30".into(),
            timeout_ms: 60_000,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(!exit.error.is_empty(), "{exit:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cut to spec.limits.timeoutSeconds"
    );
    let (out, code) = exec(&mut other, "team-b/demo", pb::Runtime::Shell, "echo hello")
        .await
        .unwrap();
    assert_eq!((out.as_str(), code), ("hello\n", 0));
    let (out, code) = exec(
        &mut a,
        "team-a/demo",
        pb::Runtime::Javascript,
        "export default () => { console.log('js'); return 1 }",
    )
    .await
    .unwrap();
    assert_eq!((out.as_str(), code), ("js\n", 0));

    // Usage: 1 MB written shows in status.volume.bytesUsed, and the
    // database's real size on the node's disk in diskBytes.
    let megabyte = vec![7u8; 1_000_000];
    write(&mut a, &uid_a, "one-mb.bin", &megabyte)
        .await
        .unwrap();
    let computers_a: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    let used = eventually(20, "status.volume.bytesUsed", || {
        let api = computers_a.clone();
        async move {
            let c = api.get("demo").await.ok()?;
            let v = c.status?.volume?;
            let used = v.bytes_used?;
            (used >= 1_000_000 && v.inodes_used? >= 3).then_some((used, v.disk_bytes?))
        }
    })
    .await;
    let (used, disk) = used;
    assert!(used < 1_000_000 + 64 * 1024, "bytesUsed {used}");
    // The database holds the megabyte; within the host-disk bound of a
    // 2 MiB quota (1.25 x quota + 64 MiB, docs/isolation.md).
    assert!(
        (1_000_000..=(5 << 19) + (64 << 20)).contains(&disk),
        "diskBytes {disk}"
    );
    let managers = computers_a
        .get("demo")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap();
    assert!(
        managers
            .iter()
            .any(|m| m.manager.as_deref() == Some("agentcomputer-node-agent")
                && m.subresource.as_deref() == Some("status")),
        "status written under the agent's field manager"
    );

    // Quota growth without restart.
    let more = vec![8u8; 1_500_000];
    let (code, _) = code_of(write(&mut a, &uid_a, "more.bin", &more).await);
    assert_eq!(code, Code::ResourceExhausted, "past the 2 MiB quota");
    computers_a
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"storage": {"size": "4Mi"}}})),
        )
        .await
        .unwrap();
    eventually(20, "the grown quota to admit the write", || {
        let mut a = a.clone();
        let more = more.clone();
        let uid = uid_a.clone();
        async move { write(&mut a, &uid, "more.bin", &more).await.ok() }
    })
    .await;
    assert_eq!(
        stat(&mut a, &uid_a, "one-mb.bin").await.unwrap().size,
        1_000_000
    );

    // Last activity.
    let stamp = eventually(20, "last-activity annotation", || {
        let api = computers_a.clone();
        async move {
            let c = api.get("demo").await.ok()?;
            c.metadata
                .annotations?
                .get("agentcomputer.dev/last-activity")
                .cloned()
        }
    })
    .await;
    let when: k8s_openapi::jiff::Timestamp = stamp.parse().expect("RFC 3339");
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(when);
    assert!(age.as_secs() < 120, "last activity {stamp}");

    // Rotation: a new hash revokes the old token within seconds.
    let ta2 = token("a2");
    set_hash(&admin, NS_A, "demo", &ta2).await;
    eventually(10, "the old token refused", || {
        let mut a = a.clone();
        let uid = uid_a.clone();
        async move {
            (stat(&mut a, &uid, "hello.txt").await.err()?.code() == Code::Unauthenticated)
                .then_some(())
        }
    })
    .await;
    let mut a2 = agent.client(Some(&ta2)).await;
    assert_eq!(
        stat(&mut a2, "team-a/demo", "hello.txt")
            .await
            .unwrap()
            .size,
        2
    );

    // Metrics and probes.
    let (code, text) = get(&format!("{}/metrics", agent.http)).await;
    assert_eq!(code, 200);
    for family in [
        "agentcomputer_node_execs_total",
        "agentcomputer_node_exec_duration_seconds_bucket",
        "agentcomputer_node_computers",
        "agentcomputer_node_stored_bytes",
        "agentcomputer_node_stored_inodes",
        "agentcomputer_node_fuse_connections",
        "agentcomputer_node_credential_refusals_total",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    assert!(
        text.contains(r#"agentcomputer_node_execs_total{outcome="success",runtime="shell"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"agentcomputer_node_execs_total{outcome="rejected",runtime="javascript"} 1"#
        ),
        "{text}"
    );
    let refused = text
        .lines()
        .find(|l| {
            l.starts_with(r#"agentcomputer_node_credential_refusals_total{code="UNAUTHENTICATED"}"#)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap();
    assert!(refused >= 3, "{text}");
    // Hibernation: unused computers close after the idle timeout (2 s
    // here) and reopen on the next call.
    let gauge = |text: &str, state: &str| -> Option<u64> {
        let prefix = format!("agentcomputer_node_computers{{state=\"{state}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
    };
    let metrics_url = format!("{}/metrics", agent.http);
    eventually(20, "idle computers hibernated", || {
        let url = metrics_url.clone();
        async move {
            let text = get(&url).await.1;
            (gauge(&text, "open")? == 0 && gauge(&text, "hibernated")? == 2).then_some(())
        }
    })
    .await;
    assert_eq!(
        stat(&mut a2, "team-a/demo", "one-mb.bin")
            .await
            .unwrap()
            .size,
        1_000_000
    );
    assert_eq!(
        gauge(&get(&metrics_url).await.1, "open"),
        Some(1),
        "reopened on demand"
    );
    assert_eq!(get(&format!("{}/healthz", agent.http)).await.0, 200);
    assert_eq!(
        get(&format!("{}/readyz", agent.http)).await,
        (200, "ok\n".to_string())
    );

    // Deletion: Delete (annotated PV deleted) removes the data, Retain keeps it.
    delete_volume(&admin, &uid_a, true).await;
    delete_volume(&admin, &uid_b, false).await;
    for uid in [&uid_a, &uid_b] {
        eventually(20, "the node-data finalizer removed", || {
            let admin = admin.clone();
            let uid = uid.clone();
            async move { finalizer_removed(&admin, &uid).await.then_some(()) }
        })
        .await;
    }
    assert!(
        !data.join("computers").join(&uid_a).exists(),
        "Delete removes the database"
    );
    assert!(db(&uid_b).exists(), "Retain keeps the database");

    // A deletion decided while the agent is down is carried out at start.
    let td = token("d");
    let uid_d = computer(
        &admin,
        NS_A,
        "later",
        NODE,
        serde_json::json!({"storage": {"size": "1Mi"}}),
        &td,
    )
    .await;
    let path = db(&uid_d);
    eventually(20, "the database of team-a/later", || {
        let exists = path.exists();
        async move { exists.then_some(()) }
    })
    .await;
    agent.stop().await;
    // As the operator does under Delete: the computer goes, then its volume.
    let later: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    later
        .delete("later", &DeleteParams::default())
        .await
        .unwrap();
    delete_volume(&admin, &uid_d, true).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        db(&uid_d).exists(),
        "nothing deletes data while the agent is down"
    );
    assert!(!finalizer_removed(&admin, &uid_d).await);
    let agent = Agent::start(&cluster, &data, "node-agent-2.log").await;
    eventually(20, "the deletion done at start", || {
        let admin = admin.clone();
        let uid = uid_d.clone();
        async move { finalizer_removed(&admin, &uid).await.then_some(()) }
    })
    .await;
    assert!(!data.join("computers").join(&uid_d).exists());
    assert!(db(&uid_b).exists(), "a restart deletes nothing else");

    // A quota larger than the disk leaves no room at all.
    computer(
        &admin,
        NS_B,
        "huge",
        NODE,
        serde_json::json!({"storage": {"size": "1Ei"}}),
        &token("h"),
    )
    .await;
    eventually(20, "capacity 0", || {
        let admin = admin.clone();
        async move { (published_capacity(&admin).await?.0 == 0).then_some(()) }
    })
    .await;

    // SIGTERM lets a running exec finish within the grace period.
    let mut b = agent.client(Some(&tb)).await;
    let mut stream = b
        .exec(pb::ExecRequest {
            computer: "team-b/demo".into(),
            script: "sleep 1; echo finished".into(),
            ..Default::default()
        })
        .await
        .expect("exec started")
        .into_inner();
    let stopping = tokio::spawn(agent.stop());
    let mut out = String::new();
    let mut exit = None;
    while let Some(ev) = stream
        .message()
        .await
        .expect("exec stream survives SIGTERM")
    {
        match ev.event.unwrap() {
            Event::Stdout(b) => out.push_str(&String::from_utf8_lossy(&b)),
            Event::Stderr(_) => {}
            Event::Exit(e) => exit = Some(e.code),
        }
    }
    assert_eq!((out.as_str(), exit), ("finished\n", Some(0)));
    stopping.await.unwrap();
    assert!(db(&uid_b).exists());
}

/// The whole node side: the real `node-agent cluster` binary serves a
/// computer placed on its node, the mounter (its library, in this process,
/// as root) publishes the computer's volume to a test acting as the
/// kubelet, the sandbox user writes at the volume's root through the
/// target, and an exec through the agent reads the file back. Also: Mount
/// over gRPC is refused in a cluster, and another computer's token reads
/// nothing. Needs root and /dev/fuse (prints SKIPPED otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_volume_is_served_by_the_cluster_agent() {
    use agentcomputer_csi::mounter::{self, MounterConfig};
    use agentcomputer_csi::pb::csi;
    use agentcomputer_csi::pb::csi::node_client::NodeClient;
    use agentcomputer_csi::pb::csi::volume_capability::access_mode::Mode;
    use agentcomputer_csi::pb::csi::volume_capability::{AccessMode, AccessType, MountVolume};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    if support::skipped() {
        return;
    }
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: publishing a volume needs root and /dev/fuse");
        return;
    }
    const SANDBOX: u32 = 1000;
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let kubelet = tempfile::tempdir().unwrap();
    // The sandbox user must reach the target below it.
    std::fs::set_permissions(kubelet.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = MounterConfig {
        node_name: NODE.into(),
        csi_socket: kubelet.path().join("plugins/agentcomputer.dev/csi.sock"),
        registration_dir: kubelet.path().join("plugins_registry"),
        // Where Agent::start points the agent.
        handover_socket: cluster.dir.path().join("mounter.sock"),
        agent_uid: nix::unistd::geteuid().as_raw(),
        agent_gid: nix::unistd::getegid().as_raw(),
        data_dir: data.clone(),
        agent_grace: agentcomputer_csi::grace::DEFAULT_AGENT_GRACE,
    };
    let (stop_mounter, stopped) = tokio::sync::oneshot::channel::<()>();
    let mounter = tokio::spawn(mounter::run(config.clone(), async move {
        let _ = stopped.await;
    }));
    eventually(10, "the mounter's CSI socket", || {
        let up = config.csi_socket.exists().then_some(());
        async move { up }
    })
    .await;
    let agent = Agent::start(&cluster, &data, "node-agent-volume.log").await;

    let (tb, to) = (token("basic"), token("other"));
    let uid = computer(
        &admin,
        NS_A,
        "basic",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}, "runtimes": {"container": true},
                           "sandbox": {"image": "debian:bookworm-slim"}}),
        &tb,
    )
    .await;
    let other = computer(
        &admin,
        NS_A,
        "other",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &to,
    )
    .await;
    let db = data.join("computers").join(&uid).join("fs.db");
    eventually(30, "the computer's database", || {
        let made = db.exists().then_some(());
        async move { made }
    })
    .await;
    let mut c = agent.client(Some(&tb)).await;
    eventually(30, "the computer's credential on the agent", || {
        let mut c = c.clone();
        async move { stat(&mut c, "basic", "/workspace").await.ok() }
    })
    .await;
    // The other computer's credential too: until the agent has seen it, its
    // token is unknown (UNAUTHENTICATED) rather than someone else's.
    let o = agent.client(Some(&to)).await;
    eventually(30, "the other computer's credential on the agent", || {
        let mut o = o.clone();
        let other = other.clone();
        async move { stat(&mut o, &other, "/workspace").await.ok() }
    })
    .await;

    // Host mounts are the CSI driver's job in a cluster.
    let host = kubelet.path().join("host-mount");
    std::fs::create_dir_all(&host).unwrap();
    let refused = c
        .mount(pb::MountRequest {
            computer: "basic".into(),
            host_path: host.display().to_string(),
            nonempty: false,
        })
        .await;
    let (code, message) = code_of(refused);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains("CSI driver"), "{message}");
    let refused = c
        .unmount(pb::UnmountRequest {
            computer: "basic".into(),
            host_path: host.display().to_string(),
        })
        .await;
    assert_eq!(code_of(refused).0, Code::FailedPrecondition);

    // The kubelet publishes the volume at a pod's target path.
    let pod = kubelet.path().join("pods/p1/volumes");
    std::fs::create_dir_all(&pod).unwrap();
    for dir in [
        kubelet.path().join("pods"),
        kubelet.path().join("pods/p1"),
        pod.clone(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let target = pod.join("mount");
    let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn({
            let path = config.csi_socket.clone();
            move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }
        }))
        .await
        .unwrap();
    let mut node = NodeClient::new(channel);
    let mut attributes = std::collections::HashMap::new();
    for (k, v) in [
        ("agentcomputer.dev/namespace", NS_A.to_string()),
        ("agentcomputer.dev/name", "basic".to_string()),
        ("agentcomputer.dev/uid", SANDBOX.to_string()),
        ("agentcomputer.dev/gid", SANDBOX.to_string()),
    ] {
        attributes.insert(k.to_string(), v);
    }
    let publish = csi::NodePublishVolumeRequest {
        volume_id: uid.clone(),
        target_path: target.display().to_string(),
        volume_capability: Some(csi::VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        volume_context: attributes,
        ..Default::default()
    };
    node.node_publish_volume(publish).await.unwrap();

    // The sandbox user writes at the volume's root (the computer's root
    // directory is theirs) ...
    let out = Command::new("sh")
        .arg("-c")
        .arg("echo hi > \"$1/a\"")
        .arg("sh")
        .arg(&target)
        .uid(SANDBOX)
        .gid(SANDBOX)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "write as the sandbox user: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... and an exec through the agent reads it back.
    let (stdout, exit) = exec(&mut c, "basic", pb::Runtime::Shell, "cat /workspace/a")
        .await
        .unwrap();
    assert_eq!((stdout.as_str(), exit), ("hi\n", 0));
    let info = stat(&mut c, "basic", "/workspace/a").await.unwrap();
    assert_eq!(info.size, 3);

    // Another computer's token reads and writes nothing of it.
    let mut o = o;
    let (code, _) =
        code_of(exec(&mut o, "basic", pb::Runtime::Shell, "echo x > /workspace/a").await);
    assert_eq!(code, Code::NotFound);
    let (code, _) = code_of(exec(&mut o, &uid, pb::Runtime::Shell, "cat /workspace/a").await);
    assert_eq!(code, Code::NotFound);
    let (stdout, _) = exec(&mut c, "basic", pb::Runtime::Shell, "cat /workspace/a")
        .await
        .unwrap();
    assert_eq!(stdout, "hi\n");
    let (stdout, _) = exec(&mut o, &other, pb::Runtime::Shell, "ls /workspace")
        .await
        .unwrap();
    assert_eq!(stdout, "");

    // The container runtime on the published volume, as in a sandbox pod:
    // the runner as the sandbox user, its workspace the FUSE mount. Files
    // are shared with the in-process runtimes at once, both ways.
    let agent_addr = agent.grpc.strip_prefix("http://").unwrap().to_string();
    let mut runner = Proc::spawn(
        "agentcomputer-runner",
        Command::new(runner_exe())
            .args(["serve", "--workspace"])
            .arg(&target)
            .env("AGENTCOMPUTER_AGENT", &agent_addr)
            .env("AGENTCOMPUTER_COMPUTER", &uid)
            .env("AGENTCOMPUTER_TOKEN", &tb)
            .uid(SANDBOX)
            .gid(SANDBOX),
        cluster.dir.path().join("runner-volume.log"),
    );
    let (stdout, code) = eventually(20, "the runner attached", || {
        let mut c = c.clone();
        async move {
            exec(
                &mut c,
                "basic",
                pb::Runtime::Container,
                "id -u; cat a; echo from-container > c.txt",
            )
            .await
            .ok()
        }
    })
    .await;
    assert_eq!((stdout.as_str(), code), ("1000\nhi\n", 0));
    let (stdout, _) = exec(&mut c, "basic", pb::Runtime::Shell, "cat /workspace/c.txt")
        .await
        .unwrap();
    assert_eq!(stdout, "from-container\n");
    let (stdout, _) = exec(
        &mut c,
        "basic",
        pb::Runtime::Javascript,
        "import { readFileSync } from 'node:fs'; console.log(readFileSync('/workspace/c.txt', 'utf8').trim())",
    )
    .await
    .unwrap();
    assert_eq!(stdout, "from-container\n");
    exec(
        &mut c,
        "basic",
        pb::Runtime::Shell,
        "echo from-shell > /workspace/s.txt",
    )
    .await
    .unwrap();
    let (stdout, code) = exec(
        &mut c,
        "basic",
        pb::Runtime::Container,
        "cat s.txt; stat -c %u c.txt",
    )
    .await
    .unwrap();
    assert_eq!((stdout.as_str(), code), ("from-shell\n1000\n", 0));
    runner.kill();

    // The agent is killed (SIGKILL) and started again while a sandbox
    // process appends and fsyncs records through the mount: the mounter
    // hands the live connection to the new process, which takes it over;
    // the writer sees no error and no fsynced record is lost (a write not
    // yet fsynced may be, docs/durability.md).
    let writer = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "i=0; while [ ! -e \"$1/stop\" ] && [ $i -lt 3000 ]; do \
               echo $i >> \"$1/log\" && sync \"$1/log\" || exit 1; i=$((i+1)); sleep 0.01; done",
        )
        .arg("sh")
        .arg(&target)
        .uid(SANDBOX)
        .gid(SANDBOX)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = |target: &Path| {
        std::fs::read_to_string(target.join("log"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    eventually(20, "the writer's first records", || {
        let n = lines(&target);
        async move { (n > 5).then_some(()) }
    })
    .await;
    let mut agent = agent;
    agent.proc.kill();
    let killed = std::time::Instant::now();
    let agent = Agent::start(&cluster, &data, "node-agent-volume-2.log").await;
    let count_at_restart = {
        // A read through the mount waits for the new server, then works.
        let out = Command::new("cat").arg(target.join("a")).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        lines(&target)
    };
    eventually(30, "the writer going on after the restart", || {
        let n = lines(&target);
        async move { (n > count_at_restart + 5).then_some(()) }
    })
    .await;
    eprintln!(
        "agent killed and restarted; the mount answered again after {:?}",
        killed.elapsed()
    );
    std::fs::write(target.join("stop"), b"").unwrap_or_else(|e| {
        // Root writes at the volume root are refused only if the mount is gone.
        panic!("writing the stop file through the mount: {e}")
    });
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the writer saw an error across the restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(target.join("log")).unwrap();
    let numbers: Vec<usize> = log.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(
        numbers,
        (0..numbers.len()).collect::<Vec<_>>(),
        "records in order, none lost"
    );
    let mut c = agent.client(Some(&tb)).await;
    let (stdout, _) = exec(
        &mut c,
        "basic",
        pb::Runtime::Shell,
        "wc -l < /workspace/log",
    )
    .await
    .unwrap();
    assert_eq!(
        stdout.trim(),
        numbers.len().to_string(),
        "the engine holds what the mount showed"
    );

    // A file a sandbox process holds unlinked while open survives a
    // restart in which an API call reaches the new agent before the
    // mounter's `resume`: that call's open keeps the orphan, which the
    // resumed connection then serves. The agent is kept off the mounter
    // by moving the hand-over socket away until the call is done.
    let mut held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(target.join("held"))
        .unwrap();
    std::io::Write::write_all(&mut held, b"unlinked but open\n").unwrap();
    held.sync_all().unwrap();
    std::fs::remove_file(target.join("held")).unwrap();
    let socket = cluster.dir.path().join("mounter.sock");
    let away = cluster.dir.path().join("mounter.sock.away");
    std::fs::rename(&socket, &away).unwrap();
    let mut agent = agent;
    agent.proc.kill();
    let agent = Agent::start(&cluster, &data, "node-agent-volume-3.log").await;
    let c = agent.client(Some(&tb)).await;
    eventually(30, "an API call on the agent before the resume", || {
        let mut c = c.clone();
        async move { stat(&mut c, "basic", "/workspace/a").await.ok() }
    })
    .await;
    std::fs::rename(&away, &socket).unwrap();
    // A read through the mount waits for the resume, then works.
    let out = Command::new("cat").arg(target.join("a")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    // Writes go to the server (no writeback cache): the orphan is there.
    std::io::Write::write_all(&mut held, b"and more\n")
        .unwrap_or_else(|e| panic!("write to the file held unlinked: {e}"));
    held.sync_all()
        .unwrap_or_else(|e| panic!("fsync of the file held unlinked: {e}"));
    held.set_len(4)
        .unwrap_or_else(|e| panic!("truncate of the file held unlinked: {e}"));
    let mut text = String::new();
    std::io::Seek::seek(&mut held, std::io::SeekFrom::Start(0)).unwrap();
    std::io::Read::read_to_string(&mut held, &mut text).unwrap();
    assert_eq!(text, "unli");
    drop(held);

    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: uid.clone(),
        target_path: target.display().to_string(),
    })
    .await
    .unwrap();
    assert_eq!(agentcomputer_csi::mountinfo::count_at(&target).unwrap(), 0);
    agent.stop().await;
    let _ = stop_mounter.send(());
    mounter.await.unwrap().unwrap();
}

/// The kubelet's CSI Node client on the mounter's socket `path`.
async fn csi_node(
    path: &Path,
) -> agentcomputer_csi::pb::csi::node_client::NodeClient<tonic::transport::Channel> {
    let path = path.to_path_buf();
    let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .unwrap();
    agentcomputer_csi::pb::csi::node_client::NodeClient::new(channel)
}

/// An upgrade rolls the mounter and then the agent: the mounter is stopped
/// and started again (its table of descriptors is gone) while a sandbox
/// process appends and fsyncs records through a published volume; the
/// agent hands the connection back to the new mounter (`give`/`adopt`);
/// then the agent is killed (SIGKILL) and started again, and the new
/// mounter resumes the connection to the new agent process. The writer
/// sees no error and no fsynced record is lost. Needs root and /dev/fuse
/// (prints SKIPPED otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_mounter_takes_the_connections_back_from_the_agent() {
    use agentcomputer_csi::mounter::{self, MounterConfig};
    use agentcomputer_csi::pb::csi;
    use agentcomputer_csi::pb::csi::volume_capability::access_mode::Mode;
    use agentcomputer_csi::pb::csi::volume_capability::{AccessMode, AccessType, MountVolume};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    if support::skipped() {
        return;
    }
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: publishing a volume needs root and /dev/fuse");
        return;
    }
    const SANDBOX: u32 = 1000;
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let kubelet = tempfile::tempdir().unwrap();
    let config = MounterConfig {
        node_name: NODE.into(),
        csi_socket: kubelet.path().join("plugins/agentcomputer.dev/csi.sock"),
        registration_dir: kubelet.path().join("plugins_registry"),
        // Where Agent::start points the agent.
        handover_socket: cluster.dir.path().join("mounter.sock"),
        agent_uid: nix::unistd::geteuid().as_raw(),
        agent_gid: nix::unistd::getegid().as_raw(),
        data_dir: data.clone(),
        agent_grace: agentcomputer_csi::grace::DEFAULT_AGENT_GRACE,
    };
    let start_mounter = |config: MounterConfig| {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mounter::run(config, async move {
            let _ = stopped.await;
        }));
        (stop, task)
    };
    let (stop_mounter, mounter_task) = start_mounter(config.clone());
    eventually(10, "the mounter's CSI socket", || {
        let up = config.csi_socket.exists().then_some(());
        async move { up }
    })
    .await;
    let agent = Agent::start(&cluster, &data, "node-agent-readopt.log").await;
    let token = token("readopt");
    let uid = computer(
        &admin,
        NS_A,
        "readopt",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &token,
    )
    .await;
    let c = agent.client(Some(&token)).await;
    eventually(30, "the computer's credential on the agent", || {
        let mut c = c.clone();
        async move { stat(&mut c, "readopt", "/workspace").await.ok() }
    })
    .await;

    let pod = kubelet.path().join("pods/p1/volumes");
    std::fs::create_dir_all(&pod).unwrap();
    for dir in [
        kubelet.path().to_path_buf(),
        kubelet.path().join("pods"),
        kubelet.path().join("pods/p1"),
        pod.clone(),
    ] {
        // The sandbox user must reach the target.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let target = pod.join("mount");
    let mut attributes = std::collections::HashMap::new();
    for k in ["agentcomputer.dev/uid", "agentcomputer.dev/gid"] {
        attributes.insert(k.to_string(), SANDBOX.to_string());
    }
    csi_node(&config.csi_socket)
        .await
        .node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: uid.clone(),
            target_path: target.display().to_string(),
            volume_capability: Some(csi::VolumeCapability {
                access_mode: Some(AccessMode {
                    mode: Mode::SingleNodeWriter as i32,
                }),
                access_type: Some(AccessType::Mount(MountVolume::default())),
            }),
            volume_context: attributes,
            ..Default::default()
        })
        .await
        .unwrap();

    let writer = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "i=0; while [ ! -e \"$1/stop\" ] && [ $i -lt 6000 ]; do \
               echo $i >> \"$1/log\" && sync \"$1/log\" || exit 1; i=$((i+1)); sleep 0.01; done",
        )
        .arg("sh")
        .arg(&target)
        .uid(SANDBOX)
        .gid(SANDBOX)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = |target: &Path| {
        std::fs::read_to_string(target.join("log"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let progress = |what: &'static str, after: usize| {
        let target = target.clone();
        async move {
            eventually(30, what, || {
                let n = lines(&target);
                async move { (n > after + 5).then_some(()) }
            })
            .await
        }
    };
    progress("the writer's first records", 0).await;

    // The mounter rolls: the new process holds no descriptor.
    let _ = stop_mounter.send(());
    mounter_task.await.unwrap().unwrap();
    let (stop_mounter, mounter_task) = start_mounter(config.clone());
    // The volume's stats are answered only for targets the mounter holds:
    // they come once the agent has handed the connection back.
    let stats = csi::NodeGetVolumeStatsRequest {
        volume_id: uid.clone(),
        volume_path: target.display().to_string(),
        staging_target_path: String::new(),
    };
    eventually(30, "the new mounter holding the connection again", || {
        let (socket, stats) = (config.csi_socket.clone(), stats.clone());
        async move {
            if !socket.exists() {
                return None;
            }
            csi_node(&socket)
                .await
                .node_get_volume_stats(stats)
                .await
                .ok()
        }
    })
    .await;
    progress(
        "the writer going on after the mounter restart",
        lines(&target),
    )
    .await;

    // Then the agent rolls (SIGKILL, as an OOM kill would): the new mounter
    // hands the connection to the new agent process.
    let mut agent = agent;
    agent.proc.kill();
    let killed = std::time::Instant::now();
    let agent = Agent::start(&cluster, &data, "node-agent-readopt-2.log").await;
    progress(
        "the writer going on after the agent restart",
        lines(&target),
    )
    .await;
    eprintln!(
        "mounter and agent restarted; the mount answered again {:?} after the agent was killed",
        killed.elapsed()
    );
    std::fs::write(target.join("stop"), b"")
        .unwrap_or_else(|e| panic!("writing the stop file through the mount: {e}"));
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the writer saw an error across the restarts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(target.join("log")).unwrap();
    let numbers: Vec<usize> = log.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(
        numbers,
        (0..numbers.len()).collect::<Vec<_>>(),
        "records in order, none lost"
    );
    let mut c = agent.client(Some(&token)).await;
    let (stdout, _) = exec(
        &mut c,
        "readopt",
        pb::Runtime::Shell,
        "wc -l < /workspace/log",
    )
    .await
    .unwrap();
    assert_eq!(
        stdout.trim(),
        numbers.len().to_string(),
        "the engine holds what the mount showed"
    );

    csi_node(&config.csi_socket)
        .await
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: uid.clone(),
            target_path: target.display().to_string(),
        })
        .await
        .unwrap();
    assert_eq!(agentcomputer_csi::mountinfo::count_at(&target).unwrap(), 0);
    agent.stop().await;
    let _ = stop_mounter.send(());
    mounter_task.await.unwrap().unwrap();
}

/// The sandbox runner: built by cargo (the same profile and target
/// directory as this test) on first use; its path.
fn runner_exe() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .current_dir(repo())
            .args(["build", "--quiet", "--message-format=json"])
            .args([
                "-p",
                "agentcomputer-runner",
                "--bin",
                "agentcomputer-runner",
            ])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("cargo");
        assert!(
            out.status.success(),
            "cargo build -p agentcomputer-runner failed"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the runner executable")
    })
    .clone()
}

/// `agentcomputer-runner serve` for `computer` with `token`, dialing
/// `agent`, its workspace at `workspace`.
fn start_runner(
    cluster: &Cluster,
    agent: &str,
    computer: &str,
    token: &str,
    workspace: &Path,
    log: &str,
) -> Proc {
    Proc::spawn(
        "agentcomputer-runner",
        Command::new(runner_exe())
            .args(["serve", "--workspace"])
            .arg(workspace)
            .env("AGENTCOMPUTER_AGENT", agent)
            .env("AGENTCOMPUTER_COMPUTER", computer)
            .env("AGENTCOMPUTER_TOKEN", token),
        cluster.dir.path().join(log),
    )
}

/// A container exec's events, in order, with the exit.
async fn container_events(
    c: &mut Api_,
    req: pb::ExecRequest,
) -> Result<(Vec<Event>, pb::ExecExit), tonic::Status> {
    let req = pb::ExecRequest {
        runtime: pb::Runtime::Container as i32,
        ..req
    };
    let mut stream = c.exec(req).await?.into_inner();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await? {
        match ev.event.unwrap() {
            Event::Exit(e) => return Ok((events, e)),
            other => events.push(other),
        }
    }
    panic!("exec ended without an exit event");
}

fn text_of(events: &[Event], stderr: bool) -> String {
    events
        .iter()
        .filter_map(|e| match (e, stderr) {
            (Event::Stdout(b), false) | (Event::Stderr(b), true) => {
                Some(String::from_utf8_lossy(b).to_string())
            }
            _ => None,
        })
        .collect()
}

/// Whether process `pid` is gone (not even a zombie).
fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

async fn all_gone(pids: &[i32], what: &str) {
    let pids = pids.to_vec();
    eventually(10, what, || {
        let done = pids.iter().all(|p| gone(*p)).then_some(());
        async move { done }
    })
    .await;
}

/// Container execs in cluster mode go to the computer's sandbox runner:
/// the runner binary runs here as a local process (its workspace a
/// temporary directory), attached to a cluster-mode agent over real gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_execs_run_in_the_sandbox_runner() {
    use agentcomputer_proto::v1::sandbox_runner_client::SandboxRunnerClient;
    use futures::StreamExt;

    if support::skipped() {
        return;
    }
    let runner = runner_exe();
    assert!(runner.exists());
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    // A fixed port: the runner dials the same address after the restart.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let agent = Agent::start_at(&cluster, &data, "node-agent-runner-1.log", &addr).await;

    let (tc, tp) = (token("container"), token("plain"));
    let sandbox = serde_json::json!({"image": "debian:bookworm-slim"});
    let uid = computer(
        &admin,
        NS_A,
        "boxed",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"},
                           "runtimes": {"container": true}, "sandbox": sandbox}),
        &tc,
    )
    .await;
    computer(
        &admin,
        NS_A,
        "plain",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tp,
    )
    .await;
    let mut c = agent.client(Some(&tc)).await;
    let mut p = agent.client(Some(&tp)).await;
    for (client, name) in [(&c, "boxed"), (&p, "plain")] {
        eventually(30, "the computer's credential on the agent", || {
            let mut client = client.clone();
            async move { stat(&mut client, name, "/workspace").await.ok() }
        })
        .await;
    }

    // A runtime the computer does not enable.
    let (code, msg) = code_of(exec(&mut p, "plain", pb::Runtime::Container, "true").await);
    assert_eq!(code, Code::FailedPrecondition);
    assert!(msg.contains("runtime container is disabled"), "{msg}");

    // No runner attached: a sandbox the kubelet cannot start is refused
    // with its reason; a stopped one is started (the last-activity
    // annotation is written at once) and the exec waits, saying so.
    set_sandbox_condition(
        &admin,
        "boxed",
        "ImagePullBackOff",
        "pod boxed-sandbox: container sandbox: Back-off pulling image \"nope\"",
    )
    .await;
    // The agent learns the condition from its watch, a moment later.
    let msg = eventually(10, "the exec refused with the kubelet's reason", || {
        let mut c = c.clone();
        async move {
            match exec(&mut c, "boxed", pb::Runtime::Container, "true").await {
                Err(s) if s.code() == Code::FailedPrecondition => Some(s.message().to_string()),
                _ => None,
            }
        }
    })
    .await;
    assert!(
        msg.contains("the sandbox pod of team-a/boxed cannot run: ImagePullBackOff")
            && msg.contains("Back-off pulling image"),
        "{msg}"
    );
    set_sandbox_condition(
        &admin,
        "boxed",
        "Idle",
        "stopped after 60s without activity",
    )
    .await;
    let before = k8s_openapi::jiff::Timestamp::now();
    eventually(10, "the exec to start the idle pod", || {
        let mut c = c.clone();
        async move {
            let first = first_stderr(&mut c, "boxed").await;
            first
                .contains("sandbox pod boxed-sandbox was stopped when idle; starting it")
                .then_some(())
        }
    })
    .await;
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    eventually(10, "last-activity written when the exec began", || {
        let api = api.clone();
        async move {
            let annotated = api.get("boxed").await.ok()?;
            let stamp: k8s_openapi::jiff::Timestamp = annotated
                .annotations()
                .get(agentcomputer_crds::labels::LAST_ACTIVITY)?
                .parse()
                .ok()?;
            (stamp.as_second() >= before.as_second()).then_some(())
        }
    })
    .await;
    set_sandbox_condition(&admin, "boxed", "Starting", "pod boxed-sandbox is Pending").await;

    // A runner without the right token cannot attach: none at all, an
    // unknown one, another computer's; nor one speaking an attach protocol
    // revision this agent does not serve. The hello below sends no
    // revision, as runners before revisions did: it attaches further down.
    let hello_at = |computer: &str, protocol: u32| pb::RunnerEvent {
        event: Some(pb::runner_event::Event::Hello(pb::RunnerHello {
            computer: computer.into(),
            version: "test".into(),
            protocol,
        })),
    };
    let hello = |computer: &str| hello_at(computer, 0);
    let future = agentcomputer_proto::RUNNER_PROTOCOL + 1;
    for (token, protocol, want) in [
        (None, 0, Code::Unauthenticated),
        (Some(token("nobody")), 0, Code::Unauthenticated),
        (Some(tp.clone()), 0, Code::NotFound),
        (Some(tc.clone()), future, Code::FailedPrecondition),
    ] {
        let channel = Channel::from_shared(agent.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut rc = SandboxRunnerClient::with_interceptor(channel, Bearer(token));
        let got = rc
            .attach(
                futures::stream::iter([hello_at(&uid, protocol)]).chain(futures::stream::pending()),
            )
            .await;
        let refused = got.map(|_| ()).unwrap_err();
        assert_eq!(refused.code(), want, "{refused:?}");
        if want == Code::FailedPrecondition {
            assert!(
                refused
                    .message()
                    .contains(&format!("speaks attach protocol {future}")),
                "{refused:?}"
            );
        }
    }
    // A runner process with a wrong token keeps retrying and never serves.
    let workspace = tempfile::tempdir().unwrap();
    let mut wrong = start_runner(
        &cluster,
        &addr,
        &uid,
        &token("nobody"),
        workspace.path(),
        "runner-wrong.log",
    );
    eventually(20, "the refusal in the runner's log", || {
        let refused = std::fs::read_to_string(&wrong.log)
            .unwrap_or_default()
            .contains("attach refused: Unauthenticated");
        async move { refused.then_some(()) }
    })
    .await;
    assert!(wrong.alive(), "a refused runner keeps trying");
    eventually(10, "the exec to wait for the starting pod", || {
        let mut c = c.clone();
        async move {
            let first = first_stderr(&mut c, "boxed").await;
            first
                .contains("waiting for sandbox pod boxed-sandbox: Starting")
                .then_some(())
        }
    })
    .await;
    wrong.kill();

    // The protocol, spoken by hand: a run goes down as `start`, its events
    // come back as the exec's; a second attach replaces the first and
    // ends its stream.
    let attach = |token: String| {
        let grpc = agent.grpc.clone();
        let uid = uid.clone();
        async move {
            let channel = Channel::from_shared(grpc).unwrap().connect().await.unwrap();
            let mut rc = SandboxRunnerClient::with_interceptor(channel, Bearer(Some(token)));
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            tx.send(hello(&uid)).await.unwrap();
            let commands = rc
                .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner();
            (tx, commands)
        }
    };
    let (events, mut commands) = attach(tc.clone()).await;
    let mut c2 = c.clone();
    let by_hand = tokio::spawn(async move {
        container_events(
            &mut c2,
            pb::ExecRequest {
                computer: "boxed".into(),
                script: "by hand".into(),
                stdin: b"in".to_vec(),
                env: [("K".to_string(), "V".to_string())].into(),
                timeout_ms: 5000,
                max_output_bytes: 77,
                ..Default::default()
            },
        )
        .await
    });
    let start = match commands.message().await.unwrap().unwrap().command.unwrap() {
        pb::runner_command::Command::Start(start) => start,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            start.script.as_str(),
            start.cwd.as_str(),
            start.stdin.as_slice()
        ),
        ("by hand", "/workspace", &b"in"[..])
    );
    assert_eq!((start.timeout_ms, start.max_output_bytes), (5000, 77));
    assert_eq!(start.env["K"], "V");
    let output = |stream: pb::RunnerStream, data: &[u8]| pb::RunnerEvent {
        event: Some(pb::runner_event::Event::Output(pb::RunnerOutput {
            run_id: start.run_id,
            stream: stream as i32,
            data: data.to_vec(),
        })),
    };
    events
        .send(output(pb::RunnerStream::Stdout, b"o"))
        .await
        .unwrap();
    events
        .send(output(pb::RunnerStream::Stderr, b"e"))
        .await
        .unwrap();
    events
        .send(pb::RunnerEvent {
            event: Some(pb::runner_event::Event::Exit(pb::RunnerExit {
                run_id: start.run_id,
                code: 3,
                error: String::new(),
            })),
        })
        .await
        .unwrap();
    let (got, exit) = by_hand.await.unwrap().unwrap();
    assert_eq!(
        got,
        [Event::Stdout(b"o".to_vec()), Event::Stderr(b"e".to_vec())]
    );
    assert_eq!((exit.code, exit.error.as_str()), (3, ""));
    // A runner of attach protocol 1 (this hand-made one says 0) gets an
    // ExecStream run's input gathered into its one `start`.
    let mut c3 = c.clone();
    let streamed = tokio::spawn(async move {
        use pb::exec_stream_request::Msg;
        let messages = vec![
            pb::ExecStreamRequest {
                msg: Some(Msg::Start(pb::ExecRequest {
                    computer: "boxed".into(),
                    runtime: pb::Runtime::Container as i32,
                    script: "old runner".into(),
                    stdin: b"ab".to_vec(),
                    ..Default::default()
                })),
            },
            pb::ExecStreamRequest {
                msg: Some(Msg::Stdin(b"cd".to_vec())),
            },
            pb::ExecStreamRequest {
                msg: Some(Msg::StdinEnd(pb::StdinEnd {})),
            },
        ];
        let mut stream = c3
            .exec_stream(tokio_stream::iter(messages))
            .await
            .unwrap()
            .into_inner();
        loop {
            if let Event::Exit(e) = stream.message().await.unwrap().unwrap().event.unwrap() {
                break e;
            }
        }
    });
    let start = match commands.message().await.unwrap().unwrap().command.unwrap() {
        pb::runner_command::Command::Start(start) => start,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            start.script.as_str(),
            start.stdin.as_slice(),
            start.stdin_stream
        ),
        ("old runner", &b"abcd"[..], false)
    );
    events
        .send(pb::RunnerEvent {
            event: Some(pb::runner_event::Event::Exit(pb::RunnerExit {
                run_id: start.run_id,
                code: 0,
                error: String::new(),
            })),
        })
        .await
        .unwrap();
    assert_eq!(streamed.await.unwrap().code, 0);
    let (_events2, commands2) = attach(tc.clone()).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), commands.message()).await;
    assert!(
        matches!(ended, Ok(Ok(None))),
        "the replaced stream ends: {ended:?}"
    );
    drop((events, _events2, commands2));
    eventually(10, "the hand-made runner detached", || {
        let mut c = c.clone();
        async move {
            let first = first_stderr(&mut c, "boxed").await;
            first.contains("waiting for sandbox pod").then_some(())
        }
    })
    .await;
    // An exec that began before the runner attached runs once it does.
    let waiting = {
        let mut c = c.clone();
        tokio::spawn(
            async move { exec(&mut c, "boxed", pb::Runtime::Container, "echo waited").await },
        )
    };

    // The computer's own runner.
    std::fs::create_dir(workspace.path().join("sub")).unwrap();
    mkdir(&mut c, "boxed", "/workspace/sub").await;
    let mut runner = start_runner(&cluster, &addr, &uid, &tc, workspace.path(), "runner.log");
    let waited = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiting exec ends once the runner attached")
        .unwrap();
    assert_eq!(waited.unwrap(), ("waited\n".to_string(), 0));
    let metrics = get(&format!("{}/metrics", agent.http)).await.1;
    assert!(
        metrics.contains("\nagentcomputer_node_sandbox_runners 1\n"),
        "{metrics}"
    );

    // Latency of `true` end to end (client → agent → runner → bash and
    // back), printed for docs/container-runtime.md.
    let mut took = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (_, code) = exec(&mut c, "boxed", pb::Runtime::Container, "true")
            .await
            .unwrap();
        assert_eq!(code, 0);
        took.push(t.elapsed());
    }
    took.sort();
    eprintln!(
        "container exec of `true` through the runner: p50 {:?}, max {:?} (20 runs)",
        took[10], took[19]
    );
    assert!(took[10] < Duration::from_secs(1), "{took:?}");

    // Exit codes.
    let req = |script: &str| pb::ExecRequest {
        computer: "boxed".into(),
        script: script.into(),
        ..Default::default()
    };
    let (_, exit) = container_events(&mut c, req("exit 7")).await.unwrap();
    assert_eq!((exit.code, exit.error.as_str()), (7, ""));
    let (_, exit) = container_events(&mut c, req("kill -TERM $$"))
        .await
        .unwrap();
    assert_eq!(exit.code, 128 + 15);

    // stdout and stderr in order, as they come (apart in time: the two
    // pipes are read independently).
    let started = std::time::Instant::now();
    let mut stream = c
        .exec(pb::ExecRequest {
            runtime: pb::Runtime::Container as i32,
            ..req("echo one; sleep 0.3; echo err >&2; sleep 1.2; echo two")
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().event.unwrap();
    assert_eq!(first, Event::Stdout(b"one\n".to_vec()));
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "the first line came only after {:?}",
        started.elapsed()
    );
    let mut events = vec![first];
    let exit = loop {
        match stream.message().await.unwrap().unwrap().event.unwrap() {
            Event::Exit(e) => break e,
            other => events.push(other),
        }
    };
    assert_eq!(exit.code, 0);
    assert_eq!(text_of(&events, false), "one\ntwo\n");
    assert_eq!(text_of(&events, true), "err\n");
    let err_at = events
        .iter()
        .position(|e| matches!(e, Event::Stderr(_)))
        .unwrap();
    let two_at = events
        .iter()
        .position(|e| *e == Event::Stdout(b"two\n".to_vec()))
        .unwrap();
    assert!(err_at < two_at, "{events:?}");

    // stdin, env (the runner's own variables stay out), cwd.
    let (events, exit) = container_events(
        &mut c,
        pb::ExecRequest {
            stdin: b"from stdin\n".to_vec(),
            env: [("GREETING".to_string(), "hello".to_string())].into(),
            cwd: "sub".into(),
            ..req("cat; echo \"$GREETING ${AGENTCOMPUTER_TOKEN:-no-token}\"; pwd")
        },
    )
    .await
    .unwrap();
    assert_eq!(exit.code, 0, "{}", text_of(&events, true));
    let sub = workspace.path().join("sub").canonicalize().unwrap();
    assert_eq!(
        text_of(&events, false),
        format!("from stdin\nhello no-token\n{}\n", sub.display())
    );
    // ExecStream: 24 MiB of stdin, six times one message, reach the
    // script through the runner (attach protocol 2) as it reads them.
    {
        use pb::exec_stream_request::Msg;
        let mut messages = vec![pb::ExecStreamRequest {
            msg: Some(Msg::Start(pb::ExecRequest {
                runtime: pb::Runtime::Container as i32,
                timeout_ms: 60_000,
                ..req("wc -c")
            })),
        }];
        for _ in 0..24 {
            messages.push(pb::ExecStreamRequest {
                msg: Some(Msg::Stdin(vec![b'z'; 1 << 20])),
            });
        }
        messages.push(pb::ExecStreamRequest {
            msg: Some(Msg::StdinEnd(pb::StdinEnd {})),
        });
        let mut stream = c
            .exec_stream(tokio_stream::iter(messages))
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        let exit = loop {
            match stream.message().await.unwrap().unwrap().event.unwrap() {
                Event::Stdout(b) | Event::Stderr(b) => out.extend(b),
                Event::Exit(e) => break e,
            }
        };
        assert_eq!(exit.code, 0, "{exit:?}");
        assert_eq!(
            String::from_utf8_lossy(&out).trim(),
            (24u64 << 20).to_string()
        );
    }
    // A cwd missing from the computer is refused before the run.
    let (code, _) = code_of(
        container_events(
            &mut c,
            pb::ExecRequest {
                cwd: "missing".into(),
                ..req("true")
            },
        )
        .await,
    );
    assert_eq!(code, Code::NotFound);

    // The timeout kills the whole process group, background jobs too.
    let started = std::time::Instant::now();
    let (events, exit) = container_events(
        &mut c,
        pb::ExecRequest {
            timeout_ms: 1500,
            ..req("sleep 100 & echo $! > bg.pid; echo $$ > fg.pid; sleep 100")
        },
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(exit.code, 124);
    assert_eq!(exit.error, "container: script timed out after 1.5s");
    assert!(text_of(&events, true).contains("timed out"));
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let pids = [
        read_pid(&workspace.path().join("bg.pid")),
        read_pid(&workspace.path().join("fg.pid")),
    ];
    all_gone(&pids, "the timed-out run's processes gone").await;

    // The output cap: cut at the cap, the run stopped and told.
    let (events, exit) = container_events(
        &mut c,
        pb::ExecRequest {
            max_output_bytes: 1000,
            ..req("yes | head -c 100000; sleep 100")
        },
    )
    .await
    .unwrap();
    assert_eq!(exit.code, 141);
    assert_eq!(
        exit.error,
        "container: output exceeded 1000 bytes; output truncated and script stopped"
    );
    assert_eq!(text_of(&events, false).len(), 1000);

    // A client that goes away cancels the run and its background jobs.
    let mut stream = c
        .exec(pb::ExecRequest {
            runtime: pb::Runtime::Container as i32,
            ..req("sleep 100 & echo $! > c-bg.pid; echo $$ > c-fg.pid; echo started; sleep 100")
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().event.unwrap();
    assert_eq!(first, Event::Stdout(b"started\n".to_vec()));
    let pids = [
        read_pid(&workspace.path().join("c-bg.pid")),
        read_pid(&workspace.path().join("c-fg.pid")),
    ];
    assert!(!gone(pids[0]) && !gone(pids[1]));
    drop(stream);
    all_gone(&pids, "the abandoned run's processes gone").await;

    // The agent restarts; the runner reconnects by itself and execs work
    // again. A run in flight when the agent goes is killed by the runner.
    let mut stream = c
        .exec(pb::ExecRequest {
            runtime: pb::Runtime::Container as i32,
            timeout_ms: 60_000,
            ..req("sleep 100 & echo $! > r-bg.pid; echo started; sleep 100")
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().event.unwrap();
    assert_eq!(first, Event::Stdout(b"started\n".to_vec()));
    let bg = read_pid(&workspace.path().join("r-bg.pid"));
    agent.stop().await;
    drop(stream);
    all_gone(&[bg], "the run of the lost stream killed").await;
    assert!(
        runner.alive(),
        "the runner outlives its agent:\n{}",
        runner.log_tail()
    );
    let agent = Agent::start_at(&cluster, &data, "node-agent-runner-2.log", &addr).await;
    let c = agent.client(Some(&tc)).await;
    let (out, code) = eventually(30, "the runner attached again", || {
        let mut c = c.clone();
        async move {
            exec(&mut c, "boxed", pb::Runtime::Container, "echo back")
                .await
                .ok()
        }
    })
    .await;
    assert_eq!((out.as_str(), code), ("back\n", 0));
    assert!(
        std::fs::read_to_string(&runner.log)
            .unwrap()
            .matches("attached to the node agent")
            .count()
            >= 2
    );

    // An agent that stops with only an idle runner attached ends the
    // runner's stream at once instead of waiting its shutdown grace (20 s)
    // for it; the runner stays and attaches to the next agent.
    let stopping = std::time::Instant::now();
    agent.stop().await;
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the agent took {took:?} to stop with an idle runner attached"
    );
    assert!(runner.alive(), "{}", runner.log_tail());
    let agent = Agent::start_at(&cluster, &data, "node-agent-runner-3.log", &addr).await;
    let mut c = agent.client(Some(&tc)).await;
    let (out, _) = eventually(30, "the runner attached to the third agent", || {
        let mut c = c.clone();
        async move {
            exec(&mut c, "boxed", pb::Runtime::Container, "echo third")
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(out, "third\n");

    // SIGTERM ends the runner, and its runs with it.
    let mut stream = c
        .exec(pb::ExecRequest {
            runtime: pb::Runtime::Container as i32,
            ..req("sleep 100 & echo $! > t-bg.pid; echo started; sleep 100")
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().event.unwrap();
    assert_eq!(first, Event::Stdout(b"started\n".to_vec()));
    let bg = read_pid(&workspace.path().join("t-bg.pid"));
    let pid = nix::unistd::Pid::from_raw(runner.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = eventually(10, "the runner's exit", || {
        let s = runner.child.try_wait().unwrap();
        async move { s }
    })
    .await;
    assert!(status.success(), "{status}:\n{}", runner.log_tail());
    all_gone(&[bg], "the runs of a stopped runner killed").await;
    // The exec learns that its runner went away.
    let mut rest = Vec::new();
    let exit = loop {
        match stream.message().await.unwrap().unwrap().event.unwrap() {
            Event::Exit(e) => break e,
            other => rest.push(other),
        }
    };
    // Killed: either the runner's last word (SIGKILL's status) or, when
    // it exited first, the agent's report of the lost runner.
    assert_ne!(exit.code, 0, "{exit:?}");
    assert!(
        exit.error.is_empty() || exit.error.contains("runner disconnected"),
        "{exit:?}"
    );
    // With no runner, a new exec waits for one (and says so).
    let first = first_stderr(&mut c, "boxed").await;
    assert!(
        first.contains("waiting for sandbox pod boxed-sandbox"),
        "{first}"
    );
    let metrics = get(&format!("{}/metrics", agent.http)).await.1;
    assert!(
        metrics.contains("\nagentcomputer_node_sandbox_runners 0\n"),
        "{metrics}"
    );
    agent.stop().await;
}

async fn mkdir(c: &mut Api_, computer: &str, path: &str) {
    c.mkdir(pb::MkdirRequest {
        computer: computer.into(),
        path: path.into(),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// The status line the agent's egress proxy answers to `CONNECT host:443`
/// sent with `proxy_authorization` (a header value, if any).
async fn proxy_status(
    proxy: std::net::SocketAddr,
    host: &str,
    authorization: Option<&str>,
) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let mut head = format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n");
    if let Some(a) = authorization {
        head.push_str(&format!("Proxy-Authorization: {a}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).await.unwrap();
    line.trim().to_string()
}

/// `Proxy-Authorization` with `password` as the Basic password.
fn basic_with(password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("computer:{password}"))
    )
}

/// The proxy credential of the computer whose token is `token`: the hex
/// of its credential fingerprint, as the operator puts it into the
/// sandbox's proxy URL.
fn basic(token: &str) -> String {
    basic_with(&hex::encode(Sha256::digest(token.as_bytes())))
}

/// The egress proxy of cluster mode takes a connection as the computer
/// whose credential fingerprint it carries (Proxy-Authorization: Basic;
/// never the token itself), and decides with
/// that computer's current egress policy; without a known token it answers
/// 407, so it is open to nobody else on the pod network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_proxy_knows_computers_by_their_token() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let agent = Agent::start(&cluster, &data, "node-agent-proxy.log").await;
    let (ta, tb) = (token("proxy-a"), token("proxy-b"));
    computer(
        &admin,
        NS_A,
        "lister",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"},
            "egress": {"mode": "allow-list", "hosts": ["allowed.test"]}}),
        &ta,
    )
    .await;
    computer(
        &admin,
        NS_A,
        "closed",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &tb,
    )
    .await;
    // Until the agent has seen the computer, its token is unknown (407).
    let a = basic(&ta);
    let refused = eventually(30, "the proxy to know the allow-list computer", || {
        let a = a.clone();
        let proxy = agent.proxy;
        async move {
            let status = proxy_status(proxy, "denied.test", Some(&a)).await;
            (!status.contains(" 407")).then_some(status)
        }
    })
    .await;
    assert!(refused.contains(" 403"), "a host off the list: {refused}");
    for (auth, what) in [
        (None, "no credential"),
        (Some(basic("not-a-token")), "an unknown token"),
        (
            Some(basic_with(&ta)),
            "the API token instead of its fingerprint",
        ),
        (Some(format!("Bearer {ta}")), "another scheme"),
    ] {
        let status = proxy_status(agent.proxy, "allowed.test", auth.as_deref()).await;
        assert!(status.contains(" 407"), "{what}: {status}");
    }
    let b = basic(&tb);
    let closed = eventually(30, "the proxy to know the deny-all computer", || {
        let b = b.clone();
        let proxy = agent.proxy;
        async move {
            let status = proxy_status(proxy, "allowed.test", Some(&b)).await;
            (!status.contains(" 407")).then_some(status)
        }
    })
    .await;
    assert!(closed.contains(" 403"), "deny-all computer: {closed}");
    // The fingerprint in the sandbox's proxy URL opens no API call.
    let fingerprint = hex::encode(Sha256::digest(ta.as_bytes()));
    let mut c = agent.client(Some(&fingerprint)).await;
    let (code, _) = code_of(stat(&mut c, "lister", "/workspace").await);
    assert_eq!(code, Code::Unauthenticated);
    let metrics = get(&format!("{}/metrics", agent.http)).await.1;
    assert!(
        metrics.contains("agentcomputer_egress_proxy_decisions_total"),
        "proxy decisions in /metrics:\n{metrics}"
    );
    agent.stop().await;
}

/// Share links in cluster mode: made with the computer's token, served by
/// the agent's share listener under the computer's uid, and revoked when
/// the operator publishes a rotated credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_links_follow_the_computer_credential() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let share_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let extra = [
        "--share-listen".to_string(),
        share_addr.to_string(),
        "--share-url".to_string(),
        format!("http://{share_addr}/"),
    ];
    let agent = Agent::start_with(
        &cluster,
        &data,
        "node-agent-share.log",
        "127.0.0.1:0",
        &extra,
    )
    .await;
    let (old, new) = (token("share-old"), token("share-new"));
    let uid = computer(
        &admin,
        NS_A,
        "sharer",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &old,
    )
    .await;
    let mut c = agent.client(Some(&old)).await;
    let name = format!("{NS_A}/sharer");
    eventually(30, "the computer on the agent", || {
        let mut c = c.clone();
        let name = name.clone();
        async move {
            write(&mut c, &name, "report.txt", b"cluster report\n")
                .await
                .ok()
        }
    })
    .await;
    let share = |c: &mut Api_, secs: u64| {
        let mut c = c.clone();
        let name = name.clone();
        async move {
            c.share(pb::ShareRequest {
                computer: name,
                path: "report.txt".into(),
                expires_in_seconds: secs,
            })
            .await
            .map(|r| r.into_inner())
        }
    };
    let link = share(&mut c, 600).await.unwrap();
    assert!(
        link.url.starts_with(&format!(
            "http://{share_addr}/share/v1/{uid}/report.txt?expires="
        )),
        "links name the computer by uid: {}",
        link.url
    );
    assert_eq!(get(&link.url).await, (200, "cluster report\n".to_string()));
    // Another computer's token makes no link to this one.
    let mut stranger = agent.client(Some(&token("nobody"))).await;
    let (code, _) = code_of(share(&mut stranger, 600).await);
    assert_eq!(code, Code::Unauthenticated);

    // Rotating the credential revokes the link; the new token makes new ones.
    set_hash(&admin, NS_A, "sharer", &new).await;
    let refused = eventually(30, "the old link to be refused", || {
        let url = link.url.clone();
        async move {
            let got = get(&url).await;
            (got.0 == 403).then_some(got.1)
        }
    })
    .await;
    assert_eq!(refused, "invalid or revoked link\n");
    let mut c = agent.client(Some(&new)).await;
    let fresh = share(&mut c, 600).await.unwrap();
    assert_ne!(fresh.url, link.url);
    assert_eq!(get(&fresh.url).await, (200, "cluster report\n".to_string()));
    // Tampered: 403 too.
    let tampered = fresh.url.replace("expires=", "expires=1");
    assert_eq!(get(&tampered).await.0, 403);
    agent.stop().await;
}

/// The node-agent pod object the gateway routes by: on `node`, labelled
/// like the chart's DaemonSet pods, Running with `podIP` 127.0.0.1 and
/// Ready as `ready` says (created on first use).
async fn agent_pod(admin: &kube::Client, node: &str, ready: bool) {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let name = format!("node-agent-{node}");
    if pods.get_opt(&name).await.unwrap().is_none() {
        let pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {
                "app.kubernetes.io/name": "agentcomputer-node-agent",
                "app.kubernetes.io/instance": support::RELEASE}},
            "spec": {"nodeName": node, "containers": [{"name": "node-agent", "image": "node-agent:test"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let status = serde_json::json!({"status": {
        "phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// What curl saw: status, response headers (lower-case names), body.
struct Fetched {
    status: u16,
    /// The response head as received.
    head: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Runs curl against `url` with `extra` arguments.
fn curl(dir: &Path, url: &str, extra: &[&str]) -> Fetched {
    let (head, body) = (dir.join("curl.head"), dir.join("curl.body"));
    let _ = std::fs::remove_file(&body);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(&head).unwrap();
    Fetched {
        status: String::from_utf8_lossy(&out.stdout).trim().parse().unwrap(),
        head: head.clone(),
        headers: head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect(),
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

/// A link made by `node-agent cluster` downloads from outside through the
/// real `agentcomputer-share-gateway`, which runs under the chart's RBAC
/// and routes by uid to the Ready node-agent pod of the computer's node:
/// 200 with the agent's headers, HEAD, 206 for a range, 403 for a tampered
/// link and an unknown uid, 503 while no agent is Ready there, 404 off the
/// link route. The chart with the gateway passes a server-side dry run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_links_through_the_gateway() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let dir = cluster.dir.path();

    // The chart with the gateway: dry-run server-side; apply its RBAC,
    // which the gateway below runs under.
    let chart = repo().join("charts/agent-computer");
    let render = |extra: &[&str]| {
        let mut args = vec![
            "template",
            support::RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            SYSTEM_NS,
            "--set",
            "nodeAgent.share.enabled=true",
            "--set",
            "nodeAgent.share.url=https://files.example.com/",
            "--set",
            "shareGateway.enabled=true",
        ];
        args.extend_from_slice(extra);
        let out = cluster.helm(&args);
        ok(out.clone(), "helm template with the gateway");
        String::from_utf8(out.stdout).unwrap()
    };
    ok(
        cluster.kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&render(&[])),
        ),
        "server-side dry run of the chart with the gateway",
    );
    let rbac = render(&["--show-only", "templates/share-gateway-rbac.yaml"]);
    ok(
        cluster.kubectl(&["apply", "-f", "-"], Some(&rbac)),
        "apply the gateway's RBAC",
    );

    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (share_addr, gateway_addr) = (free(), free());
    let base = format!("http://{gateway_addr}/");
    let extra = [
        "--share-listen".to_string(),
        share_addr.to_string(),
        "--share-url".to_string(),
        base.clone(),
    ];
    let agent = Agent::start_with(
        &cluster,
        &dir.join("node-data"),
        "node-agent-gateway.log",
        "127.0.0.1:0",
        &extra,
    )
    .await;
    agent_pod(&admin, NODE, true).await;
    let gateway_log = dir.join("share-gateway.log");
    let mut gateway = Proc::spawn(
        "agentcomputer-share-gateway",
        Command::new(support::share_gateway_exe())
            .arg(format!("--listen={gateway_addr}"))
            .arg(format!("--agent-namespace={SYSTEM_NS}"))
            .arg(format!(
                "--agent-selector=app.kubernetes.io/name=agentcomputer-node-agent,app.kubernetes.io/instance={}",
                support::RELEASE
            ))
            .arg(format!("--agent-share-port={}", share_addr.port()))
            .arg("--connect-timeout=2s")
            .env("KUBECONFIG", &cluster.share_gateway_kubeconfig)
            .env("RUST_LOG", "info,kube=warn"),
        gateway_log,
    );
    eventually(30, "the gateway's /readyz", || {
        let url = format!("{base}readyz");
        async move { (get(&url).await.0 == 200).then_some(()) }
    })
    .await;
    assert!(gateway.alive(), "gateway exited:\n{}", gateway.log_tail());

    let tok = token("gateway");
    let uid = computer(
        &admin,
        NS_A,
        "shared",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &tok,
    )
    .await;
    let mut c = agent.client(Some(&tok)).await;
    let name = format!("{NS_A}/shared");
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    eventually(30, "the computer on the agent", || {
        let (mut c, name, content) = (c.clone(), name.clone(), content.clone());
        async move { write(&mut c, &name, "report.bin", &content).await.ok() }
    })
    .await;
    let link = c
        .share(pb::ShareRequest {
            computer: name.clone(),
            path: "report.bin".into(),
            expires_in_seconds: 600,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        link.url
            .starts_with(&format!("{base}share/v1/{uid}/report.bin?expires=")),
        "{}",
        link.url
    );

    // The whole file, with the agent's headers, through the gateway.
    let got = curl(dir, &link.url, &[]);
    assert_eq!(got.status, 200);
    assert!(got.body == content, "{} bytes differ", got.body.len());
    assert_eq!(got.header("content-length"), Some("300000"));
    assert_eq!(
        got.header("content-disposition"),
        Some("attachment; filename=\"report.bin\"; filename*=UTF-8''report.bin")
    );
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert_eq!(got.header("accept-ranges"), Some("bytes"));
    assert_eq!(got.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(got.header("cache-control"), Some("private, no-store"));
    // HEAD: the headers, no body (curl -I writes the head as its output).
    let head = curl(dir, &link.url, &["-I"]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("300000"));
    assert_eq!(String::from_utf8_lossy(&head.body), head.head);
    // One range: 206 with Content-Range, the bytes asked for.
    let part = curl(dir, &link.url, &["-H", "Range: bytes=262100-262199"]);
    assert_eq!(part.status, 206);
    assert_eq!(
        part.header("content-range"),
        Some("bytes 262100-262199/300000")
    );
    assert_eq!(part.body, content[262100..262200]);
    // Tampered: the agent refuses it, the gateway passes that on.
    let tampered = link.url.replace("expires=", "expires=1");
    let refused = curl(dir, &tampered, &[]);
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body, b"invalid or revoked link\n");
    // An unknown uid: the same answer, from the gateway.
    let unknown = link
        .url
        .replace(&uid, "00000000-0000-0000-0000-000000000000");
    let refused = curl(dir, &unknown, &[]);
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body, b"invalid or revoked link\n");
    // Off the link route: 404; other methods on a link: 405.
    assert_eq!(curl(dir, &format!("{base}index.html"), &[]).status, 404);
    let post = curl(dir, &link.url, &["-X", "POST"]);
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );

    // No Ready agent on the computer's node: 503 with Retry-After; back
    // once it is Ready again.
    agent_pod(&admin, NODE, false).await;
    let busy = eventually(30, "503 while the agent is not Ready", || {
        let got = curl(dir, &link.url, &[]);
        async move { (got.status == 503).then_some(got) }
    })
    .await;
    assert!(busy.header("retry-after").is_some());
    agent_pod(&admin, NODE, true).await;
    eventually(30, "200 once the agent is Ready again", || {
        let got = curl(dir, &link.url, &[]);
        async move { (got.status == 200).then_some(()) }
    })
    .await;
    assert!(gateway.alive(), "gateway exited:\n{}", gateway.log_tail());
    agent.stop().await;
}

/// `n` connections to `addr` from loopback source address `from`, left
/// idle (nothing sent).
async fn idle_connections(
    from: &str,
    addr: std::net::SocketAddr,
    n: usize,
) -> Vec<tokio::net::TcpStream> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        all.push(socket.connect(addr).await.unwrap());
    }
    all
}

/// How many of `conns` the server has not closed (no EOF, no reset):
/// what the server sent (an HTTP/2 server's SETTINGS) is read and
/// skipped.
fn still_open(conns: &[tokio::net::TcpStream]) -> usize {
    let mut b = [0u8; 1024];
    conns
        .iter()
        .filter(|s| {
            loop {
                match s.try_read(&mut b) {
                    Ok(0) => break false,
                    Ok(_) => continue,
                    Err(e) => break e.kind() == std::io::ErrorKind::WouldBlock,
                }
            }
        })
        .count()
}

/// One sandbox pod (one source address) cannot hold the agent's shared
/// doors: its idle connections to the API port are bounded per source and
/// closed at the authentication deadline, its connections to the egress
/// proxy bounded per source, while another source's API calls and proxy
/// requests keep working in a bounded time. With the agent's defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_cannot_hold_the_agents_ports() {
    if support::skipped() {
        return;
    }
    // This test holds about a thousand sockets.
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let agent = Agent::start(&cluster, &data, "node-agent-doors.log").await;
    let t = token("doors");
    computer(
        &admin,
        NS_A,
        "calm",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &t,
    )
    .await;
    let c = agent.client(Some(&t)).await;
    eventually(30, "the agent to know the computer", || {
        let mut c = c.clone();
        async move { stat(&mut c, "calm", "/workspace").await.ok() }
    })
    .await;
    let api: std::net::SocketAddr = agent.grpc.strip_prefix("http://").unwrap().parse().unwrap();

    // One source floods both ports with idle connections.
    let api_flood = idle_connections("127.0.0.2", api, 300).await;
    let proxy_flood = idle_connections("127.0.0.3", agent.proxy, 600).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (api_open, proxy_open) = (still_open(&api_flood), still_open(&proxy_flood));
    eprintln!(
        "after 1 s the agent holds {api_open} of 300 API and {proxy_open} of 600 proxy connections of one source"
    );

    // Another source is served meanwhile, on new connections, promptly.
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let mut fresh = agent.client(Some(&t)).await;
        stat(&mut fresh, "calm", "/workspace")
            .await
            .expect("another source's call during the flood");
        let status = proxy_status(agent.proxy, "denied.test", Some(&basic(&t))).await;
        assert!(
            status.contains(" 403"),
            "another source's proxy request: {status}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "another source waited {:?}",
            started.elapsed()
        );
    }
    assert!(
        api_open <= 8,
        "one source holds {api_open} unauthenticated API connections"
    );
    assert!(
        proxy_open <= agentcomputer_proxy::DEFAULT_PER_COMPUTER,
        "one source holds {proxy_open} proxy connections"
    );
    // Past the authentication deadline (10 s) none of them is left.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let api_left = still_open(&api_flood);
    assert_eq!(api_left, 0, "idle API connections outlived the deadline");
    let log = std::fs::read_to_string(cluster.dir.path().join("node-agent-doors.log")).unwrap();
    assert!(
        log.contains("too many connections from one address"),
        "the gate logged nothing:\n{}",
        agent.proc.log_tail()
    );
    drop((api_flood, proxy_flood));
    agent.stop().await;
}

/// Over TLS the deadline covers the handshake: connections from one
/// address that start a handshake and never finish it are held to that
/// address's bound and closed 10 s after their accept, while a client
/// from another address completes its handshake and its calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_done_tls_handshakes_end_at_the_deadline() {
    use tokio::io::AsyncWriteExt;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("node-data");
    let leaf = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (
        cluster.dir.path().join("tls.crt"),
        cluster.dir.path().join("tls.key"),
    );
    std::fs::write(&cert, leaf.cert.pem()).unwrap();
    std::fs::write(&key, leaf.signing_key.serialize_pem()).unwrap();
    let extra = [
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    let agent =
        Agent::start_with(&cluster, &data, "node-agent-tls.log", "127.0.0.1:0", &extra).await;
    let t = token("tls-doors");
    computer(
        &admin,
        NS_A,
        "sealed",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &t,
    )
    .await;
    let api: std::net::SocketAddr = agent.grpc.strip_prefix("http://").unwrap().parse().unwrap();
    let tls_client = || {
        let url = format!("https://localhost:{}", api.port());
        let pem = leaf.cert.pem();
        let t = t.clone();
        async move {
            let channel = Endpoint::from_shared(url)
                .unwrap()
                .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
                .unwrap()
                .connect()
                .await
                .expect("TLS connect");
            AgentComputerClient::with_interceptor(channel, Bearer(Some(t)))
        }
    };
    eventually(30, "the agent to know the computer", || async {
        let mut c = tls_client().await;
        stat(&mut c, "sealed", "/workspace").await.ok()
    })
    .await;

    // Half a ClientHello: a record header announcing 512 bytes, then 3.
    let mut stalled = idle_connections("127.0.0.2", api, 40).await;
    for s in &mut stalled {
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01])
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let open = still_open(&stalled);
    eprintln!("after 1 s the agent holds {open} of 40 half-done handshakes of one source");
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let mut c = tls_client().await;
        stat(&mut c, "sealed", "/workspace")
            .await
            .expect("another source's TLS call during the stall");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "another source waited {:?}",
            started.elapsed()
        );
    }
    assert!(open <= 8, "one source holds {open} half-done handshakes");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let left = still_open(&stalled);
    assert_eq!(left, 0, "half-done handshakes outlived the deadline");
    drop(stalled);
    agent.stop().await;
}
