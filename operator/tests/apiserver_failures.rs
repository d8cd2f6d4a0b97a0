//! The operator against a real kube-apiserver (see `support`), where its
//! objects meet the API server's own validation and admission:
//! - every egress mode and shape a user can write, with and without a
//!   sandbox pod, under a namespace ResourceQuota, is reconciled with every
//!   object accepted (`Reconciled=True`, `EgressReady=True`);
//! - storage changes once the claims are bound, as the PV controller binds
//!   them in a cluster (the API server then refuses a resize with 403):
//!   grow, grow then change egress, grow then change the sandbox image;
//! - a step the API server refuses (a ValidatingAdmissionPolicy freezing a
//!   computer's claim) shows as `Reconciled=False` with the reason, a
//!   Warning event and the error metric, `observedGeneration` stays behind,
//!   and the egress step after it still runs;
//! - a claim refused by a storage ResourceQuota takes no volume, no node
//!   label and no room, and says why.
//!
//! One test function, so that the control plane starts once.

mod support;

use std::path::Path;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::{
    Cluster, RELEASE, SYSTEM_NS, add_agent, add_node, eventually, http_get, publish_capacity,
    wait_phase,
};

const NS: &str = "shapes";
/// A namespace whose storage quota is too small for its computers.
const TIGHT: &str = "tight";

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

fn is_true(c: &AgentComputer, type_: &str) -> bool {
    condition(c, type_).is_some_and(|k| k.status == "True")
}

/// Waits until `name` shows `Reconciled=True` for its current generation,
/// and returns it.
async fn reconciled(api: &Api<AgentComputer>, name: &str, secs: u64) -> AgentComputer {
    let what = format!("{name} to be reconciled at its current generation");
    eventually(secs, &what, || async {
        let c = api.get(name).await.ok()?;
        let st = c.status.as_ref()?;
        let done = is_true(&c, "Reconciled") && st.observed_generation == c.metadata.generation;
        done.then_some(c)
    })
    .await
}

/// Waits up to `secs` for `name` to be Ready; on timeout fails with the
/// status it has then.
async fn ready_within(api: &Api<AgentComputer>, name: &str, secs: u64) -> AgentComputer {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let c = api.get(name).await.unwrap();
        if c.status.as_ref().and_then(|s| s.phase) == Some(ComputerPhase::Ready) {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} is not Ready after {secs} s: {:#?}",
            c.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn computer(name: &str, spec: Value) -> AgentComputer {
    serde_json::from_value(json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// Binds a computer's claim and volume as the PV controller of a cluster
/// does: from then on the API server treats a change of the claim's
/// request as a resize (PersistentVolumeClaimResize admission).
async fn bind(admin: &Client, ns: &str, c: &AgentComputer) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let claim = format!("{}-workspace", c.name_any());
    let volume = format!("agentcomputer-{}", c.uid().unwrap());
    let request = pvcs
        .get(&claim)
        .await
        .unwrap()
        .spec
        .unwrap()
        .resources
        .unwrap()
        .requests
        .unwrap()["storage"]
        .clone();
    pvs.patch_status(
        &volume,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await
    .unwrap();
    pvcs.patch_status(
        &claim,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Bound",
            "accessModes": ["ReadWriteOnce"], "capacity": {"storage": request}}})),
    )
    .await
    .unwrap();
}

/// Creates or changes ResourceQuota `storage` of `ns` to `hard`, and its
/// status as the quota controller would (absent here): without
/// `status.hard` admission does not enforce a quota; `status.used` starts
/// at zero and admission counts every object it admits.
async fn set_quota(admin: &Client, ns: &str, hard: Value) {
    let quotas: Api<ResourceQuota> = Api::namespaced(admin.clone(), ns);
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "storage"}, "spec": {"hard": hard}});
    let applied = quotas
        .patch(
            "storage",
            &PatchParams::apply("test").force(),
            &Patch::Apply(quota),
        )
        .await
        .unwrap();
    let used = applied
        .status
        .and_then(|s| s.used)
        .map(|u| serde_json::to_value(u).unwrap())
        .unwrap_or_else(|| {
            let zero: serde_json::Map<String, Value> = hard
                .as_object()
                .unwrap()
                .keys()
                .map(|k| (k.clone(), json!("0")))
                .collect();
            Value::Object(zero)
        });
    quotas
        .patch_status(
            "storage",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": hard, "used": used}})),
        )
        .await
        .unwrap();
}

