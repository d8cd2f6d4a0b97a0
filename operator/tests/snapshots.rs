//! ComputerSnapshot against a real kube-apiserver (see `support`), with the
//! operator binary and a real node agent in cluster mode, served in this
//! process with a `file://` backup store (so that it can take snapshots)
//! at the address its fake agent pod reports:
//! - the chart installs both CRDs and the operator's RBAC;
//! - a ComputerSnapshot of a Ready computer becomes readyToUse with its
//!   time, size, handle and position; the agent lists it; with
//!   deletionPolicy Delete it is owned by its computer, with Retain not;
//! - one of a computer that does not exist says ComputerNotFound;
//! - deleting a ComputerSnapshot deletes it at the agent (finalizer);
//! - a retained snapshot of a computer deleted with its data says
//!   ComputerDeleted and is no longer readyToUse.
//!
//! One test function, so that the control plane starts once.

mod agent_support;
mod support;

use agent_support::{install_chart, start_agent, token, write};
use agentcomputer_crds::{AgentComputer, ComputerPhase, ComputerSnapshot};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{Cluster, SYSTEM_NS, add_agent, add_node, eventually, wait_phase};

const NS: &str = "snappers";
const NODE: &str = "node-a";
/// The fake agent pod's IP: the in-process agent listens there on 7433.
const AGENT_IP: &str = "127.0.0.93";

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
    install_chart(&cluster);

    add_node(&admin, NODE).await;
    add_agent(&admin, NODE, AGENT_IP).await;
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    let data = cluster.dir.path().join("agent-data");
    let store = cluster.dir.path().join("backup-store");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    let _agent = start_agent(agent_id, NODE, AGENT_IP, &data, &store).await;
    let (operator, _) = cluster.start_operator("operator", false);

    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let c: AgentComputer = serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": "demo"}, "spec": {"storage": {"size": "64Mi"}, "retention": "1h"},
    }))
    .unwrap();
    computers.create(&PostParams::default(), &c).await.unwrap();
    let c = wait_phase(&computers, "demo", ComputerPhase::Ready, 90).await;
    let uid = c.uid().unwrap();
    let token = token(&admin, NS, "demo").await;
    // The agent serves it once it has seen the computer and its hash.
    eventually(60, "the agent to accept a write", || async {
        let t = token.clone();
        let u = uid.clone();
        tokio::spawn(async move { write(AGENT_IP, &u, &t, "hello.txt", b"hi there\n").await })
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
    // The computer's spec.retention reaches its node agent: a
    // point-in-time restore to two hours ago is outside its hour.
    let mut agent = agent_support::client(AGENT_IP).await;
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let e = agent
        .restore_computer(agent_support::with_token(
            agentcomputer_proto::v1::RestoreComputerRequest {
                computer: uid.clone(),
                snapshot: String::new(),
                unix_nanos: two_hours_ago
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as i64,
            },
            &token,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    assert!(
        e.message().contains("outside its retention window of 1h"),
        "{}",
        e.message()
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
    let listed = agent_support::ok(
        &cluster.kubectl(&["-n", NS, "get", "computersnapshots"], None),
        "kubectl get computersnapshots",
    );
    assert!(
        listed.contains("COMPUTER") && listed.contains("READY") && listed.contains("demo"),
        "{listed}"
    );

    // The example passes the API server's validation.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/examples/snapshot.yaml"
    );
    agent_support::ok(
        &cluster.kubectl(
            &["apply", "--dry-run=server", "-n", NS, "-f", example],
            None,
        ),
        "apply crds/examples/snapshot.yaml (dry run)",
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

    // --- The computer deleted with its data (reclaimPolicy Delete): the
    // retained snapshot's log went with it, so it is no longer usable. ---
    computers
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "demo deleted", || async {
        computers
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    reason_becomes(&snaps, "kept", "ComputerDeleted", &operator).await;
    let kept = snaps.get("kept").await.unwrap();
    assert_eq!(kept.status.unwrap().ready_to_use, Some(false));
    snaps
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "kept deleted", || async {
        snaps.get_opt("kept").await.unwrap().is_none().then_some(())
    })
    .await;
}
