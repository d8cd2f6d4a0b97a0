//! Storage room per namespace against a real kube-apiserver (see
//! `support`):
//! - a ResourceQuota on `requests.storage` bounds the claims, whose request
//!   is the quota at creation only: a computer that grows past the
//!   ResourceQuota gets the grown volume, the quota's `used` unchanged;
//! - `--namespace-storage-limit` bounds the computers' quotas themselves: a
//!   new computer past it stays Pending with `Placed=False`, reason
//!   `NamespaceStorageLimit`, and takes no claim, volume or node; a growth
//!   past it leaves the volume at its capacity (`StorageGranted=False`);
//!   room freed by a deletion is granted in creation order.
//!
//! One test function, so that the control plane starts once.

mod support;

use std::path::Path;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, ResourceQuota};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{
    Cluster, RELEASE, SYSTEM_NS, add_agent, add_node, eventually, publish_capacity, wait_phase,
};

/// Bounded by a ResourceQuota only.
const QUOTA_NS: &str = "by-quota";
/// Bounded by the operator's limit of 10Gi.
const CAPPED: &str = "capped";

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn condition(c: &AgentComputer, type_: &str) -> Option<Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|k| k.type_ == type_)
        .cloned()
}

fn computer(name: &str, size: &str) -> AgentComputer {
    serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": name}, "spec": {"storage": {"size": size}},
    }))
    .unwrap()
}

/// The capacity of computer `c`'s PersistentVolume.
async fn pv_capacity(pvs: &Api<PersistentVolume>, c: &AgentComputer) -> Option<String> {
    let pv = pvs
        .get_opt(&format!("agentcomputer-{}", c.uid().unwrap()))
        .await
        .unwrap()?;
    Some(pv.spec?.capacity?.get("storage")?.0.clone())
}

/// ResourceQuota `storage` of `ns` with `hard`, and the status the quota
/// controller (absent here) would give it, so that admission enforces it.
async fn set_quota(admin: &kube::Client, ns: &str, hard: Value) {
    let quotas: Api<ResourceQuota> = Api::namespaced(admin.clone(), ns);
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "storage"}, "spec": {"hard": hard}});
    quotas
        .patch(
            "storage",
            &PatchParams::apply("test").force(),
            &Patch::Apply(quota),
        )
        .await
        .unwrap();
    quotas
        .patch_status(
            "storage",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": hard, "used": {"requests.storage": "0"}}})),
        )
        .await
        .unwrap();
}

