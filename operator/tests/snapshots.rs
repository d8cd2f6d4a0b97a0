//! ComputerSnapshot against a real kube-apiserver (see `support`), with the
//! operator binary and a real node agent in cluster mode, served in this
//! process with a `file://` backup store (so that it can take snapshots)
//! at the address its fake agent pod reports:
//! - the chart installs both CRDs and the operator's RBAC;
//! - a ComputerSnapshot of a Ready computer becomes readyToUse with its
//!   time, size, handle and position; the agent lists it; with
//!   deletionPolicy Delete it is owned by its computer, with Retain not;
//! - one of a computer that does not exist says ComputerNotFound;
//! - deleting a ComputerSnapshot deletes it at the agent (finalizer).
//!
//! One test function, so that the control plane starts once.

mod support;

use std::path::Path;
use std::time::Duration;

use agentcomputer_crds::{AgentComputer, ComputerPhase, ComputerSnapshot};
use agentcomputer_proto::v1 as pb;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{Cluster, RELEASE, SYSTEM_NS, add_agent, add_node, eventually, wait_phase};

const NS: &str = "snappers";
const NODE: &str = "node-a";
/// The fake agent pod's IP: the in-process agent listens there on 7433.
const AGENT_IP: &str = "127.0.0.93";

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Serves a node agent in cluster mode for [`NODE`] with `client` on
/// `AGENT_IP:7433`, backing up to `store`; stops when the sender drops.
async fn start_agent(
    client: kube::Client,
    data: &Path,
    store: &Path,
) -> tokio::sync::oneshot::Sender<()> {
    use agentcomputer_node_agent::cluster::{self, ClusterConfig};
    let listener = tokio::net::TcpListener::bind((AGENT_IP, 7433))
        .await
        .expect("bind the agent's address");
    let http = tokio::net::TcpListener::bind((AGENT_IP, 0)).await.unwrap();
    let backup =
        agentcomputer_node_agent::backup::BackupUrl::parse(&format!("file://{}", store.display()))
            .unwrap();
    let config = ClusterConfig {
        node_name: NODE.into(),
        data_dir: data.to_path_buf(),
        namespace: SYSTEM_NS.into(),
        idle_timeout: Duration::from_secs(300),
        overcommit: 1.0,
        status_interval: Duration::from_secs(1),
        shutdown_grace: Duration::from_secs(1),
        handover_socket: data.join("no-mounter.sock"),
        tls: None,
        proxy_listen: None,
        share: None,
        api_gate: Default::default(),
        proxy_connections_per_computer: 64,
        backup: Some(backup),
        writer_lease: agentcomputer_lease::Timing::scaled_to(Duration::from_secs(15)),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = cluster::serve(client, listener, http, config, shutdown).await {
            panic!("node agent: {e:#}");
        }
    });
    stop
}

/// The computer's token, from its Secret.
async fn token(admin: &kube::Client, name: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let s = secrets.get(&format!("{name}-credential")).await.unwrap();
    String::from_utf8(s.data.unwrap()["token"].0.clone()).unwrap()
}

/// Writes `data` to `path` of computer `uid` through its agent.
async fn write(uid: &str, token: &str, path: &str, data: &[u8]) {
    use pb::agent_computer_client::AgentComputerClient;
    let channel = tonic::transport::Channel::from_shared(format!("http://{AGENT_IP}:7433"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = AgentComputerClient::new(channel);
    let msgs = vec![
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
                computer: uid.into(),
                path: path.into(),
                mode: pb::WriteMode::Truncate as i32,
                perm: 0,
                offset: 0,
            })),
        },
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(data.to_vec())),
        },
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::End(pb::WriteEnd {
                total_bytes: data.len() as u64,
            })),
        },
    ];
    let mut req = tonic::Request::new(futures::stream::iter(msgs));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    c.write(req).await.unwrap();
}