/// The egress rules of a computer's NetworkPolicy that name IP blocks.
async fn ip_blocks(nps: &Api<NetworkPolicy>, name: &str) -> Vec<String> {
    let np = nps.get(&format!("{name}-egress")).await.unwrap();
    np.spec
        .unwrap()
        .egress
        .unwrap_or_default()
        .iter()
        .flat_map(|r| r.to.clone().unwrap_or_default())
        .filter_map(|p| p.ip_block.map(|b| b.cidr))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_steps_are_visible_and_do_not_stop_the_egress_step() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    for ns in [SYSTEM_NS, NS, TIGHT] {
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
    // Quotas of storage and of object counts, which admission checks on
    // every claim and pod the operator makes.
    set_quota(
        &admin,
        NS,
        json!({"requests.storage": "500Gi", "persistentvolumeclaims": "100", "pods": "100"}),
    )
    .await;
    set_quota(&admin, TIGHT, json!({"requests.storage": "1Gi"})).await;
    add_node(&admin, "node-a").await;
    add_node(&admin, "node-b").await;
    add_agent(&admin, "node-a", "10.244.1.10").await;
    add_agent(&admin, "node-b", "10.244.2.10").await;
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    publish_capacity(&agent_id, "node-a", "100Gi").await;
    publish_capacity(&agent_id, "node-b", "100Gi").await;
    let (_operator, metrics_port) = cluster.start_operator("operator", false);

    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    let nps: Api<NetworkPolicy> = Api::namespaced(admin.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let sandbox = json!({"image": "debian:bookworm-slim"});

    // --- Specs the node agent would refuse are refused by the API server,
    // with a message that says why (on create and on update). ---
    let refused = [
        (
            json!({"mode": "allow-list", "hosts": ["10.0.0.1"]}),
            "not IP addresses",
        ),
        (
            json!({"mode": "allow-list", "hosts": ["foo.123"]}),
            "not IP addresses",
        ),
        (
            json!({"mode": "allow-list", "hosts": [format!("{}.example.com", "a".repeat(70))]}),
            "should match",
        ),
    ];
    for (i, (egress, want)) in refused.iter().enumerate() {
        let spec = json!({"storage": {"size": "1Gi"}, "egress": egress});
        let err = computers
            .create(
                &PostParams::default(),
                &computer(&format!("refused-{i}"), spec),
            )
            .await
            .expect_err(&format!("accepted egress {egress}"));
        assert!(err.to_string().contains(want), "{egress}: {err}");
    }
    let memory = json!({"storage": {"size": "1Gi"}, "limits": {"memory": "-1"}});
    let err = computers
        .create(&PostParams::default(), &computer("refused-memory", memory))
        .await
        .expect_err("accepted limits.memory -1");
    assert!(
        err.to_string()
            .contains("limits.memory must be a quantity of bytes"),
        "{err}"
    );
    computers
        .create(
            &PostParams::default(),
            &computer(
                "tightened",
                json!({"storage": {"size": "1Gi"}, "egress": {"mode": "allow-all"}}),
            ),
        )
        .await
        .unwrap();
    let narrow = json!({"spec": {"egress": {"mode": "allow-list", "hosts": ["10.0.0.1"]}}});
    let err = computers
        .patch("tightened", &PatchParams::default(), &Patch::Merge(&narrow))
        .await
        .expect_err("accepted a host rule that is an address");
    assert!(err.to_string().contains("not IP addresses"), "{err}");

    // --- Storage changes on bound claims, with a sandbox. ---
    for name in ["grow", "grow-egress", "grow-image"] {
        let spec = json!({"storage": {"size": "1Gi"},
            "runtimes": {"container": true}, "sandbox": sandbox,
            "egress": {"mode": "allow-list", "cidrs": [{"cidr": "10.30.0.0/16"}]}});
        computers
            .create(&PostParams::default(), &computer(name, spec))
            .await
            .unwrap();
    }
    for name in ["grow", "grow-egress", "grow-image"] {
        let c = wait_phase(&computers, name, ComputerPhase::Ready, 60).await;
        bind(&admin, NS, &c).await;
        let grow = json!({"spec": {"storage": {"size": "10Gi"}}});
        computers
            .patch(name, &PatchParams::default(), &Patch::Merge(&grow))
            .await
            .unwrap();
    }
    for name in ["grow", "grow-egress", "grow-image"] {
        let c = computers.get(name).await.unwrap();
        let volume = format!("agentcomputer-{}", c.uid().unwrap());
        eventually(30, &format!("the volume of {name} to grow"), || async {
            let pv = pvs.get(&volume).await.ok()?;
            (pv.spec?.capacity?["storage"].0 == "10Gi").then_some(())
        })
        .await;
        // The claim keeps the request it was created with: the API server
        // refuses to resize a claim of a pre-provisioned volume.
        let claim = pvcs.get(&format!("{name}-workspace")).await.unwrap();
        assert_eq!(
            claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
            "1Gi"
        );
    }
    // Then a narrower egress: the sandbox's policy follows within seconds.
    let deny = json!({"spec": {"egress": {"mode": "deny-all", "cidrs": null}}});
    computers
        .patch("grow-egress", &PatchParams::default(), &Patch::Merge(&deny))
        .await
        .unwrap();
    eventually(
        15,
        "the policy of grow-egress to allow no IP block after the resize",
        || async {
            ip_blocks(&nps, "grow-egress")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    // Then another sandbox image: the pod is replaced with it.
    let image = json!({"spec": {"sandbox": {"image": "debian:trixie-slim"}}});
    computers
        .patch("grow-image", &PatchParams::default(), &Patch::Merge(&image))
        .await
        .unwrap();
    eventually(
        30,
        "the sandbox of grow-image to run the new image after the resize",
        || async {
            let p = pods.get_opt("grow-image-sandbox").await.ok()??;
            (p.spec?.containers[0].image.as_deref() == Some("debian:trixie-slim")).then_some(())
        },
    )
    .await;
    for name in ["grow", "grow-egress", "grow-image"] {
        let c = reconciled(&computers, name, 30).await;
        assert!(is_true(&c, "Ready"), "{name}: {:?}", c.status);
        assert_eq!(
            c.status.unwrap().volume.unwrap().capacity.unwrap().0,
            "10Gi"
        );
    }

    // --- Every egress shape a user can write, with and without a sandbox,
    // under the namespace's quota: all objects accepted. ---
    let shapes = [
        ("deny", json!({})),
        ("open", json!({"mode": "allow-all"})),
        (
            "open-md",
            json!({"mode": "allow-all", "allowMetadata": true}),
        ),
        (
            "hosts",
            json!({"mode": "allow-list", "hosts": ["pypi.org", "*.example.com", "a-b.c9.example"]}),
        ),
        (
            "cidrs",
            json!({"mode": "allow-list", "cidrs": [
                {"cidr": "10.20.0.0/16"},
                {"cidr": "192.168.1.0/24", "ports": [{"port": 443}, {"port": 53, "protocol": "UDP"}]},
                {"cidr": "172.16.0.0/12", "ports": [{"port": 8000, "endPort": 8100, "protocol": "TCP"}]},
                {"cidr": "169.254.0.0/16"},
                {"cidr": "0.0.0.0/0", "ports": [{"port": 443}]}]}),
        ),
        (
            "v6",
            json!({"mode": "allow-list", "cidrs": [
                {"cidr": "2001:db8::/32"},
                {"cidr": "fd00::/8", "ports": [{"port": 443}]},
                {"cidr": "64:ff9b::/96"},
                {"cidr": "::/0", "ports": [{"port": 80, "endPort": 90}]}]}),
        ),
        (
            "mixed",
            json!({"mode": "allow-list", "hosts": ["*.pypi.org"], "cidrs": [
                {"cidr": "10.0.0.0/8", "ports": [{"port": 5432}]},
                {"cidr": "2001:db8:1::/48"}]}),
        ),
        (
            "mixed-md",
            json!({"mode": "allow-list", "allowMetadata": true, "hosts": ["example.com"],
                   "cidrs": [{"cidr": "169.254.169.254/32"}, {"cidr": "fd00:ec2::254/128"}]}),
        ),
    ];
    let mut names = Vec::new();
    for (shape, egress) in &shapes {
        for with_sandbox in [false, true] {
            let name = format!("{shape}{}", if with_sandbox { "-sb" } else { "" });
            let mut spec = json!({"storage": {"size": "1Gi"}, "egress": egress});
            if with_sandbox {
                spec["runtimes"] = json!({"container": true});
                spec["sandbox"] = sandbox.clone();
            }
            computers
                .create(&PostParams::default(), &computer(&name, spec))
                .await
                .unwrap_or_else(|e| panic!("the API server refused computer {name}: {e}"));
            names.push((name, with_sandbox));
        }
    }
    for (name, with_sandbox) in &names {
        let what = format!("{name} to be Ready with every object applied");
        let c = eventually(60, &what, || async {
            let c = computers.get(name).await.ok()?;
            let failed = condition(&c, "Reconciled").filter(|k| k.status == "False");
            assert!(failed.is_none(), "{name}: {failed:?}");
            (is_true(&c, "Reconciled") && is_true(&c, "EgressReady") && is_true(&c, "Ready"))
                .then_some(c)
        })
        .await;
        assert_eq!(c.status.unwrap().observed_generation, c.metadata.generation);
        assert!(
            nps.get_opt(&format!("{name}-egress"))
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            pods.get_opt(&format!("{name}-sandbox"))
                .await
                .unwrap()
                .is_some(),
            *with_sandbox,
            "{name}"
        );
    }
    // allow-all: one block per family, each with its own exceptions.
    let np = nps.get("open-egress").await.unwrap().spec.unwrap();
    let peers = np.egress.unwrap()[0].to.clone().unwrap();
    let v4 = peers[0].ip_block.clone().unwrap();
    let v6 = peers[1].ip_block.clone().unwrap();
    assert_eq!((v4.cidr.as_str(), v6.cidr.as_str()), ("0.0.0.0/0", "::/0"));
    assert!(
        v4.except
            .unwrap()
            .contains(&"169.254.169.254/32".to_string())
    );
    let v6_except = v6.except.unwrap();
    assert!(v6_except.contains(&"fd00:ec2::254/128".to_string()));
    assert!(
        !v6_except.iter().any(|e| e.starts_with("::ffff:")),
        "{v6_except:?}"
    );

    // --- A step the API server refuses: the claims of `frozen` are frozen
    // by a ValidatingAdmissionPolicy (as a webhook or policy engine might). ---
    computers
        .create(
            &PostParams::default(),
            &computer(
                "frozen",
                json!({"storage": {"size": "1Gi"}, "runtimes": {"container": true},
                       "sandbox": sandbox, "egress": {"mode": "allow-all"}}),
            ),
        )
        .await
        .unwrap();
    let before = reconciled(&computers, "frozen", 60).await;
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "freeze-claims"},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["persistentvolumeclaims"]}]},
            "validations": [{"expression": "object.metadata.name != 'frozen-workspace'",
                "message": "claims of frozen are frozen by the cluster's policy",
                "reason": "Forbidden"}]}});
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "freeze-claims"},
        "spec": {"policyName": "freeze-claims", "validationActions": ["Deny"]}});
    for obj in [&policy, &binding] {
        ok(
            &cluster.kubectl(&["apply", "-f", "-"], Some(&obj.to_string())),
            "the freezing policy",
        );
    }
    // The policy takes effect once the API server has loaded it.
    let pvcs_admin = pvcs.clone();
    eventually(30, "the freezing policy to be in force", || async {
        let probe = json!({"metadata": {"labels": {"probe": "1"}}});
        pvcs_admin
            .patch(
                "frozen-workspace",
                &PatchParams::default(),
                &Patch::Merge(&probe),
            )
            .await
            .is_err()
            .then_some(())
    })
    .await;
    // A change of egress meanwhile: applied although the volume step fails.
    let narrow = json!({"spec": {"egress": {"mode": "deny-all"}}});
    let changed = computers
        .patch("frozen", &PatchParams::default(), &Patch::Merge(&narrow))
        .await
        .unwrap();
    assert!(changed.metadata.generation > before.metadata.generation);
    eventually(15, "the policy of frozen to deny all", || async {
        ip_blocks(&nps, "frozen").await.is_empty().then_some(())
    })
    .await;
    let failing = eventually(30, "frozen to show Reconciled=False", || async {
        let c = computers.get("frozen").await.ok()?;
        condition(&c, "Reconciled")
            .filter(|k| k.status == "False")
            .map(|_| c)
    })
    .await;
    let rec = condition(&failing, "Reconciled").unwrap();
    assert_eq!(rec.reason, "Forbidden", "{rec:?}");
    assert!(
        rec.message.starts_with("step volume: ")
            && rec.message.contains("claims of frozen are frozen"),
        "{rec:?}"
    );
    let vol = condition(&failing, "VolumeReady").unwrap();
    assert_eq!(
        (vol.status.as_str(), vol.reason.as_str()),
        ("False", "Forbidden")
    );
    assert!(is_true(&failing, "EgressReady"), "{:?}", failing.status);
    assert_eq!(
        condition(&failing, "Ready").unwrap().reason,
        "ReconcileFailed"
    );
    assert_eq!(
        failing.status.as_ref().unwrap().observed_generation,
        before.metadata.generation,
        "observedGeneration stays at the last generation fully applied"
    );
    // kubectl describe shows the reason, and one Warning event tells it.
    let describe = ok(
        &cluster.kubectl(&["describe", "computer", "frozen", "-n", NS], None),
        "kubectl describe",
    );
    assert!(
        describe.contains("Reconciled") && describe.contains("claims of frozen are frozen"),
        "{describe}"
    );
    let metrics = eventually(10, "the error metric of the volume step", || async {
        let m = http_get(metrics_port, "/metrics").await;
        m.contains(
            "agentcomputer_operator_reconcile_errors_total{reason=\"forbidden\",step=\"volume\"}",
        )
        .then_some(m)
    })
    .await;
    assert!(metrics.contains("step=\"volume\""), "{metrics}");
    // Retried every few seconds, told once.
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    let events = ok(
        &cluster.kubectl(
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "involvedObject.name=frozen",
                "-o",
                "jsonpath={range .items[*]}{.reason}|{.type}|{.series.count}{\"\\n\"}{end}",
            ],
            None,
        ),
        "events of frozen",
    );
    let warnings: Vec<&str> = events
        .lines()
        .filter(|l| l.starts_with("Forbidden|Warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{events}");
    // The policy lifted: reconciled, the generation caught up, and told.
    for kind in [
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ] {
        ok(
            &cluster.kubectl(&["delete", kind, "freeze-claims"], None),
            "lift the policy",
        );
    }
    let healed = reconciled(&computers, "frozen", 60).await;
    assert!(is_true(&healed, "VolumeReady") && is_true(&healed, "Ready"));
    let events = ok(
        &cluster.kubectl(
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "involvedObject.name=frozen",
                "-o",
                "custom-columns=R:.reason",
            ],
            None,
        ),
        "events of frozen",
    );
    assert!(events.contains("Applied"), "{events}");

    // --- A claim the storage quota refuses: no volume, no room taken. ---
    let tight: Api<AgentComputer> = Api::namespaced(admin.clone(), TIGHT);
    for name in ["big-1", "big-2"] {
        tight
            .create(
                &PostParams::default(),
                &computer(name, json!({"storage": {"size": "54Gi"}})),
            )
            .await
            .unwrap();
    }
    for name in ["big-1", "big-2"] {
        let refused = eventually(
            30,
            &format!("{name} to say why it has no volume"),
            || async {
                let c = tight.get(name).await.ok()?;
                condition(&c, "VolumeReady")
                    .filter(|k| k.status == "False")
                    .map(|_| c)
            },
        )
        .await;
        let vol = condition(&refused, "VolumeReady").unwrap();
        assert_eq!(vol.reason, "Forbidden", "{vol:?}");
        assert!(vol.message.contains("exceeded quota"), "{vol:?}");
        let st = refused.status.clone().unwrap();
        assert_eq!(st.phase, Some(ComputerPhase::Pending));
        assert_eq!(st.node, None);
        assert_eq!(condition(&refused, "Reconciled").unwrap().status, "False");
        assert!(
            refused.labels().get("agentcomputer.dev/node").is_none(),
            "a computer without a claim is not given to a node agent"
        );
        let volume = format!("agentcomputer-{}", refused.uid().unwrap());
        assert!(
            pvs.get_opt(&volume).await.unwrap().is_none(),
            "no PV for {name}"
        );
    }
    // Their 2 x 54Gi were not kept from the nodes: a 60Gi computer fits.
    computers
        .create(
            &PostParams::default(),
            &computer("after-big", json!({"storage": {"size": "60Gi"}})),
        )
        .await
        .unwrap();
    wait_phase(&computers, "after-big", ComputerPhase::Ready, 30).await;
    let events = ok(
        &cluster.kubectl(
            &[
                "get",
                "events",
                "-n",
                TIGHT,
                "-o",
                "custom-columns=R:.reason,N:.message",
            ],
            None,
        ),
        "events of the tight namespace",
    );
    assert!(
        events.contains("Forbidden") && events.contains("exceeded quota"),
        "{events}"
    );
    // Room in the quota (and on the nodes, once the 60Gi computer is
    // gone): both are placed, one per node, and Ready.
    computers
        .delete("after-big", &Default::default())
        .await
        .unwrap();
    set_quota(&admin, TIGHT, json!({"requests.storage": "200Gi"})).await;
    for name in ["big-1", "big-2"] {
        let placed = ready_within(&tight, name, 60).await;
        assert!(placed.labels().get("agentcomputer.dev/node").is_some());
        reconciled(&tight, name, 30).await;
    }
}
