//! AgentComputer `spec.source` against a real kube-apiserver (see
//! `support`), with the operator binary and real node agents in cluster
//! mode served in this process, backing up to one `file://` directory:
//! - a computer from a ComputerSnapshot has the snapshot's files, and one
//!   from an AgentComputer (a fork) its source's files at its placement;
//!   both change on their own;
//! - a source that does not exist keeps the computer Pending
//!   (`SourceNotFound`);
//! - a fork deletes the snapshot it was made from once made, or once
//!   deleted before it was made;
//! - without the agents' backup store (operator without `--moves`) a
//!   computer that its source's node cannot take waits with
//!   `SourceOnAnotherNode`; with it (`--moves`), the same computer is
//!   placed on the other node, whose agent restores the snapshot there.
//!
//! One test function, so that the control plane starts once.

mod agent_support;
mod support;

use agentcomputer_crds::{AgentComputer, ComputerPhase, ComputerSnapshot};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;

use agent_support::{install_chart, read, start_agent, token, write};
use support::{Cluster, SYSTEM_NS, add_agent, add_node, eventually, wait_phase};

const NS: &str = "copies";
const A: &str = "node-a";
const A_IP: &str = "127.0.0.95";
const B: &str = "node-b";
const B_IP: &str = "127.0.0.96";

