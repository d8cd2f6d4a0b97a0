//! Moving computers between nodes against a real kube-apiserver (see
//! `support`), the test playing both node agents through the computer's
//! writer Lease (docs/moves.md):
//! - `kubectl cordon` of the serving node starts a move (`Preparing`, the
//!   target labelled `agentcomputer.dev/move-target`); the target's
//!   `prepared-on` on the Lease starts the hand-over (`HandingOver`, the
//!   source told by `agentcomputer.dev/hand-over-to`); the source's
//!   `handed-over-to` makes the target the computer's node: status, label
//!   and PV move, `lastMove` records it, `Moving=False Moved`;
//! - a lost node (agent not ready, `agentcomputer.dev/failover: now`)
//!   fails over only once its writer Lease has expired;
//! - a move to a node that is not eligible is refused in the condition and
//!   the request removed.
//!
//! One test function, so that the control plane starts once.

mod support;

use std::path::Path;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{
    Cluster, RELEASE, SYSTEM_NS, add_agent, add_node, eventually, publish_capacity,
    set_agent_ready, wait_phase,
};

const NS: &str = "movers";

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn moving_condition(c: &AgentComputer) -> Option<Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|k| k.type_ == "Moving")
        .cloned()
}

/// Sets annotations (and optionally holder and renew time) on computer
/// `uid`'s writer Lease, as a node agent would.
async fn lease(
    admin: &kube::Client,
    uid: &str,
    spec: serde_json::Value,
    annotations: serde_json::Value,
) {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let name = format!("ac-{uid}");
    let obj = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "annotations": annotations}, "spec": spec});
    leases
        .patch(
            &name,
            &PatchParams::apply("test-agent").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap();
}