fn snapshot(name: &str, computer: &str, policy: Option<&str>) -> ComputerSnapshot {
    let mut spec = json!({"computer": computer});
    if let Some(p) = policy {
        spec["deletionPolicy"] = json!(p);
    }
    serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "ComputerSnapshot",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// The `Ready` condition's reason of snapshot `name`, once it is `want`.
async fn reason_becomes(api: &Api<ComputerSnapshot>, name: &str, want: &str, op: &support::Proc) {
    let got = eventually(60, &format!("{name}: Ready reason {want}"), || async {
        let s = api.get(name).await.ok()?;
        let c = s
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (c.reason == want).then_some(c)
    })
    .await;
    assert!(!got.message.is_empty(), "{got:?}\n{}", op.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computer_snapshots_are_taken_by_the_serving_node_agent() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    for ns in [SYSTEM_NS, NS] {
        support::create_namespace(&admin, ns).await;
    }
    let chart = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/agent-computer"
    ));
    let rendered = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            SYSTEM_NS,
            "--include-crds",
            "--set",
            "metrics.serviceMonitor.enabled=false",
            // For the agents' Lease RBAC, which backups need; the agent
            // here backs up to a directory the chart would refuse.
            "--set",
            "backup.url=s3://snapshots-test/store",
            "--set",
            "backup.credentialsSecret=unused",
        ]),
        "helm template",
    );
    ok(
        &cluster.kubectl(&["apply", "--server-side", "-f", "-"], Some(&rendered)),
        "kubectl apply of the chart",
    );
    for crd in [
        "crd/agentcomputers.agentcomputer.dev",
        "crd/computersnapshots.agentcomputer.dev",
    ] {
        ok(
            &cluster.kubectl(
                &["wait", "--for=condition=Established", crd, "--timeout=60s"],
                None,
            ),
            "CRD established",
        );
    }

    add_node(&admin, NODE).await;
    add_agent(&admin, NODE, AGENT_IP).await;
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    let data = cluster.dir.path().join("agent-data");
    let store = cluster.dir.path().join("backup-store");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    let _agent = start_agent(agent_id, &data, &store).await;
    let (operator, _) = cluster.start_operator("operator", false);

    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let c: AgentComputer = serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": "demo"}, "spec": {"storage": {"size": "64Mi"}},
    }))
    .unwrap();
    computers.create(&PostParams::default(), &c).await.unwrap();
    let c = wait_phase(&computers, "demo", ComputerPhase::Ready, 90).await;
    let uid = c.uid().unwrap();
    let token = token(&admin, "demo").await;
    // The agent serves it once it has seen the computer and its hash.
    eventually(60, "the agent to accept a write", || async {
        let t = token.clone();
        let u = uid.clone();
        tokio::spawn(async move { write(&u, &t, "hello.txt", b"hi there\n").await })
            .await
            .ok()
    })
    .await;

    // --- Taken: readyToUse, time, size, handle, position; owned by demo. ---
    let snaps: Api<ComputerSnapshot> = Api::namespaced(admin.clone(), NS);
    snaps
        .create(&PostParams::default(), &snapshot("s1", "demo", None))
        .await
        .unwrap();
    let s1 = eventually(90, "s1 readyToUse", || async {
        let s = snaps.get("s1").await.ok()?;
        (s.status.as_ref()?.ready_to_use == Some(true)).then_some(s)
    })
    .await;
    let st = s1.status.clone().unwrap();
    let handle = format!("cs-{}", s1.uid().unwrap());
    assert_eq!(st.snapshot_handle.as_deref(), Some(handle.as_str()));
    assert_eq!(st.computer_uid.as_deref(), Some(uid.as_str()));
    assert_eq!(st.node.as_deref(), Some(NODE));
    assert!(st.size_bytes.unwrap() > 0 && st.size.is_some(), "{st:?}");
    assert!(st.time.is_some() && st.position.is_some(), "{st:?}");
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Taken")
    );
    let owners = s1.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("AgentComputer", uid.as_str())
    );
    assert!(
        s1.finalizers()
            .iter()
            .any(|f| f == "agentcomputer.dev/snapshot")
    );
    let mut call = agentcomputer_operator::snapshots::AgentCall::connect(
        &format!("{AGENT_IP}:7433"),
        None,
        &uid,
        &token,
    )
    .await
    .unwrap();
    let at_agent = call
        .find(&handle)
        .await
        .unwrap()
        .expect("the agent lists it");
    assert_eq!(at_agent.position as i64, st.position.unwrap());
    let listed = ok(
        &cluster.kubectl(&["-n", NS, "get", "computersnapshots"], None),
        "kubectl get computersnapshots",
    );
    assert!(
        listed.contains("COMPUTER") && listed.contains("READY") && listed.contains("demo"),
        "{listed}"
    );

    // --- Retain: taken, and not owned. ---
    snaps
        .create(
            &PostParams::default(),
            &snapshot("kept", "demo", Some("Retain")),
        )
        .await
        .unwrap();
    let kept = eventually(90, "kept readyToUse", || async {
        let s = snaps.get("kept").await.ok()?;
        (s.status.as_ref()?.ready_to_use == Some(true)).then_some(s)
    })
    .await;
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // --- A computer that does not exist. ---
    snaps
        .create(&PostParams::default(), &snapshot("lost", "nope", None))
        .await
        .unwrap();
    reason_becomes(&snaps, "lost", "ComputerNotFound", &operator).await;

    // --- spec.computer is immutable. ---
    let mut moved = snaps.get("kept").await.unwrap();
    moved.spec.computer = "other".into();
    let err = snaps
        .replace("kept", &PostParams::default(), &moved)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("spec.computer is immutable"),
        "{err}"
    );

    // --- Deleted: gone at the agent too. ---
    snaps.delete("s1", &DeleteParams::default()).await.unwrap();
    eventually(60, "s1 deleted", || async {
        snaps.get_opt("s1").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        call.find(&handle).await.unwrap().is_none(),
        "still at the agent"
    );
    snaps
        .delete("lost", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "lost deleted", || async {
        snaps.get_opt("lost").await.unwrap().is_none().then_some(())
    })
    .await;
}
