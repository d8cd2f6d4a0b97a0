//! The operator, the CRD and the Helm chart against a real kube-apiserver
//! and etcd (see `support`). There is no kubelet, scheduler or
//! controller-manager: Nodes and node-agent pods are created by the test and
//! their status is set through the status subresource, sandbox pods stay
//! Pending, and garbage collection does not run (owner references are
//! checked instead).
//!
//! One test function walks through the whole life cycle so that the control
//! plane starts once; every step says what it checks.

mod support;

use std::path::Path;
use std::time::Duration;

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::{
    Cluster, RELEASE, SYSTEM_NS, add_agent, add_node, eventually, http_get, publish_capacity,
    set_agent_ready, wait_phase,
};

const NS: &str = "team";

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_chart_and_crd_against_a_real_apiserver() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    support::create_namespace(&admin, SYSTEM_NS).await;
    support::create_namespace(&admin, NS).await;

    // --- The chart: lint, render, server-side dry run, then install. ---
    let chart = repo().join("charts/agent-computer");
    let chart = chart.to_str().unwrap();
    ok(&cluster.helm(&["lint", "--strict", chart]), "helm lint");
    let rendered = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart,
            "--namespace",
            SYSTEM_NS,
            "--include-crds",
            "--set",
            "metrics.serviceMonitor.enabled=false",
        ]),
        "helm template",
    );
    check_node_side_shape(&rendered);
    // CRDs first: the dry run of a CR-free chart needs no established CRD,
    // but installs apply CRDs before the rest, as helm does.
    let out = cluster.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered));
    ok(&out, "kubectl apply --dry-run=server of the rendered chart");
    // The plain form, with helm's default release name and namespace.
    let plain = ok(
        &cluster.helm(&["template", chart]),
        "helm template with defaults",
    );
    ok(
        &cluster.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&plain)),
        "dry run of the default render",
    );
    let monitored = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart,
            "--set",
            "metrics.serviceMonitor.enabled=true",
        ]),
        "helm template with ServiceMonitors",
    );
    assert_eq!(
        monitored.matches("kind: ServiceMonitor").count(),
        2,
        "{monitored}"
    );
    // Agents serving TLS: the operator gets the CA (never the key) and the
    // name to check; a secretName without serverName is refused.
    let tls = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart,
            "--namespace",
            SYSTEM_NS,
            "--set",
            "nodeAgent.tls.secretName=agent-tls",
            "--set",
            "nodeAgent.tls.serverName=node-agent.example",
        ]),
        "helm template with TLS",
    );
    assert!(
        tls.contains("--agent-tls-ca=/etc/agentcomputer/agent-tls/ca.crt")
            && tls.contains("--agent-tls-server-name=node-agent.example")
            && tls.contains("--tls-cert=/etc/agentcomputer/tls/tls.crt")
            && tls.contains("items:\n              # Only the certificates: the operator is not given the key.\n              - key: ca.crt\n                path: ca.crt\n")
            && !tls.contains("key: tls.key"),
        "{tls}"
    );
    ok(
        &cluster.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&tls)),
        "dry run of the TLS render",
    );
    // The API gateway (docs/gateway.md), with TLS on both of its sides:
    // its own certificate, and the agents' CA only (never their key);
    // the agents' NetworkPolicy admits it to the gRPC port.
    let gateway = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart,
            "--namespace",
            SYSTEM_NS,
            "--set",
            "gateway.enabled=true",
            "--set",
            "gateway.tls.secretName=gateway-tls",
            "--set",
            "nodeAgent.tls.secretName=agent-tls",
            "--set",
            "nodeAgent.tls.serverName=node-agent.example",
        ]),
        "helm template with the gateway",
    );
    assert!(
        gateway.contains("command: [agentcomputer-gateway]")
            && gateway.contains("--tls-cert=/etc/agentcomputer/gateway-tls/tls.crt")
            && gateway.contains("--agent-ca-cert=/etc/agentcomputer/agent-ca/ca.crt")
            && gateway.contains("--agent-tls-server-name=node-agent.example")
            && gateway.contains("kind: PodDisruptionBudget")
            && gateway.contains("app.kubernetes.io/name: agentcomputer-gateway"),
        "{gateway}"
    );
    ok(
        &cluster.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&gateway)),
        "dry run of the gateway render",
    );
    let refused = cluster.helm(&[
        "template",
        RELEASE,
        chart,
        "--set",
        "nodeAgent.tls.secretName=agent-tls",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("nodeAgent.tls.serverName is required"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    ok(
        &cluster.kubectl(&["apply", "--server-side", "-f", "-"], Some(&rendered)),
        "kubectl apply of the chart",
    );
    // Backups: the render with every backup value passes the API server's
    // validation, and only with backup.url may the node agent's identity
    // write Leases, and only in the release namespace.
    let backup_values = [
        "template",
        RELEASE,
        chart,
        "--namespace",
        SYSTEM_NS,
        "--set",
        "backup.url=s3://agentcomputer/e2e",
        "--set",
        "backup.endpoint=http://store.storage.svc:7070",
        "--set",
        "backup.credentialsSecret=backup-keys",
        "--set-json",
        r#"backup.egressTo=[{"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"storage"}}}],"ports":[{"port":7070,"protocol":"TCP"}]}]"#,
    ];
    let backup = ok(&cluster.helm(&backup_values), "helm template with backups");
    ok(
        &cluster.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&backup)),
        "dry run of the backup render",
    );
    let agent_may = |verb: &str, ns: &str| {
        let out = cluster.kubectl(
            &[
                "auth",
                "can-i",
                verb,
                "leases.coordination.k8s.io",
                "-n",
                ns,
                "--as",
                support::NODE_AGENT_USER,
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(
        !agent_may("create", SYSTEM_NS),
        "the node agent may write Leases without backups"
    );
    let mut rbac_only = backup_values.to_vec();
    rbac_only.extend(["--show-only", "templates/node-agent-rbac.yaml"]);
    let backup_rbac = ok(&cluster.helm(&rbac_only), "the backup render's RBAC");
    ok(
        &cluster.kubectl(&["apply", "--server-side", "-f", "-"], Some(&backup_rbac)),
        "kubectl apply of the backup render's RBAC",
    );
    eventually(30, "the backup Role to take effect", || async {
        agent_may("create", SYSTEM_NS).then_some(())
    })
    .await;
    // patch: a move's annotations on the Lease (docs/moves.md).
    for verb in ["get", "list", "update", "patch", "delete"] {
        assert!(agent_may(verb, SYSTEM_NS), "{verb} on Leases not granted");
    }
    assert!(!agent_may("watch", SYSTEM_NS));
    assert!(
        !agent_may("create", NS) && !agent_may("update", "default"),
        "Lease access outside the release namespace"
    );
    ok(
        &cluster.kubectl(
            &[
                "-n",
                SYSTEM_NS,
                "delete",
                "role,rolebinding",
                "ac-agent-computer-node-agent-backup",
            ],
            None,
        ),
        "delete the backup RBAC",
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
    // The committed manifest is the one the chart carries (the drift test
    // guarantees both equal the types); applying it again is a no-op.
    let crd_file = repo().join("crds/agentcomputer.yaml");
    ok(
        &cluster.kubectl(
            &["apply", "--server-side", "-f", crd_file.to_str().unwrap()],
            None,
        ),
        "apply committed CRD",
    );

    // --- kubectl explain reads the schema docs. ---
    // The OpenAPI document picks the CRD up a moment after it is established.
    let explain = eventually(30, "kubectl explain to know the CRD", || async {
        let out = cluster.kubectl(&["explain", "agentcomputer.spec.egress"], None);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .await;
    assert!(explain.contains("Outbound network policy"), "{explain}");
    assert!(
        explain.contains("allowMetadata") && explain.contains("hosts"),
        "{explain}"
    );
    let explain_mode = ok(
        &cluster.kubectl(&["explain", "agentcomputer.spec.egress.mode"], None),
        "explain mode",
    );
    assert!(explain_mode.contains("allow-list"), "{explain_mode}");

    // --- Invalid manifests are rejected with clear messages. ---
    let invalid = [
        (
            r#"{"metadata":{"name":"tiny"},"spec":{"storage":{"size":"10"}}}"#,
            "storage.size must be a quantity of at least 1Mi",
        ),
        (
            r#"{"metadata":{"name":"mode"},"spec":{"storage":{"size":"1Gi"},"egress":{"mode":"open"}}}"#,
            "Unsupported value: \"open\"",
        ),
        (
            r#"{"metadata":{"name":"lists"},"spec":{"storage":{"size":"1Gi"},"egress":{"hosts":["pypi.org"]}}}"#,
            "may only be set when egress.mode is allow-list",
        ),
        (
            r#"{"metadata":{"name":"cidr"},"spec":{"storage":{"size":"1Gi"},"egress":{"mode":"allow-list","cidrs":[{"cidr":"10.0.0.300/8"}]}}}"#,
            "cidr must be an IPv4 or IPv6 CIDR",
        ),
        (
            r#"{"metadata":{"name":"port"},"spec":{"storage":{"size":"1Gi"},"egress":{"mode":"allow-list","cidrs":[{"cidr":"10.0.0.0/8","ports":[{"port":70000}]}]}}}"#,
            "should be less than or equal to 65535",
        ),
        (
            r#"{"metadata":{"name":"host"},"spec":{"storage":{"size":"1Gi"},"egress":{"mode":"allow-list","hosts":["not a host"]}}}"#,
            "should match",
        ),
        (
            r#"{"metadata":{"name":"this-name-is-far-too-long-for-an-agent-computer-object-x"},"spec":{"storage":{"size":"1Gi"}}}"#,
            "at most 52 characters",
        ),
        (
            r#"{"metadata":{"name":"nosize"},"spec":{"storage":{}}}"#,
            "spec.storage.size: Required value",
        ),
        (
            r#"{"metadata":{"name":"policy"},"spec":{"storage":{"size":"1Gi","reclaimPolicy":"Recycle"}}}"#,
            "Unsupported value: \"Recycle\"",
        ),
        (
            r#"{"metadata":{"name":"nosandbox"},"spec":{"storage":{"size":"1Gi"},"runtimes":{"container":true}}}"#,
            "spec.sandbox (with at least its image) is required when spec.runtimes.container is true",
        ),
    ];
    for (body, want) in invalid {
        let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["apiVersion"] = json!("agentcomputer.dev/v1alpha1");
        v["kind"] = json!("AgentComputer");
        let out = cluster.kubectl(&["apply", "-n", NS, "-f", "-"], Some(&v.to_string()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "accepted an invalid computer: {body}"
        );
        assert!(
            stderr.contains(want),
            "rejection of {body} should say {want:?}, got: {stderr}"
        );
    }

    // --- Nodes with node agents, and the operator (two replicas). ---
    add_node(&admin, "node-a").await;
    add_node(&admin, "node-b").await;
    add_agent(&admin, "node-a", "10.244.1.10").await;
    add_agent(&admin, "node-b", "10.244.2.10").await;
    // Each node agent publishes its room, under the chart's node-agent RBAC.
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    publish_capacity(&agent_id, "node-a", "100Gi").await;
    publish_capacity(&agent_id, "node-b", "100Gi").await;
    let (mut op1, port1) = cluster.start_operator("operator-1", true);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let lease_name = format!("{RELEASE}-agent-computer-operator");
    let first_leader = eventually(30, "a leader lease", || async {
        leases
            .get_opt(&lease_name)
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    assert_eq!(first_leader, "operator-1");
    let (mut op2, _port2) = cluster.start_operator("operator-2", true);

    // --- kubectl apply of the examples creates the objects. ---
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    for ex in ["basic.yaml", "full.yaml"] {
        let f = repo().join("crds/examples").join(ex);
        ok(
            &cluster.kubectl(&["apply", "-n", NS, "-f", f.to_str().unwrap()], None),
            &format!("apply {ex}"),
        );
    }
    let scratch = wait_phase(&computers, "scratch", ComputerPhase::Ready, 60).await;
    let builder = wait_phase(&computers, "builder", ComputerPhase::Ready, 60).await;
    let (sn, bn) = (
        scratch.status.clone().unwrap().node.unwrap(),
        builder.status.clone().unwrap().node.unwrap(),
    );
    assert_ne!(sn, bn, "two computers on two empty nodes are spread");
    let st = scratch.status.clone().unwrap();
    let ip = if sn == "node-a" {
        "10.244.1.10"
    } else {
        "10.244.2.10"
    };
    assert_eq!(st.endpoint.as_deref(), Some(format!("{ip}:7433").as_str()));
    assert_eq!(st.observed_generation, scratch.metadata.generation);
    for t in [
        "Placed",
        "VolumeReady",
        "CredentialReady",
        "EgressReady",
        "Ready",
    ] {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("condition {t}"));
        assert_eq!(c.status, "True", "{t}: {c:?}");
    }
    assert!(
        scratch
            .finalizers()
            .contains(&"agentcomputer.dev/volume".to_string())
    );
    assert_eq!(
        scratch.labels().get("agentcomputer.dev/node"),
        Some(&sn),
        "labelled with its node for the node agent"
    );

    let get = ok(
        &cluster.kubectl(&["get", "computers", "-n", NS], None),
        "kubectl get computers",
    );
    let line = get
        .lines()
        .find(|l| l.starts_with("scratch"))
        .unwrap_or_else(|| panic!("{get}"));
    assert!(
        line.contains("Ready") && line.contains(&sn) && line.contains("5Gi"),
        "{get}"
    );
    assert!(
        get.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "PHASE", "NODE", "SIZE", "DISK", "BACKUP", "AGE"]),
        "{get}"
    );

    // The volume: PV labelled with the node, pre-bound to the claim.
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    let pv_name = format!("agentcomputer-{}", scratch.uid().unwrap());
    let pv = pvs.get(&pv_name).await.unwrap();
    let spec = pv.spec.clone().unwrap();
    assert_eq!(spec.csi.as_ref().unwrap().driver, "agentcomputer.dev");
    assert_eq!(
        spec.csi.as_ref().unwrap().volume_handle,
        scratch.uid().unwrap()
    );
    assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "5Gi");
    assert_eq!(
        spec.claim_ref.as_ref().unwrap().name.as_deref(),
        Some("scratch-workspace")
    );
    // Not pinned by node affinity (immutable): the computer can move, and
    // the sandbox pod is pinned by its own affinity instead.
    assert!(spec.node_affinity.is_none(), "{:?}", spec.node_affinity);
    assert_eq!(pv.labels().get("agentcomputer.dev/node"), Some(&sn));
    assert!(
        pv.finalizers()
            .contains(&"agentcomputer.dev/node-data".to_string()),
        "{:?}",
        pv.finalizers()
    );
    let attrs = spec
        .csi
        .as_ref()
        .unwrap()
        .volume_attributes
        .clone()
        .unwrap();
    assert_eq!(attrs["agentcomputer.dev/uid"], "1000");
    assert_eq!(attrs["agentcomputer.dev/gid"], "1000");
    assert_eq!(attrs["agentcomputer.dev/namespace"], NS);
    assert_eq!(attrs["agentcomputer.dev/name"], "scratch");
    let pvc = pvcs.get("scratch-workspace").await.unwrap();
    assert_eq!(
        pvc.spec.as_ref().unwrap().volume_name.as_deref(),
        Some(pv_name.as_str())
    );
    assert_eq!(pvc.owner_references()[0].uid, scratch.uid().unwrap());
    let listed = ok(
        &cluster.kubectl(&["get", "pvc", "-n", NS, "-o", "name"], None),
        "kubectl get pvc",
    );
    assert!(
        listed.contains("scratch-workspace") && listed.contains("builder-workspace"),
        "{listed}"
    );

    // Credential and egress policy.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let token = secrets
        .get("scratch-credential")
        .await
        .unwrap()
        .data
        .unwrap()["token"]
        .0
        .clone();
    assert_eq!(token.len(), 64);
    assert_eq!(st.credential_hash, Some(sha256_hex(&token)));
    let nps: Api<NetworkPolicy> = Api::namespaced(admin.clone(), NS);
    let deny = nps.get("scratch-egress").await.unwrap().spec.unwrap();
    // deny-all: Egress is a policy type and no egress rule admits anything.
    assert!(
        deny.policy_types
            .as_ref()
            .unwrap()
            .contains(&"Egress".to_string())
    );
    // deny-all by default: the only way out is the runner's connection to
    // the node agents' gRPC port.
    let denied = deny.egress.unwrap_or_default();
    assert_eq!(denied.len(), 1, "{denied:?}");
    let to_agents = &denied[0];
    let peer = &to_agents.to.as_ref().unwrap()[0];
    assert!(peer.ip_block.is_none());
    assert_eq!(
        peer.pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["app.kubernetes.io/name"],
        "agentcomputer-node-agent"
    );
    assert_eq!(
        peer.namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["kubernetes.io/metadata.name"],
        SYSTEM_NS
    );
    let ports = to_agents.ports.as_ref().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, Some(IntOrString::Int(7433)));
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    let allow = nps.get("builder-egress").await.unwrap().spec.unwrap();
    let rules = allow.egress.unwrap();
    assert_eq!(rules.len(), 4, "cidr, dns, proxy, runner: {rules:?}");
    assert_eq!(&rules[3], to_agents);
    assert_eq!(
        rules[0].to.as_ref().unwrap()[0]
            .ip_block
            .as_ref()
            .unwrap()
            .cidr,
        "10.20.0.0/16"
    );
    assert!(
        ok(
            &cluster.kubectl(&["get", "pods", "-n", NS], None),
            "get pods"
        )
        .contains("builder-sandbox")
    );

    // Sandbox pod of the container runtime (Pending: no scheduler here).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let sandbox = pods.get("builder-sandbox").await.unwrap();
    let pspec = sandbox.spec.unwrap();
    let ctr = &pspec.containers[0];
    assert_eq!(ctr.image.as_deref(), Some("node:22-bookworm"));
    let sc = ctr.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    assert_eq!(
        pspec.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    assert_eq!(
        ctr.volume_mounts.as_ref().unwrap()[0].mount_path,
        "/workspace"
    );
    // The runner: installed from the node-agent image by an init container
    // into an emptyDir, run as the main process, dialing the computer's
    // endpoint with the computer's token from its Secret.
    let init = &pspec.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "install-runner");
    assert_eq!(init.image.as_deref(), Some(support::RUNNER_IMAGE));
    assert_eq!(
        init.command.as_deref().unwrap(),
        ["agentcomputer-runner", "install", "/agentcomputer"]
    );
    let init_sc = init.security_context.as_ref().unwrap();
    assert_eq!(init_sc.allow_privilege_escalation, Some(false));
    assert_eq!(init_sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        init.volume_mounts.as_ref().unwrap()[0].mount_path,
        "/agentcomputer"
    );
    assert_eq!(
        ctr.command.as_deref().unwrap(),
        ["/agentcomputer/agentcomputer-runner", "serve"]
    );
    let runner_mount = ctr
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/agentcomputer")
        .expect("the runner's volume in the sandbox");
    assert_eq!(runner_mount.read_only, Some(true));
    let runner_volume = pspec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == runner_mount.name)
        .unwrap();
    assert!(runner_volume.empty_dir.is_some());
    let env = ctr.env.as_ref().unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} in {env:?}"))
    };
    // The runner dials the node-local agent Service's cluster IP (stable
    // across agent pods), not the agent pod's IP of the status endpoint.
    let agent_svc =
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(admin.clone(), SYSTEM_NS)
            .get(&format!("{RELEASE}-agent-computer-node-agent"))
            .await
            .unwrap();
    let agent_svc_spec = agent_svc.spec.unwrap();
    assert_eq!(
        agent_svc_spec.internal_traffic_policy.as_deref(),
        Some("Local")
    );
    let svc_ip = agent_svc_spec.cluster_ip.unwrap();
    assert_eq!(
        value("AGENTCOMPUTER_AGENT").value,
        Some(format!("{svc_ip}:7433"))
    );
    assert_ne!(
        value("AGENTCOMPUTER_AGENT").value,
        builder.status.as_ref().unwrap().endpoint
    );
    assert_eq!(value("AGENTCOMPUTER_COMPUTER").value, builder.uid());
    // A rotated token changes the spec, so the pod (and its runner) is
    // replaced with the new token.
    assert_eq!(
        value("AGENTCOMPUTER_CREDENTIAL_HASH").value,
        builder.status.as_ref().unwrap().credential_hash
    );
    let token_ref = value("AGENTCOMPUTER_TOKEN")
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (token_ref.name.as_str(), token_ref.key.as_str()),
        ("builder-credential", "token")
    );
    assert!(
        pods.get_opt("scratch-sandbox").await.unwrap().is_none(),
        "no sandbox without the container runtime"
    );
    let events = ok(
        &cluster.kubectl(
            &["get", "events", "-n", NS, "-o", "custom-columns=R:.reason"],
            None,
        ),
        "events",
    );
    assert!(events.contains("Placed"), "{events}");

    // --- Reconciling an unchanged computer writes nothing. ---
    async fn versions(admin: &Client, pv: &str) -> Vec<String> {
        let rv = |m: &kube::api::ObjectMeta| m.resource_version.clone().unwrap_or_default();
        let mut out = vec![rv(&Api::<PersistentVolume>::all(admin.clone())
            .get(pv)
            .await
            .unwrap()
            .metadata)];
        for name in ["scratch", "builder"] {
            out.push(rv(&Api::<Secret>::namespaced(admin.clone(), NS)
                .get(&format!("{name}-credential"))
                .await
                .unwrap()
                .metadata));
            out.push(rv(&Api::<NetworkPolicy>::namespaced(admin.clone(), NS)
                .get(&format!("{name}-egress"))
                .await
                .unwrap()
                .metadata));
            out.push(rv(&Api::<PersistentVolumeClaim>::namespaced(
                admin.clone(),
                NS,
            )
            .get(&format!("{name}-workspace"))
            .await
            .unwrap()
            .metadata));
        }
        out.push(rv(&Api::<Pod>::namespaced(admin.clone(), NS)
            .get("builder-sandbox")
            .await
            .unwrap()
            .metadata));
        out
    }
    let before = versions(&admin, &pv_name).await;
    let reconciles = |m: &str| -> u64 {
        m.lines()
            .find(|l| l.starts_with("agentcomputer_operator_reconciles_total{result=\"ok\"}"))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or(0)
    };
    let count_before = reconciles(&http_get(port1, "/metrics").await);
    for name in ["scratch", "builder"] {
        let poke = json!({"metadata": {"annotations": {"test/poke": "1"}}});
        computers
            .patch(name, &PatchParams::default(), &Patch::Merge(&poke))
            .await
            .unwrap();
    }
    eventually(30, "the poked computers to be reconciled", || async {
        (reconciles(&http_get(port1, "/metrics").await) >= count_before + 2).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        versions(&admin, &pv_name).await,
        before,
        "an unchanged computer's objects were rewritten"
    );

    // --- Updates: growing storage is accepted, shrinking is rejected. ---
    let grow = json!({"spec": {"storage": {"size": "6Gi"}}});
    computers
        .patch("scratch", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    eventually(30, "PV capacity to follow the quota", || async {
        let pv = pvs.get(&pv_name).await.ok()?;
        (pv.spec?.capacity?["storage"].0 == "6Gi").then_some(())
    })
    .await;
    // The API server does not resize a statically bound claim; it keeps its
    // request and the computer stays Ready. The status is written after the
    // claim, so once it shows the new capacity the claim was applied.
    eventually(30, "status to show the new capacity", || async {
        let c = computers.get("scratch").await.ok()?;
        (c.status?.volume?.capacity?.0 == "6Gi").then_some(())
    })
    .await;
    let claim = pvcs.get("scratch-workspace").await.unwrap();
    assert_eq!(
        claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "5Gi"
    );
    wait_phase(&computers, "scratch", ComputerPhase::Ready, 10).await;
    let shrink = json!({"spec": {"storage": {"size": "1Gi"}}});
    let err = computers
        .patch("scratch", &PatchParams::default(), &Patch::Merge(&shrink))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("storage.size may only grow"),
        "{err}"
    );

    // --- A node agent restarted with a new pod IP keeps the sandbox. ---
    // Its sandbox pod dials the node-local Service, so the agent's new pod
    // changes nothing in the pod's spec: the pod (and the FUSE mount the
    // mounter keeps for it) is not replaced.
    let sandbox_uid = pods.get("builder-sandbox").await.unwrap().uid();
    let bip = if bn == "node-a" {
        "10.244.1.10"
    } else {
        "10.244.2.10"
    };
    set_agent_ready(&admin, &bn, bip, false).await;
    wait_phase(&computers, "builder", ComputerPhase::Unavailable, 30).await;
    let moved_ip = if bn == "node-a" {
        "10.244.1.11"
    } else {
        "10.244.2.11"
    };
    set_agent_ready(&admin, &bn, moved_ip, true).await;
    let back = wait_phase(&computers, "builder", ComputerPhase::Ready, 30).await;
    assert_eq!(
        back.status.unwrap().endpoint.as_deref(),
        Some(format!("{moved_ip}:7433").as_str())
    );
    // A few reconciles' worth of time for a replacement to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        pods.get("builder-sandbox").await.unwrap().uid(),
        sandbox_uid,
        "the sandbox pod was replaced when its node agent restarted"
    );
    set_agent_ready(&admin, &bn, bip, true).await;

    // --- Node agent loss and recovery. ---
    set_agent_ready(&admin, &sn, ip, false).await;
    let lost = wait_phase(&computers, "scratch", ComputerPhase::Unavailable, 30).await;
    assert_eq!(
        lost.status.unwrap().node.as_deref(),
        Some(sn.as_str()),
        "not moved off its node"
    );
    set_agent_ready(&admin, &sn, ip, true).await;
    wait_phase(&computers, "scratch", ComputerPhase::Ready, 30).await;
    // The Node object itself goes away and comes back (the PV, pinned to it,
    // is left alone meanwhile: its node affinity is immutable).
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes.delete(&sn, &DeleteParams::default()).await.unwrap();
    let gone = wait_phase(&computers, "scratch", ComputerPhase::Unavailable, 30).await;
    let ready = gone
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "NodeGone", "{ready:?}");
    add_node(&admin, &sn).await;
    wait_phase(&computers, "scratch", ComputerPhase::Ready, 30).await;

    // --- Metrics and health of the leader. ---
    let metrics = http_get(port1, "/metrics").await;
    assert!(
        metrics.contains("agentcomputer_operator_reconciles_total{result=\"ok\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("agentcomputer_operator_computers{phase=\"Ready\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("agentcomputer_operator_leader 1"),
        "{metrics}"
    );
    assert_eq!(http_get(port1, "/healthz").await.trim(), "ok");

    // --- The node agent's RBAC: what it needs, and no Secrets. ---
    let agent_secrets: Api<Secret> = Api::namespaced(agent_id.clone(), NS);
    let denied = agent_secrets.get("scratch-credential").await.unwrap_err();
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403),
        "the node agent must not read secrets: {denied}"
    );
    let agent_computers: Api<AgentComputer> = Api::namespaced(agent_id.clone(), NS);
    let usage = json!({"apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer", "metadata": {"name": "scratch"},
        "status": {"volume": {"bytesUsed": 12345, "inodesUsed": 7, "diskBytes": 81920, "disk": "80Ki"}}});
    agent_computers
        .patch_status(
            "scratch",
            &PatchParams::apply("agentcomputer-node-agent"),
            &Patch::Apply(&usage),
        )
        .await
        .unwrap();
    let activity = json!({"metadata": {"annotations": {
        "agentcomputer.dev/last-activity": "2026-01-01T00:00:00Z"}}});
    agent_computers
        .patch("scratch", &PatchParams::default(), &Patch::Merge(&activity))
        .await
        .unwrap();

    // --- Rotating the token: the user's token is kept, the hash follows,
    // and the node agent's usage fields survive the operator's writes. ---
    let rotated = "5a".repeat(32);
    let edit = json!({"stringData": {"token": rotated}});
    secrets
        .patch(
            "scratch-credential",
            &PatchParams::default(),
            &Patch::Merge(&edit),
        )
        .await
        .unwrap();
    let want = sha256_hex(rotated.as_bytes());
    let after = eventually(30, "the credential hash to follow the rotation", || async {
        let c = computers.get("scratch").await.ok()?;
        (c.status.as_ref()?.credential_hash.as_deref() == Some(want.as_str())).then_some(c)
    })
    .await;
    let volume = after.status.unwrap().volume.unwrap();
    assert_eq!(
        (volume.bytes_used, volume.inodes_used, volume.disk_bytes),
        (Some(12345), Some(7), Some(81920))
    );
    // `kubectl get` shows the reported size on disk, for people, in its
    // DISK column.
    let get = ok(
        &cluster.kubectl(&["get", "computers", "-n", NS], None),
        "kubectl get computers",
    );
    let header: Vec<&str> = get.lines().next().unwrap().split_whitespace().collect();
    let disk = header
        .iter()
        .position(|h| *h == "DISK")
        .expect("DISK column");
    let line: Vec<&str> = get
        .lines()
        .find(|l| l.starts_with("scratch"))
        .unwrap_or_else(|| panic!("{get}"))
        .split_whitespace()
        .collect();
    assert_eq!(line[disk], "80Ki", "{get}");
    let kept = secrets
        .get("scratch-credential")
        .await
        .unwrap()
        .data
        .unwrap()["token"]
        .0
        .clone();
    assert_eq!(
        kept,
        rotated.as_bytes(),
        "the user's token is not overwritten"
    );

    // --- Server-side applies send typed objects: the status apply owns
    // status fields only (the status subresource resets the spec it
    // carries), and each child's apply is recorded under the operator. ---
    let scratch = computers.get("scratch").await.unwrap();
    let status_fields = operator_apply_fields(&scratch.metadata, Some("status"))
        .expect("the operator's status apply");
    assert!(status_fields.get("f:status").is_some(), "{status_fields}");
    assert!(
        status_fields.get("f:spec").is_none(),
        "the status apply owns no spec field: {status_fields}"
    );
    let owned = status_fields["f:status"].as_object().unwrap();
    assert!(
        owned.contains_key("f:conditions") && owned.contains_key("f:credentialHash"),
        "{status_fields}"
    );
    let policy = Api::<NetworkPolicy>::namespaced(admin.clone(), NS)
        .get("scratch-egress")
        .await
        .unwrap();
    let policy_fields =
        operator_apply_fields(&policy.metadata, None).expect("the operator's policy apply");
    assert!(policy_fields.get("f:spec").is_some(), "{policy_fields}");

    // --- Capacity-aware placement. ---
    let big = json!({"apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
                     "metadata": {"name": "big"}, "spec": {"storage": {"size": "200Gi"}}});
    computers
        .create(
            &PostParams::default(),
            &serde_json::from_value(big).unwrap(),
        )
        .await
        .unwrap();
    let waiting = eventually(30, "big to wait for room", || async {
        let c = computers.get("big").await.ok()?;
        let st = c.status?;
        let placed = st.conditions.iter().find(|x| x.type_ == "Placed")?.clone();
        (st.phase == Some(ComputerPhase::Pending)).then_some(placed)
    })
    .await;
    // Room is all both nodes lack: the reason says no node has room, which
    // a waiting client stops at; the operator still places it when room
    // comes.
    assert_eq!(waiting.reason, "NoNodeHasRoom");
    assert!(
        waiting
            .message
            .starts_with("0/2 nodes are eligible: 2 no room for 200Gi ("),
        "{}",
        waiting.message
    );
    // A node agent publishes more room: the waiting computer is placed at
    // once (the capacity watch), well before its 30 s retry.
    let t0 = std::time::Instant::now();
    publish_capacity(&agent_id, "node-b", "300Gi").await;
    let placed = wait_phase(&computers, "big", ComputerPhase::Ready, 20).await;
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(placed.status.unwrap().node.as_deref(), Some("node-b"));
    computers
        .delete("big", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "big to be gone", || async {
        computers.get_opt("big").await.ok()?.is_none().then_some(())
    })
    .await;

    // --- Deletion with reclaim policy Delete. ---
    computers
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "scratch to be gone", || async {
        computers
            .get_opt("scratch")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        secrets
            .get_opt("scratch-credential")
            .await
            .unwrap()
            .is_none()
    );
    assert!(nps.get_opt("scratch-egress").await.unwrap().is_none());
    // PV and PVC carry the API server's *-protection finalizers, which the
    // (absent) controller-manager would lift: they must at least be deleting.
    let gone_or_deleting =
        |ts: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| ts.is_some();
    if let Some(pvc) = pvcs.get_opt("scratch-workspace").await.unwrap() {
        assert!(
            gone_or_deleting(pvc.metadata.deletion_timestamp.as_ref()),
            "claim deleted"
        );
    }
    // The PV stays Terminating, marked for data deletion, until the node
    // agent has deleted the data and removed its finalizer.
    let terminating = pvs.get(&pv_name).await.unwrap();
    assert!(
        gone_or_deleting(terminating.metadata.deletion_timestamp.as_ref()),
        "volume deleted"
    );
    assert_eq!(
        terminating
            .annotations()
            .get("agentcomputer.dev/delete-data")
            .map(String::as_str),
        Some("true")
    );
    let fins = terminating.finalizers().to_vec();
    let at = fins
        .iter()
        .position(|f| f == "agentcomputer.dev/node-data")
        .unwrap_or_else(|| panic!("node agent's finalizer holds the PV: {fins:?}"));
    // The node agent (its own RBAC) releases it.
    let release = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": "agentcomputer.dev/node-data"},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")}
    ]);
    Api::<PersistentVolume>::all(agent_id.clone())
        .patch(
            &pv_name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(release).unwrap()),
        )
        .await
        .unwrap();
    if let Some(pv) = pvs.get_opt(&pv_name).await.unwrap() {
        assert!(
            !pv.finalizers()
                .contains(&"agentcomputer.dev/node-data".to_string()),
            "{:?}",
            pv.finalizers()
        );
    }

    // --- Deletion with reclaim policy Retain. ---
    let builder_pv = format!("agentcomputer-{}", builder.uid().unwrap());
    computers
        .delete("builder", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "builder to be gone", || async {
        computers
            .get_opt("builder")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let kept_pvc = pvcs.get("builder-workspace").await.unwrap();
    assert!(
        kept_pvc.metadata.deletion_timestamp.is_none() && kept_pvc.owner_references().is_empty(),
        "claim kept and orphaned"
    );
    let kept_pv = pvs.get(&builder_pv).await.unwrap();
    assert!(kept_pv.metadata.deletion_timestamp.is_none());
    assert_eq!(
        kept_pv.annotations()["agentcomputer.dev/retained-from"],
        format!("{NS}/builder")
    );
    assert!(
        pods.get_opt("builder-sandbox")
            .await
            .unwrap()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    );

    // --- Re-creating a computer whose claim was kept: reported, not stuck. ---
    let full = repo().join("crds/examples/full.yaml");
    ok(
        &cluster.kubectl(&["apply", "-n", NS, "-f", full.to_str().unwrap()], None),
        "re-apply full.yaml",
    );
    let blocked = eventually(30, "the kept claim to be reported", || async {
        let c = computers.get_opt("builder").await.ok()??;
        let st = c.status.clone()?;
        let cond = st.conditions.iter().find(|x| x.type_ == "VolumeReady")?;
        (cond.status == "False" && cond.reason == "ClaimFromEarlierComputer").then_some(c)
    })
    .await;
    let status = blocked.status.clone().unwrap();
    assert_eq!(status.phase, Some(ComputerPhase::Pending));
    let message = &status
        .conditions
        .iter()
        .find(|x| x.type_ == "VolumeReady")
        .unwrap()
        .message;
    assert!(
        message.contains("builder-workspace") && message.contains(&builder_pv),
        "{message}"
    );
    let new_pv = format!("agentcomputer-{}", blocked.uid().unwrap());
    assert!(
        pvs.get_opt(&new_pv).await.unwrap().is_none(),
        "no volume made"
    );
    let kept = pvcs.get("builder-workspace").await.unwrap();
    assert_eq!(
        kept.spec.unwrap().volume_name.as_deref(),
        Some(builder_pv.as_str())
    );
    // Deleting the kept claim (no controller-manager here lifts its
    // protection finalizer, so the test does) lets the computer start with
    // a volume of its own.
    pvcs.delete("builder-workspace", &DeleteParams::default())
        .await
        .unwrap();
    let lift = json!({"metadata": {"finalizers": null}});
    let _ = pvcs
        .patch(
            "builder-workspace",
            &PatchParams::default(),
            &Patch::Merge(&lift),
        )
        .await;
    let reborn = wait_phase(&computers, "builder", ComputerPhase::Ready, 60).await;
    assert_eq!(reborn.uid(), blocked.uid());
    let claim = pvcs.get("builder-workspace").await.unwrap();
    assert_eq!(
        claim.spec.unwrap().volume_name.as_deref(),
        Some(new_pv.as_str())
    );
    assert!(
        pvs.get_opt(&builder_pv).await.unwrap().is_some(),
        "kept volume stays"
    );

    // --- Leader failover: kill the leader, the standby takes over. ---
    assert!(op2.alive(), "standby runs:\n{}", op2.log_tail());
    assert_eq!(
        leases
            .get(&lease_name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("operator-1")
    );
    op1.kill();
    eventually(40, "operator-2 to take the lease", || async {
        let holder = leases.get(&lease_name).await.ok()?.spec?.holder_identity?;
        (holder == "operator-2").then_some(())
    })
    .await;
    let after = json!({"apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
                       "metadata": {"name": "after-failover"}, "spec": {"storage": {"size": "1Gi"}}});
    computers
        .create(
            &PostParams::default(),
            &serde_json::from_value(after).unwrap(),
        )
        .await
        .unwrap();
    wait_phase(&computers, "after-failover", ComputerPhase::Ready, 60).await;
    assert!(op2.alive(), "operator-2 exited:\n{}", op2.log_tail());
    drop(op2);
    drop(cluster);
}

/// Sets a sandbox pod's status as a kubelet would once its runner was
/// installed: `sandbox` is the sandbox container's state (and `last` its
/// last state), `ready` whether it runs.
async fn set_sandbox_status(
    pods: &Api<Pod>,
    name: &str,
    ready: bool,
    sandbox: serde_json::Value,
    last: serde_json::Value,
) {
    let pod = pods.get(name).await.unwrap();
    let runner = agentcomputer_operator::resources::pod::runner_image(&pod)
        .unwrap()
        .to_string();
    let flag = if ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": flag}, {"type": "ContainersReady", "status": flag}],
        "initContainerStatuses": [{"name": "install-runner", "image": runner, "imageID": "",
            "ready": true, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        "containerStatuses": [{"name": "sandbox", "image": "debian:bookworm-slim", "imageID": "",
            "ready": ready, "restartCount": 1, "started": ready,
            "state": sandbox, "lastState": last}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// The computer's `SandboxReady` condition once `check` accepts it.
async fn wait_sandbox(
    computers: &Api<AgentComputer>,
    name: &str,
    what: &str,
    check: impl Fn(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> bool,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let check = &check;
    eventually(30, &format!("{name}: {what}"), || async move {
        let c = computers.get(name).await.ok()?;
        let cond = c
            .status?
            .conditions
            .into_iter()
            .find(|x| x.type_ == "SandboxReady")?;
        check(&cond).then_some(cond)
    })
    .await
}

/// A new product version (the operator restarted with another runner
/// image, as `helm upgrade` to a new image tag does) keeps running
/// sandbox pods: same pod, same runner image, and the computer's
/// `SandboxReady` says a newer runner is pending. The new image comes with
/// the next pod: after an idle stop and wake, and at once for a pod whose
/// runner the node agent refuses (status 3, nothing can run in it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_runner_image_keeps_running_sandboxes() {
    if support::skipped() {
        return;
    }
    const NEXT: &str = "registry.test/agentcomputer/node-agent:next";
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    support::create_namespace(&admin, SYSTEM_NS).await;
    support::create_namespace(&admin, NS).await;
    let chart = repo().join("charts/agent-computer");
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
    add_node(&admin, "node-a").await;
    add_agent(&admin, "node-a", "10.244.1.10").await;
    let agent_id = cluster.client_from(&cluster.node_agent_kubeconfig).await;
    publish_capacity(&agent_id, "node-a", "100Gi").await;
    let (mut v1, _) = cluster.start_operator("operator-v1", false);

    // --- Two computers with running sandboxes, under the first version. ---
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS);
    for name in ["steady", "stale"] {
        let c = json!({"apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
            "metadata": {"name": name},
            "spec": {"storage": {"size": "1Gi"}, "runtimes": {"container": true},
                     "sandbox": {"image": "debian:bookworm-slim", "idleTimeoutSeconds": 600}}});
        computers
            .create(&PostParams::default(), &serde_json::from_value(c).unwrap())
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let running = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
    let mut uids = Vec::new();
    for name in ["steady", "stale"] {
        let pod_name = format!("{name}-sandbox");
        let pod = eventually(30, &format!("{pod_name} to be made"), || async {
            pods.get_opt(&pod_name).await.ok()?
        })
        .await;
        assert_eq!(
            agentcomputer_operator::resources::pod::runner_image(&pod),
            Some(support::RUNNER_IMAGE)
        );
        uids.push(pod.uid().unwrap());
        set_sandbox_status(&pods, &pod_name, true, running.clone(), json!({})).await;
        let cond = wait_sandbox(&computers, name, "sandbox ready", |c| c.status == "True").await;
        assert!(!cond.message.contains("pending"), "{}", cond.message);
    }

    // --- The new version: the operator restarts with another runner image. ---
    v1.kill();
    let (v2, _) = cluster.start_operator_with(
        &cluster.operator_kubeconfig,
        "operator-v2",
        false,
        &[&format!("--runner-image={NEXT}")],
    );
    for name in ["steady", "stale"] {
        let cond = wait_sandbox(&computers, name, "the newer runner reported pending", |c| {
            c.message.contains(&format!("{NEXT} pending"))
        })
        .await;
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("True", "Running")
        );
        assert!(
            cond.message
                .contains(&format!("runner {} kept", support::RUNNER_IMAGE)),
            "{}",
            cond.message
        );
    }
    // A few reconciles' worth of time for a replacement to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, uid) in ["steady", "stale"].iter().zip(&uids) {
        let pod = pods.get(&format!("{name}-sandbox")).await.unwrap();
        assert_eq!(
            pod.uid().as_ref(),
            Some(uid),
            "{name}'s sandbox was replaced"
        );
        assert!(pod.metadata.deletion_timestamp.is_none());
        assert_eq!(
            agentcomputer_operator::resources::pod::runner_image(&pod),
            Some(support::RUNNER_IMAGE),
            "{name}'s running sandbox was given another runner"
        );
    }

    // --- A runner the upgraded node agent refuses: replaced at once. ---
    let why = "sandbox runner 0.1.0 speaks attach protocol 1, this node agent serves 2 to 2";
    set_sandbox_status(
        &pods,
        "stale-sandbox",
        false,
        json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}),
        json!({"terminated": {"exitCode": 3, "reason": "Error", "message": why}}),
    )
    .await;
    let replaced = eventually(30, "the refused sandbox to be replaced", || async {
        let pod = pods.get_opt("stale-sandbox").await.ok()??;
        (pod.uid().as_ref() != Some(&uids[1])).then_some(pod)
    })
    .await;
    assert_eq!(
        agentcomputer_operator::resources::pod::runner_image(&replaced),
        Some(NEXT)
    );
    // The new pod has the configured runner: nothing is pending any more.
    let cond = wait_sandbox(&computers, "stale", "the new sandbox starting", |c| {
        c.reason == "Starting"
    })
    .await;
    assert!(!cond.message.contains("pending"), "{}", cond.message);

    // --- The steady computer goes idle, then is used again. ---
    let idle = json!({"metadata": {"annotations": {
        "agentcomputer.dev/last-activity": "2026-01-01T00:00:00Z"}}});
    computers
        .patch("steady", &PatchParams::default(), &Patch::Merge(&idle))
        .await
        .unwrap();
    wait_sandbox(&computers, "steady", "stopped when idle", |c| {
        c.reason == "Idle"
    })
    .await;
    eventually(30, "the idle sandbox to be gone", || async {
        pods.get_opt("steady-sandbox")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let used = json!({"metadata": {"annotations": {"agentcomputer.dev/last-activity": now}}});
    computers
        .patch("steady", &PatchParams::default(), &Patch::Merge(&used))
        .await
        .unwrap();
    let woken = eventually(30, "the woken sandbox", || async {
        pods.get_opt("steady-sandbox").await.ok()?
    })
    .await;
    assert_ne!(woken.uid().as_ref(), Some(&uids[0]));
    assert_eq!(
        agentcomputer_operator::resources::pod::runner_image(&woken),
        Some(NEXT),
        "the next pod carries the new runner"
    );
    set_sandbox_status(&pods, "steady-sandbox", true, running.clone(), json!({})).await;
    let cond = wait_sandbox(&computers, "steady", "the new sandbox ready", |c| {
        c.status == "True"
    })
    .await;
    assert!(!cond.message.contains("pending"), "{}", cond.message);

    // --- Its workspace mount is lost (the runner exited 4): replaced, and
    // WorkspaceLost until the new pod is ready. ---
    let lost =
        "workspace mount lost: statfs /workspace: ENOTCONN: Transport endpoint is not connected";
    set_sandbox_status(
        &pods,
        "steady-sandbox",
        false,
        json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}),
        json!({"terminated": {"exitCode": 4, "reason": "Error", "message": lost}}),
    )
    .await;
    let woken_uid = woken.uid().unwrap();
    let renewed = eventually(30, "the sandbox with a lost workspace replaced", || async {
        let pod = pods.get_opt("steady-sandbox").await.ok()??;
        (pod.uid().as_ref() != Some(&woken_uid)).then_some(pod)
    })
    .await;
    let cond = wait_sandbox(&computers, "steady", "the lost workspace reported", |c| {
        c.reason == "WorkspaceLost"
    })
    .await;
    assert_eq!(cond.status, "False");
    // A few reconciles: the reason stays while the new pod starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cond = wait_sandbox(
        &computers,
        "steady",
        "the lost workspace still reported",
        |_| true,
    )
    .await;
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "WorkspaceLost"),
        "{}",
        cond.message
    );
    assert_eq!(
        pods.get("steady-sandbox").await.unwrap().uid(),
        renewed.uid(),
        "the new pod was replaced again"
    );
    set_sandbox_status(&pods, "steady-sandbox", true, running, json!({})).await;
    wait_sandbox(&computers, "steady", "the new sandbox ready", |c| {
        c.status == "True" && c.reason == "Running"
    })
    .await;
    drop(v2);
    drop(cluster);
}