/// Changes `name`'s quota.
async fn grow(api: &Api<AgentComputer>, name: &str, size: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"storage": {"size": size}}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_is_bounded_by_its_claims_and_by_the_operators_limit() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    for ns in [SYSTEM_NS, QUOTA_NS, CAPPED] {
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
            "--set",
            "operator.namespaceStorageLimit=10Gi",
        ]),
        "helm template",
    );
    assert!(
        rendered.contains("- --namespace-storage-limit=10Gi"),
        "the chart passes operator.namespaceStorageLimit"
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
    set_quota(&admin, QUOTA_NS, json!({"requests.storage": "3Gi"})).await;
    add_node(&admin, "node-a").await;
    add_agent(&admin, "node-a", "10.244.1.10").await;
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    publish_capacity(&agent_id, "node-a", "1Ti").await;
    let (_operator, _) = cluster.start_operator_with(
        &cluster.operator_kubeconfig,
        "operator",
        false,
        &["--namespace-storage-limit=10Gi"],
    );
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());

    // --- A ResourceQuota counts the claim as created, not the growth. ---
    let by_quota: Api<AgentComputer> = Api::namespaced(admin.clone(), QUOTA_NS);
    by_quota
        .create(&PostParams::default(), &computer("small", "1Gi"))
        .await
        .unwrap();
    let small = wait_phase(&by_quota, "small", ComputerPhase::Ready, 60).await;
    grow(&by_quota, "small", "9Gi").await;
    eventually(30, "small's volume to grow to 9Gi", || async {
        (pv_capacity(&pvs, &small).await.as_deref() == Some("9Gi")).then_some(())
    })
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), QUOTA_NS);
    let claim = claims.get("small-workspace").await.unwrap();
    assert_eq!(
        claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "1Gi",
        "the claim keeps its first request: the ResourceQuota (3Gi) never sees the 9Gi volume"
    );

    // --- The operator's limit: 10Gi of quotas per namespace. ---
    let capped: Api<AgentComputer> = Api::namespaced(admin.clone(), CAPPED);
    for name in ["a", "b"] {
        capped
            .create(&PostParams::default(), &computer(name, "4Gi"))
            .await
            .unwrap();
        wait_phase(&capped, name, ComputerPhase::Ready, 60).await;
    }
    capped
        .create(&PostParams::default(), &computer("c", "4Gi"))
        .await
        .unwrap();
    let c = eventually(30, "c refused for the namespace's limit", || async {
        let c = capped.get("c").await.ok()?;
        (condition(&c, "Placed")?.reason == "NamespaceStorageLimit").then_some(c)
    })
    .await;
    let placed = condition(&c, "Placed").unwrap();
    assert_eq!(placed.status, "False");
    assert_eq!(
        placed.message,
        "namespace capped: 4Gi more would bring its computers' quotas to 12Gi, over the operator's limit of 10Gi per namespace (--namespace-storage-limit); 2Gi is free"
    );
    let st = c.status.clone().unwrap();
    assert_eq!(st.phase, Some(ComputerPhase::Pending));
    assert_eq!(st.node, None);
    assert!(!c.labels().contains_key("agentcomputer.dev/node"));
    let capped_claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), CAPPED);
    assert!(
        capped_claims
            .get_opt("c-workspace")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(pv_capacity(&pvs, &c).await, None, "c took no volume");

    // A growth within the limit is applied (a: 4 -> 6, total 10).
    grow(&capped, "a", "6Gi").await;
    let a = capped.get("a").await.unwrap();
    eventually(30, "a's volume to grow to 6Gi", || async {
        (pv_capacity(&pvs, &a).await.as_deref() == Some("6Gi")).then_some(())
    })
    .await;
    // One past it is not: b keeps its 4Gi volume and says why.
    grow(&capped, "b", "8Gi").await;
    let b = eventually(30, "b's growth refused", || async {
        let b = capped.get("b").await.ok()?;
        let k = condition(&b, "StorageGranted")?;
        (k.status == "False").then_some(b)
    })
    .await;
    let granted = condition(&b, "StorageGranted").unwrap();
    assert_eq!(granted.reason, "NamespaceStorageLimit");
    assert!(
        granted.message.starts_with(
            "the volume keeps its capacity: namespace capped: 4Gi more would bring its computers' quotas to 14Gi"
        ),
        "{}",
        granted.message
    );
    assert_eq!(pv_capacity(&pvs, &b).await.as_deref(), Some("4Gi"));
    assert_eq!(
        b.status
            .as_ref()
            .unwrap()
            .volume
            .as_ref()
            .unwrap()
            .capacity
            .as_ref()
            .unwrap()
            .0,
        "4Gi"
    );
    // The computer itself keeps running at the capacity it has.
    assert_eq!(b.status.as_ref().unwrap().phase, Some(ComputerPhase::Ready));

    // Deleting a frees 6Gi: b's growth (earlier than c) is granted first,
    // c still waits (4 + 4 > 10 - 4); deleting b then places c.
    capped.delete("a", &DeleteParams::default()).await.unwrap();
    eventually(150, "b's growth granted once a is gone", || async {
        let b = capped.get("b").await.ok()?;
        let ok = condition(&b, "StorageGranted")?.status == "True"
            && pv_capacity(&pvs, &b).await.as_deref() == Some("8Gi");
        ok.then_some(())
    })
    .await;
    let c = capped.get("c").await.unwrap();
    assert_eq!(
        condition(&c, "Placed").unwrap().reason,
        "NamespaceStorageLimit"
    );
    capped.delete("b", &DeleteParams::default()).await.unwrap();
    let c = wait_phase(&capped, "c", ComputerPhase::Ready, 150).await;
    assert_eq!(pv_capacity(&pvs, &c).await.as_deref(), Some("4Gi"));
    assert_eq!(condition(&c, "StorageGranted").unwrap().status, "True");
}
