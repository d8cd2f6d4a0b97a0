//! Scale benchmark (ignored by default): 1,000 AgentComputers against a real
//! kube-apiserver + etcd on this machine. Prints the time until every
//! computer is Ready with its PV, PVC, Secret and NetworkPolicy, the same for
//! deleting them all, and the operator's peak RSS (VmHWM).
//!
//! Run it with the optimized operator:
//! `cargo test --release -p agentcomputer-operator --test scale -- --ignored --nocapture`
//! (`SCALE_COMPUTERS` and `SCALE_NODES` change the sizes).

mod support;

use std::sync::Arc;
use std::time::Instant;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Cluster, SYSTEM_NS, eventually};

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn setup_nodes(client: &Client, n: usize) {
    for ns in [SYSTEM_NS, "bench"] {
        support::create_namespace(client, ns).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NS);
    for i in 0..n {
        let name = format!("node-{i:03}");
        let node = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(node).unwrap(),
            )
            .await
            .unwrap();
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .unwrap();
        let pod = json!({"metadata": {"name": format!("agent-{name}"), "labels": {
                "app.kubernetes.io/name": "agentcomputer-node-agent", "app.kubernetes.io/instance": "ac"}},
            "spec": {"nodeName": name, "containers": [{"name": "a", "image": "node-agent:bench"}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
        let ps = json!({"status": {"phase": "Running", "podIP": format!("10.244.{i}.10"),
            "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(
            &format!("agent-{name}"),
            &PatchParams::default(),
            &Patch::Merge(ps),
        )
        .await
        .unwrap();
        support::publish_capacity(client, &name, "100Ti").await;
    }
}

async fn count<K>(api: &Api<K>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(
        &ListParams::default().labels("app.kubernetes.io/managed-by=agentcomputer-operator"),
    )
    .await
    .map(|l| l.items.len())
    .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
async fn thousand_computers() {
    let total = env_usize("SCALE_COMPUTERS", 1000);
    let node_count = env_usize("SCALE_NODES", 10);
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/agentcomputer.yaml");
    let out = cluster.kubectl(&["apply", "--server-side", "-f", crd], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cluster.kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "crd/agentcomputers.agentcomputer.dev",
        ],
        None,
    );
    assert!(out.status.success());
    setup_nodes(&admin, node_count).await;
    let (mut op, _port) =
        cluster.start_operator_with(&cluster.kubeconfig, "bench-operator", false, &[]);
    let pid = op.child.id();

    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), "bench");
    let started = Instant::now();
    let create = Arc::new(computers.clone());
    futures::stream::iter(0..total)
        .for_each_concurrent(32, |i| {
            let api = create.clone();
            async move {
                let c = json!({"apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
                    "metadata": {"name": format!("c{i:04}")},
                    "spec": {"storage": {"size": "1Gi"}, "egress": {"mode": "allow-all"}}});
                api.create(&PostParams::default(), &serde_json::from_value(c).unwrap())
                    .await
                    .unwrap();
            }
        })
        .await;
    let created = started.elapsed();
    let mut peak_sample = 0;
    eventually(1800, "every computer Ready", || {
        let computers = computers.clone();
        peak_sample = peak_sample.max(rss_kib(pid, "VmRSS:"));
        async move {
            let list = computers.list(&ListParams::default()).await.ok()?;
            let ready = list
                .items
                .iter()
                .filter(|c| c.status.as_ref().and_then(|s| s.phase) == Some(ComputerPhase::Ready))
                .count();
            (ready == total).then_some(())
        }
    })
    .await;
    let all_ready = started.elapsed();
    assert!(op.alive(), "operator died:\n{}", op.log_tail());

    let ns_pvc: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), "bench");
    let ns_secret: Api<Secret> = Api::namespaced(admin.clone(), "bench");
    let ns_np: Api<NetworkPolicy> = Api::namespaced(admin.clone(), "bench");
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let counts = (
        count(&pvs).await,
        count(&ns_pvc).await,
        count(&ns_secret).await,
        count(&ns_np).await,
    );
    assert_eq!(
        counts,
        (total, total, total, total),
        "(PVs, PVCs, Secrets, NetworkPolicies)"
    );

    // Spread: computers per node.
    let list = computers.list(&ListParams::default()).await.unwrap();
    let mut per_node = std::collections::BTreeMap::<String, usize>::new();
    for c in &list.items {
        *per_node
            .entry(c.status.as_ref().unwrap().node.clone().unwrap())
            .or_default() += 1;
    }
    let (min, max) = (
        per_node.values().min().copied().unwrap(),
        per_node.values().max().copied().unwrap(),
    );

    let del_start = Instant::now();
    computers
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    eventually(1800, "every computer deleted", || {
        let computers = computers.clone();
        async move {
            computers
                .list_metadata(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        }
    })
    .await;
    let deleted = del_start.elapsed();
    let hwm = rss_kib(pid, "VmHWM:");
    let apiserver_rss = rss_kib(cluster.apiserver.child.id(), "VmHWM:");
    let etcd_rss = rss_kib(cluster.etcd.child.id(), "VmHWM:");
    println!("scale: {total} computers on {node_count} nodes");
    println!(
        "scale: created (client, 32 in flight)   {:>8.1} s",
        created.as_secs_f64()
    );
    println!(
        "scale: all Ready with PV/PVC/Secret/NetworkPolicy {:>8.1} s ({:.0} computers/s)",
        all_ready.as_secs_f64(),
        total as f64 / all_ready.as_secs_f64()
    );
    println!(
        "scale: all deleted (finalizer cleanup)  {:>8.1} s",
        deleted.as_secs_f64()
    );
    println!("scale: computers per node min {min} max {max}");
    println!(
        "scale: operator peak RSS (VmHWM)        {:>8.1} MiB",
        hwm as f64 / 1024.0
    );
    println!(
        "scale: kube-apiserver peak RSS          {:>8.1} MiB",
        apiserver_rss as f64 / 1024.0
    );
    println!(
        "scale: etcd peak RSS                    {:>8.1} MiB",
        etcd_rss as f64 / 1024.0
    );
    op.kill();
}