/// The privilege split as rendered: the mounter privileged with the kubelet
/// directory and no API token, the agent unprivileged without it.
fn check_node_side_shape(rendered: &str) {
    use serde::Deserialize;
    let mut daemonsets = std::collections::HashMap::new();
    for doc in serde_yaml::Deserializer::from_str(rendered) {
        let v = serde_json::Value::deserialize(doc).unwrap();
        if v["kind"] == "DaemonSet" {
            daemonsets.insert(v["metadata"]["name"].as_str().unwrap().to_string(), v);
        }
    }
    let mounter =
        &daemonsets[&format!("{RELEASE}-agent-computer-mounter")]["spec"]["template"]["spec"];
    let agent =
        &daemonsets[&format!("{RELEASE}-agent-computer-node-agent")]["spec"]["template"]["spec"];
    assert_eq!(daemonsets.len(), 2, "{:?}", daemonsets.keys());

    assert_eq!(mounter["automountServiceAccountToken"], false);
    let m = &mounter["containers"][0];
    assert_eq!(m["securityContext"]["privileged"], true);
    assert_eq!(m["command"], json!(["agentcomputer-mounter"]));
    let margs: Vec<&str> = m["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--csi-endpoint=unix:///var/lib/kubelet/plugins/agentcomputer.dev/csi.sock",
        "--registration-dir=/var/lib/kubelet/plugins_registry",
        "--handover-socket=/var/lib/agentcomputer/run/mounter.sock",
        "--agent-uid=65532",
        "--agent-gid=65532",
        "--data-dir=/var/lib/agentcomputer/data",
        "--agent-grace=300",
    ] {
        assert!(margs.contains(&want), "mounter lacks {want}: {margs:?}");
    }
    let kubelet = m["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["mountPath"] == "/var/lib/kubelet")
        .expect("mounter mounts the kubelet directory");
    assert_eq!(kubelet["mountPropagation"], "Bidirectional");

    let a = &agent["containers"][0];
    let sc = &a["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null());
    assert_eq!(agent["securityContext"]["runAsNonRoot"], true);
    assert_eq!(agent["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        agent["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let host_paths: Vec<&str> = agent["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        host_paths,
        ["/var/lib/agentcomputer/data", "/var/lib/agentcomputer/run"],
        "the agent sees only its data and run directories"
    );
    let aargs: Vec<&str> = a["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(aargs[0], "cluster");
    for want in [
        "--namespace=$(POD_NAMESPACE)",
        "--overcommit=1.0",
        "--handover-socket=/var/lib/agentcomputer/run/mounter.sock",
    ] {
        assert!(aargs.contains(&want), "agent lacks {want}: {aargs:?}");
    }
    assert!(
        rendered.contains("kind: NetworkPolicy"),
        "agent NetworkPolicy rendered"
    );
}

/// "sha256:" and the hex SHA-256 of `bytes`, from coreutils' sha256sum (an
/// implementation independent of the operator's).
fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

/// The fields the operator's server-side apply owns on an object (on
/// `subresource`, None for the object itself), from its managedFields.
fn operator_apply_fields(
    meta: &kube::api::ObjectMeta,
    subresource: Option<&str>,
) -> Option<serde_json::Value> {
    meta.managed_fields
        .as_ref()?
        .iter()
        .find(|e| {
            e.manager.as_deref() == Some("agentcomputer-operator")
                && e.operation.as_deref() == Some("Apply")
                && e.subresource.as_deref() == subresource
        })
        .and_then(|e| e.fields_v1.as_ref())
        .map(|f| f.0.clone())
}