fn computer(name: &str, spec: serde_json::Value) -> AgentComputer {
    serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// `path` of computer `name` through the agent at `ip`, once it serves it.
async fn read_when_served(admin: &kube::Client, ip: &str, name: &str, path: &str) -> Vec<u8> {
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let uid = computers.get(name).await.unwrap().uid().unwrap();
    let token = token(admin, NS, name).await;
    eventually(60, &format!("{name}: {path} served"), || async {
        read(ip, &uid, &token, path).await.ok()
    })
    .await
}

/// The Placed condition's (reason, message) of computer `name`, once its
/// reason is `want`.
async fn placed_becomes(api: &Api<AgentComputer>, name: &str, want: &str) -> String {
    eventually(60, &format!("{name}: Placed reason {want}"), || async {
        let c = api.get(name).await.ok()?;
        let p = c
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Placed")?;
        (p.reason == want).then_some(p.message)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computers_start_from_snapshots_and_other_computers() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    for ns in [SYSTEM_NS, NS] {
        support::create_namespace(&admin, ns).await;
    }
    install_chart(&cluster);
    let store = cluster.dir.path().join("backup-store");
    std::fs::create_dir_all(&store).unwrap();
    let mut agents = Vec::new();
    for (node, ip) in [(A, A_IP), (B, B_IP)] {
        add_node(&admin, node).await;
        add_agent(&admin, node, ip).await;
        let data = cluster.dir.path().join(format!("{node}-data"));
        std::fs::create_dir_all(&data).unwrap();
        let identity = cluster.client_from(&cluster.node_agent_kubeconfig).await;
        agents.push(start_agent(identity, node, ip, &data, &store).await);
    }
    let (operator, _) = cluster.start_operator("operator", false);

    // The source, on node-a, with a file and a snapshot of it.
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let on_a = json!({"storage": {"size": "64Mi"}, "nodeSelector": {"kubernetes.io/hostname": A}});
    computers
        .create(&PostParams::default(), &computer("origin", on_a))
        .await
        .unwrap();
    let origin = wait_phase(&computers, "origin", ComputerPhase::Ready, 90).await;
    let origin_uid = origin.uid().unwrap();
    let origin_token = token(&admin, NS, "origin").await;
    eventually(60, "origin to accept a write", || async {
        let (u, t) = (origin_uid.clone(), origin_token.clone());
        tokio::spawn(async move { write(A_IP, &u, &t, "note.txt", b"from the snapshot\n").await })
            .await
            .ok()
    })
    .await;
    let snaps: Api<ComputerSnapshot> = Api::namespaced(admin.clone(), NS);
    let snap: ComputerSnapshot = serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "ComputerSnapshot",
        "metadata": {"name": "s1"}, "spec": {"computer": "origin"},
    }))
    .unwrap();
    snaps.create(&PostParams::default(), &snap).await.unwrap();
    eventually(90, "s1 readyToUse", || async {
        let s = snaps.get("s1").await.ok()?;
        (s.status?.ready_to_use == Some(true)).then_some(())
    })
    .await;
    // Changed after the snapshot: the copy from s1 has not this, the fork has.
    write(
        A_IP,
        &origin_uid,
        &origin_token,
        "note.txt",
        b"changed later\n",
    )
    .await;

    // --- From the snapshot: its files. ---
    let from_snapshot = json!({"storage": {"size": "64Mi"},
        "source": {"kind": "ComputerSnapshot", "name": "s1"}});
    computers
        .create(&PostParams::default(), &computer("copy", from_snapshot))
        .await
        .unwrap();
    let copy = wait_phase(&computers, "copy", ComputerPhase::Ready, 90).await;
    let copy_node = copy.status.as_ref().unwrap().node.clone().unwrap();
    assert_eq!(
        copy_node, A,
        "without --moves the copy goes to the source's node"
    );
    assert_eq!(
        copy.annotations()
            .get("agentcomputer.dev/source-snapshot")
            .map(String::as_str),
        Some(format!("cs-{}", snaps.get("s1").await.unwrap().uid().unwrap()).as_str())
    );
    let note = read_when_served(&admin, A_IP, "copy", "note.txt").await;
    assert_eq!(note, b"from the snapshot\n");

    // --- A fork: the source's files as they are now. ---
    let fork = json!({"storage": {"size": "64Mi"},
        "source": {"kind": "AgentComputer", "name": "origin"}});
    computers
        .create(&PostParams::default(), &computer("fork", fork))
        .await
        .unwrap();
    wait_phase(&computers, "fork", ComputerPhase::Ready, 90).await;
    let note = read_when_served(&admin, A_IP, "fork", "note.txt").await;
    assert_eq!(note, b"changed later\n");
    // Once made, the snapshot it was made from is deleted at the source.
    let fork_obj = computers.get("fork").await.unwrap();
    let handle = format!("fork-{}", fork_obj.uid().unwrap());
    let at_origin = agentcomputer_operator::snapshots::AgentCall::connect(
        &format!("{A_IP}:7433"),
        None,
        &origin_uid,
        &origin_token,
    )
    .await
    .unwrap();
    eventually(90, "the fork's snapshot deleted", || async {
        let c = computers.get("fork").await.ok()?;
        let gone = !c
            .annotations()
            .contains_key("agentcomputer.dev/source-snapshot");
        (gone && at_origin.clone().find(&handle).await.ok()?.is_none()).then_some(())
    })
    .await;
    // Each changes on its own.
    let fork_uid = computers.get("fork").await.unwrap().uid().unwrap();
    let fork_token = token(&admin, NS, "fork").await;
    write(
        A_IP,
        &fork_uid,
        &fork_token,
        "note.txt",
        b"the fork's own\n",
    )
    .await;
    assert_eq!(
        read(A_IP, &origin_uid, &origin_token, "note.txt")
            .await
            .unwrap(),
        b"changed later\n"
    );

    // --- A source that does not exist. ---
    let ghost = json!({"storage": {"size": "64Mi"},
        "source": {"kind": "ComputerSnapshot", "name": "nope"}});
    computers
        .create(&PostParams::default(), &computer("ghost", ghost))
        .await
        .unwrap();
    let why = placed_becomes(&computers, "ghost", "SourceNotFound").await;
    assert!(why.contains("ComputerSnapshot nope not found"), "{why}");

    // --- Only node-b may take it, and there is no backup store to carry
    // the snapshot there: refused, with the reason. ---
    let far = json!({"storage": {"size": "64Mi"},
        "nodeSelector": {"kubernetes.io/hostname": B},
        "source": {"kind": "ComputerSnapshot", "name": "s1"}});
    computers
        .create(&PostParams::default(), &computer("far", far))
        .await
        .unwrap();
    let why = placed_becomes(&computers, "far", "SourceOnAnotherNode").await;
    assert!(why.contains(&format!("its source is on node {A}")), "{why}");
    assert!(why.contains("no backup store"), "{why}");

    // --- A fork that never got a node, deleted: the snapshot taken for
    // it goes too. ---
    let doomed = json!({"storage": {"size": "64Mi"},
        "nodeSelector": {"kubernetes.io/hostname": "nowhere"},
        "source": {"kind": "AgentComputer", "name": "origin"}});
    computers
        .create(&PostParams::default(), &computer("doomed", doomed))
        .await
        .unwrap();
    placed_becomes(&computers, "doomed", "SourceOnAnotherNode").await;
    let doomed_handle = format!(
        "fork-{}",
        computers.get("doomed").await.unwrap().uid().unwrap()
    );
    assert!(
        at_origin
            .clone()
            .find(&doomed_handle)
            .await
            .unwrap()
            .is_some(),
        "the fork's snapshot is taken before it is placed"
    );
    computers
        .delete("doomed", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "the doomed fork's snapshot deleted", || async {
        let gone = computers.get_opt("doomed").await.ok()?.is_none();
        (gone && at_origin.clone().find(&doomed_handle).await.ok()?.is_none()).then_some(())
    })
    .await;

    // --- With the store (--moves), it goes to node-b, whose agent
    // restores the snapshot from the store. ---
    drop(operator);
    let (operator, _) = cluster.start_operator_with(
        &cluster.operator_kubeconfig,
        "operator-with-store",
        false,
        &["--moves=true", "--failover-after=1h"],
    );
    let far = wait_phase(&computers, "far", ComputerPhase::Ready, 90).await;
    assert_eq!(far.status.as_ref().unwrap().node.as_deref(), Some(B));
    let note = read_when_served(&admin, B_IP, "far", "note.txt").await;
    assert_eq!(note, b"from the snapshot\n", "{}", operator.log_tail());
    drop(agents);
}