/// A Lease's MicroTime: RFC 3339 with exactly six fractional digits.
fn micro(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

async fn cordon(admin: &kube::Client, node: &str, on: bool) {
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computers_move_off_cordoned_nodes_and_fail_over_from_lost_ones() {
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
        ]),
        "helm template",
    );
    ok(
        &cluster.kubectl(&["apply", "--server-side", "-f", "-"], Some(&rendered)),
        "kubectl apply of the chart",
    );
    ok(
        &cluster.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "crd/agentcomputers.agentcomputer.dev",
                "--timeout=60s",
            ],
            None,
        ),
        "CRD established",
    );
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    for (node, ip) in [("node-a", "10.244.1.10"), ("node-b", "10.244.2.10")] {
        add_node(&admin, node).await;
        add_agent(&admin, node, ip).await;
        publish_capacity(&agent_id, node, "1Ti").await;
    }
    let (operator, _) = cluster.start_operator_with(
        &cluster.operator_kubeconfig,
        "operator",
        false,
        &["--moves=true", "--failover-after=1h"],
    );
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let c: AgentComputer = serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": "mover"}, "spec": {"storage": {"size": "1Gi"}},
    }))
    .unwrap();
    computers.create(&PostParams::default(), &c).await.unwrap();
    let c = wait_phase(&computers, "mover", ComputerPhase::Ready, 60).await;
    let uid = c.uid().unwrap();
    let source = c.status.as_ref().unwrap().node.clone().unwrap();
    let target = if source == "node-a" {
        "node-b"
    } else {
        "node-a"
    };

    // --- Cordon: the target prepares while the source serves. ---
    cordon(&admin, &source, true).await;
    let mut prepared = None;
    for _ in 0..60 {
        let c = computers.get("mover").await.unwrap();
        if c.status.as_ref().and_then(|s| s.moving.as_ref()).is_some() {
            prepared = Some(c);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let Some(c) = prepared else {
        panic!(
            "no move after the cordon: {:?}\noperator log:\n{}",
            computers.get("mover").await.unwrap().status,
            operator.log_tail()
        );
    };
    let m = c.status.as_ref().unwrap().moving.clone().unwrap();
    assert_eq!(
        (m.source.as_str(), m.target.as_str()),
        (source.as_str(), target)
    );
    assert_eq!(format!("{:?}", m.reason), "NodeCordoned");
    assert_eq!(
        c.labels()
            .get("agentcomputer.dev/move-target")
            .map(String::as_str),
        Some(target)
    );
    assert_eq!(
        c.status.as_ref().unwrap().node.as_deref(),
        Some(source.as_str()),
        "still at the source"
    );
    let cond = moving_condition(&c).expect("Moving condition");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "NodeCordoned")
    );

    // The source holds the Lease (a live computer), the target prepared.
    let now = k8s_openapi::jiff::Timestamp::now();
    lease(
        &admin,
        &uid,
        json!({"holderIdentity": source, "leaseDurationSeconds": 60, "renewTime": micro(now)}),
        json!({"agentcomputer.dev/prepared-on": format!("{target} 7")}),
    )
    .await;
    let c = eventually(30, "the hand-over to start", || async {
        let c = computers.get("mover").await.ok()?;
        (c.annotations()
            .get("agentcomputer.dev/hand-over-to")
            .map(String::as_str)
            == Some(target))
        .then_some(c)
    })
    .await;
    assert_eq!(
        format!(
            "{:?}",
            c.status.as_ref().unwrap().moving.as_ref().unwrap().phase
        ),
        "HandingOver"
    );
    // Still held by the source: nothing switches.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let c = computers.get("mover").await.unwrap();
    assert_eq!(
        c.status.as_ref().unwrap().node.as_deref(),
        Some(source.as_str())
    );

    // The source handed over and released the Lease.
    lease(
        &admin,
        &uid,
        json!({"holderIdentity": null}),
        json!({"agentcomputer.dev/prepared-on": format!("{target} 7"),
               "agentcomputer.dev/handed-over-to": format!("{target} 9")}),
    )
    .await;
    let c = eventually(30, "the target to become the node", || async {
        let c = computers.get("mover").await.ok()?;
        (c.status.as_ref()?.node.as_deref() == Some(target)).then_some(c)
    })
    .await;
    let st = c.status.clone().unwrap();
    assert!(st.moving.is_none(), "{:?}", st.moving);
    let last = st.last_move.clone().expect("lastMove");
    assert_eq!(
        (last.source.as_str(), last.target.as_str()),
        (source.as_str(), target)
    );
    assert!(last.hand_over_millis.is_some(), "{last:?}");
    assert_eq!(
        c.labels().get("agentcomputer.dev/node").map(String::as_str),
        Some(target)
    );
    assert!(!c.labels().contains_key("agentcomputer.dev/move-target"));
    assert!(
        !c.annotations()
            .contains_key("agentcomputer.dev/hand-over-to")
    );
    assert_eq!(
        moving_condition(&c).map(|k| (k.status, k.reason)),
        Some(("False".to_string(), "Moved".to_string()))
    );
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let pv = pvs.get(&format!("agentcomputer-{uid}")).await.unwrap();
    assert_eq!(
        pv.labels()
            .get("agentcomputer.dev/node")
            .map(String::as_str),
        Some(target)
    );
    wait_phase(&computers, "mover", ComputerPhase::Ready, 30).await;

    // --- A requested move to a node that is not eligible. ---
    computers
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"agentcomputer.dev/move-to": "no-such-node"}}}),
            ),
        )
        .await
        .unwrap();
    let c = eventually(30, "the bad target to be refused", || async {
        let c = computers.get("mover").await.ok()?;
        let k = moving_condition(&c)?;
        (k.reason == "TargetNotEligible"
            && !c.annotations().contains_key("agentcomputer.dev/move-to"))
        .then_some(c)
    })
    .await;
    assert!(
        moving_condition(&c)
            .unwrap()
            .message
            .contains("no-such-node")
    );
    assert_eq!(c.status.as_ref().unwrap().node.as_deref(), Some(target));

    // --- Node loss: fail over only once the lost node's Lease expired. ---
    cordon(&admin, &source, false).await;
    let target_ip = if target == "node-a" {
        "10.244.1.10"
    } else {
        "10.244.2.10"
    };
    set_agent_ready(&admin, target, target_ip, false).await;
    let renewed = k8s_openapi::jiff::Timestamp::now();
    lease(
        &admin,
        &uid,
        json!({"holderIdentity": target, "leaseDurationSeconds": 8, "renewTime": micro(renewed)}),
        json!({}),
    )
    .await;
    eventually(30, "the computer to be Unavailable", || async {
        let c = computers.get("mover").await.ok()?;
        (c.status.as_ref()?.phase == Some(ComputerPhase::Unavailable)).then_some(())
    })
    .await;
    computers
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"agentcomputer.dev/failover": "now"}}}),
            ),
        )
        .await
        .unwrap();
    let c = eventually(30, "the failover to wait for the Lease", || async {
        let c = computers.get("mover").await.ok()?;
        let m = c.status.as_ref()?.moving.clone()?;
        (format!("{:?}", m.reason) == "NodeLost").then_some(c)
    })
    .await;
    assert_eq!(
        c.status.as_ref().unwrap().node.as_deref(),
        Some(target),
        "not before the Lease expires"
    );
    let c = eventually(40, "the failover", || async {
        let c = computers.get("mover").await.ok()?;
        (c.status.as_ref()?.node.as_deref() == Some(source.as_str())).then_some(c)
    })
    .await;
    let waited = k8s_openapi::jiff::Timestamp::now().as_second() - renewed.as_second();
    assert!(
        waited >= 8,
        "failed over {waited} s after the last renewal of an 8 s Lease"
    );
    let last = c.status.as_ref().unwrap().last_move.clone().unwrap();
    assert_eq!(format!("{:?}", last.reason), "NodeLost");
    assert_eq!(
        (last.source.as_str(), last.target.as_str()),
        (target, source.as_str())
    );
    assert!(last.source_last_ready_time.is_some(), "{last:?}");
    assert!(!c.annotations().contains_key("agentcomputer.dev/failover"));
    wait_phase(&computers, "mover", ComputerPhase::Ready, 30).await;
}
