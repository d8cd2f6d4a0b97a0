//! The Helm chart's node-agent DaemonSet starts the real `node-agent`
//! binary with arguments it accepts (an argument the binary does not know
//! would crash-loop every node's agent). Renders the chart with the Helm
//! the API server tests use.

#[path = "../../operator/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

/// `helm template` of the chart with `extra` arguments: the rendered
/// objects, or helm's stderr.
fn render(extra: &[&str]) -> Result<Vec<serde_json::Value>, String> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/agent-computer");
    let out = Command::new(support::tools_bin().join("helm"))
        .arg("template")
        .arg("ac")
        .arg(&chart)
        .args(["--namespace", support::SYSTEM_NS])
        .args(extra)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let rendered = String::from_utf8(out.stdout).unwrap();
    Ok(serde_yaml::Deserializer::from_str(&rendered)
        .map(|doc| serde_json::Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect())
}

#[test]
fn the_chart_starts_node_agent_with_arguments_it_accepts() {
    if support::skipped() {
        return;
    }
    let objects = render(&[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    let args = agent_args(&objects);
    assert!(
        !args.iter().any(|a| a.starts_with("--share")),
        "share links are off by default: {args:?}"
    );
    for want in [
        "--api-connections-per-source=64",
        "--api-unauthenticated-per-source=8",
        "--api-auth-deadline=10s",
        "--proxy-connections-per-computer=256",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    agent_accepts(&args);
}

/// With share links on, the agent gets its share arguments (which it
/// accepts), the share port, and a NetworkPolicy rule admitting only the
/// peers of nodeAgent.share.from to it; without share.url helm refuses.
#[test]
fn the_chart_serves_share_links_when_asked() {
    if support::skipped() {
        return;
    }
    let objects = render(&[
        "--set",
        "nodeAgent.share.enabled=true",
        "--set",
        "nodeAgent.share.url=https://files.example.com/",
        "--set",
        "nodeAgent.share.maxDownloadsPerComputer=4",
        "--set-json",
        r#"nodeAgent.share.from=[{"podSelector":{"matchLabels":{"app":"share-gateway"}}}]"#,
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let args = agent_args(&objects);
    for want in [
        "--share-listen=0.0.0.0:7434",
        "--share-url=https://files.example.com/",
        "--max-downloads=64",
        "--download-min-rate=4Ki",
        "--max-downloads-per-computer=4",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    agent_accepts(&args);
    let ports = &agent_container(&objects)["ports"];
    assert!(
        ports
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "share" && p["containerPort"] == 7434),
        "{ports}"
    );
    let share_rules = ingress_rules_on(&objects, 7434);
    assert_eq!(share_rules.len(), 1, "{share_rules:?}");
    assert_eq!(
        share_rules[0]["from"],
        serde_json::json!([{"podSelector": {"matchLabels": {"app": "share-gateway"}}}])
    );
    let refused = render(&["--set", "nodeAgent.share.enabled=true"]).unwrap_err();
    assert!(
        refused.contains("nodeAgent.share.url is required"),
        "{refused}"
    );
}

/// The rules of the node agents' ingress NetworkPolicy that open `port`.
fn ingress_rules_on(objects: &[serde_json::Value], port: u16) -> Vec<serde_json::Value> {
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy" && o["spec"]["ingress"].is_array())
        .expect("the node agents' ingress NetworkPolicy");
    policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"] == port)
        })
        .cloned()
        .collect()
}

/// The node-agent container of the rendered DaemonSets.
fn agent_container(objects: &[serde_json::Value]) -> serde_json::Value {
    objects
        .iter()
        .filter(|v| v["kind"] == "DaemonSet")
        .flat_map(|v| {
            v["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["command"] == serde_json::json!(["node-agent"]))
        .expect("a DaemonSet container running node-agent")
}

/// The node agent's arguments as the kubelet passes them.
/// The value of variable `name` in the operator Deployment's container.
fn operator_env(objects: &[serde_json::Value], name: &str) -> Option<String> {
    let deployment = objects.iter().find(|o| {
        o["kind"] == "Deployment"
            && o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-operator"))
    })?;
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(String::from)
}

fn agent_args(objects: &[serde_json::Value]) -> Vec<String> {
    let container = agent_container(objects);
    // The kubelet expands $(VAR) from the container's environment.
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(NODE_NAME)", "n1")
                .replace("$(POD_NAMESPACE)", support::SYSTEM_NS)
        })
        .collect()
}

/// Runs the real node-agent with `args`: it must get past parsing them.
fn agent_accepts(args: &[String]) {
    assert_eq!(
        args.first().map(String::as_str),
        Some("cluster"),
        "{args:?}"
    );
    // Without a Kubernetes client the agent stops right after parsing its
    // arguments, before it binds or creates anything.
    let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "node-agent {args:?}: {stderr}");
    assert!(
        stderr.contains("no Kubernetes client"),
        "node-agent {args:?} failed before reaching the API server: {stderr}"
    );
}

/// With the gateway on: a Deployment running agentcomputer-share-gateway
/// (from the operator image) with arguments the real binary accepts,
/// non-root with a read-only root filesystem and probes; a Service of the
/// chosen type; read-only RBAC; and the node agents' share port admitting
/// the gateway pods besides nodeAgent.share.from. Without share links on,
/// helm refuses the gateway.
#[test]
fn the_chart_runs_the_share_gateway_when_asked() {
    if support::skipped() {
        return;
    }
    let objects = render(&[
        "--set",
        "nodeAgent.share.enabled=true",
        "--set",
        "nodeAgent.share.url=https://files.example.com/links/",
        "--set",
        "shareGateway.enabled=true",
        "--set",
        "shareGateway.service.type=LoadBalancer",
        "--set-json",
        r#"nodeAgent.share.from=[{"podSelector":{"matchLabels":{"app":"ingress"}}}]"#,
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let named = |kind: &str| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind && o["metadata"]["name"] == "ac-agent-computer-share-gateway"
            })
            .unwrap_or_else(|| panic!("the gateway's {kind}"))
    };
    let deployment = named("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ac-agent-computer-share-gateway");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/agentcomputer/operator:0.1.0");
    assert_eq!(
        container["command"],
        serde_json::json!(["agentcomputer-share-gateway"])
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for want in [
        "--base-path=/links/",
        "--agent-share-port=7434",
        "--listen=0.0.0.0:8080",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    gateway_accepts(&args);
    let service = named("Service");
    assert_eq!(service["spec"]["type"], "LoadBalancer");
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        named("ClusterRole")["rules"],
        serde_json::json!([{"apiGroups": ["agentcomputer.dev"], "resources": ["agentcomputers"], "verbs": ["list", "watch"]}])
    );
    assert_eq!(
        named("Role")["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}])
    );
    let share_rules = ingress_rules_on(&objects, 7434);
    assert_eq!(share_rules.len(), 1, "{share_rules:?}");
    assert_eq!(
        share_rules[0]["from"],
        serde_json::json!([
            {"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "agentcomputer-share-gateway",
                "app.kubernetes.io/instance": "ac"}}},
            {"podSelector": {"matchLabels": {"app": "ingress"}}},
        ])
    );
    let refused = render(&["--set", "shareGateway.enabled=true"]).unwrap_err();
    assert!(
        refused.contains("shareGateway.enabled needs nodeAgent.share.enabled=true"),
        "{refused}"
    );
    // Off by default.
    let plain = render(&[]).unwrap();
    assert!(
        !plain
            .iter()
            .any(|o| o["metadata"]["name"] == "ac-agent-computer-share-gateway"),
        "no gateway by default"
    );
}

/// Runs the real gateway with `args`: it must get past parsing them.
fn gateway_accepts(args: &[String]) {
    let out = Command::new(support::share_gateway_exe())
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // clap exits 2 on an argument it does not accept.
    assert_eq!(out.status.code(), Some(1), "gateway {args:?}: {stderr}");
    assert!(
        stderr.contains("no Kubernetes client"),
        "gateway {args:?} failed before reaching for the API server: {stderr}"
    );
}

/// The node agents' egress NetworkPolicy (on by default): DNS on 53, the
/// API server's ports, the internet ranges without private, link-local
/// (metadata) and shared ranges, and the extraTo rules; the agent is told
/// the operator's and the agents' Services as control services and the
/// administrator's exceptions, arguments the real binary accepts, and may
/// list EndpointSlices in its namespace and in `default`.
#[test]
fn the_chart_walls_the_agents_egress() {
    if support::skipped() {
        return;
    }
    let objects = render(&[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    let args = agent_args(&objects);
    let services = format!(
        "--control-services={ns}/ac-agent-computer-operator-metrics,{ns}/ac-agent-computer-node-agent-metrics",
        ns = support::SYSTEM_NS
    );
    assert!(args.contains(&services), "{args:?}");
    assert!(
        !args.iter().any(|a| a.contains("control-addresses")),
        "no exception by default: {args:?}"
    );
    agent_accepts(&args);
    let policy = egress_policy(&objects).expect("an egress NetworkPolicy by default");
    assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Egress"]));
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "agentcomputer-node-agent"
    );
    let rules = policy["spec"]["egress"].as_array().unwrap();
    let ports = |rule: &serde_json::Value| -> Vec<(i64, String)> {
        rule["ports"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        (
                            p["port"].as_i64().unwrap(),
                            p["protocol"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let dns = &rules[0];
    assert_eq!(
        ports(dns),
        vec![(53, "UDP".into()), (53, "TCP".into())],
        "{dns}"
    );
    assert_eq!(
        dns["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    let api = &rules[1];
    assert_eq!(ports(api), vec![(443, "TCP".into()), (6443, "TCP".into())]);
    let internet = &rules[2];
    assert!(internet["ports"].is_null(), "any port: {internet}");
    let v4 = &internet["to"][0]["ipBlock"];
    assert_eq!(v4["cidr"], "0.0.0.0/0");
    for private in [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
    ] {
        assert!(
            v4["except"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e == private),
            "{private} not excepted: {v4}"
        );
    }
    assert_eq!(rules.len(), 3, "{rules:?}");

    // Exceptions, more control addresses, a known API server and an object
    // store's rule.
    let objects = render(&[
        "--set-json",
        r#"egress.allowControlAddresses=["node:10250","192.0.2.10:6443"]"#,
        "--set-json",
        r#"egress.controlAddresses=["10.96.0.0/12","node:9100"]"#,
        "--set-json",
        r#"egress.networkPolicy.apiServerCidrs=["192.0.2.10/32","2001:db8::10/128"]"#,
        "--set-json",
        r#"egress.networkPolicy.extraTo=[{"to":[{"ipBlock":{"cidr":"10.20.0.5/32"}}],"ports":[{"port":9000,"protocol":"TCP"}]}]"#,
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let args = agent_args(&objects);
    for want in [
        "--allow-control-addresses=node:10250,192.0.2.10:6443",
        "--control-addresses=10.96.0.0/12,node:9100",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
    }
    agent_accepts(&args);
    let policy = egress_policy(&objects).unwrap();
    let rules = policy["spec"]["egress"].as_array().unwrap();
    assert_eq!(
        rules[1]["to"],
        serde_json::json!([{"ipBlock": {"cidr": "192.0.2.10/32"}}, {"ipBlock": {"cidr": "2001:db8::10/128"}}])
    );
    assert_eq!(rules[3]["to"][0]["ipBlock"]["cidr"], "10.20.0.5/32");
    assert_eq!(rules[3]["ports"][0]["port"], 9000);

    // RBAC: EndpointSlices listed in the release namespace and in default.
    let endpointslice_roles: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Role")
        .filter(|o| {
            o["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"] == serde_json::json!(["endpointslices"])
                    && r["verbs"] == serde_json::json!(["list"])
            })
        })
        .map(|o| o["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(endpointslice_roles, vec![support::SYSTEM_NS, "default"]);

    // Off: no policy.
    let objects = render(&["--set", "egress.networkPolicy.enabled=false"])
        .unwrap_or_else(|e| panic!("helm template: {e}"));
    assert!(egress_policy(&objects).is_none());
    // A malformed control address crash-loops no agent: the chart passes
    // it through and the agent refuses it at start, naming it.
    let objects = render(&["--set-json", r#"egress.controlAddresses=["10.0.0.0/33"]"#]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(agent_args(&objects))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"10.0.0.0/33\""), "{stderr}");
}

/// With backup.url every node agent gets the bucket, the store's endpoint
/// and region and its keys from the named Secret (by secretKeyRef, never
/// the keys themselves), a Role on Leases in the release namespace (the
/// per-computer write fence), and an egress rule to the store; without it
/// none of that. helm refuses a URL the agent pod cannot use and a missing
/// Secret.
#[test]
fn the_chart_backs_computers_up_when_asked() {
    if support::skipped() {
        return;
    }
    let store_rule = serde_json::json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}},
            "podSelector": {"matchLabels": {"app": "store"}},
        }],
        "ports": [{"port": 7070, "protocol": "TCP"}],
    });
    let egress_to = format!("backup.egressTo=[{store_rule}]");
    let objects = render(&[
        "--set",
        "backup.url=s3://agentcomputer/prod",
        "--set",
        "backup.endpoint=http://store.storage.svc:7070",
        "--set",
        "backup.credentialsSecret=backup-keys",
        "--set-json",
        &egress_to,
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    // With a backup store computers may move: the operator is told so
    // (docs/moves.md); without one it is not.
    assert_eq!(operator_env(&objects, "MOVES").as_deref(), Some("true"));
    assert_eq!(
        operator_env(&objects, "FAILOVER_AFTER").as_deref(),
        Some("5m")
    );
    let plain = render(&[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    assert_eq!(operator_env(&plain, "MOVES").as_deref(), Some("false"));
    let env = agent_env(&objects);
    let value = |name: &str| env.iter().find(|e| e["name"] == name).cloned();
    assert_eq!(
        value("AGENTCOMPUTER_BACKUP_URL"),
        Some(
            serde_json::json!({"name": "AGENTCOMPUTER_BACKUP_URL", "value": "s3://agentcomputer/prod"})
        )
    );
    assert_eq!(
        value("AWS_ENDPOINT_URL"),
        Some(
            serde_json::json!({"name": "AWS_ENDPOINT_URL", "value": "http://store.storage.svc:7070"})
        )
    );
    assert_eq!(
        value("AWS_REGION"),
        Some(serde_json::json!({"name": "AWS_REGION", "value": "us-east-1"}))
    );
    assert_eq!(
        value("AGENTCOMPUTER_RETENTION"),
        Some(serde_json::json!({"name": "AGENTCOMPUTER_RETENTION", "value": "7d"}))
    );
    // The agent takes the chart's retention, and refuses what is not a
    // duration before it does anything.
    for (retention, accepted) in [("7d", true), ("36h", true), ("a week", false)] {
        let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
            .args(agent_args(&objects))
            .env("AGENTCOMPUTER_RETENTION", retention)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if accepted {
            assert!(
                stderr.contains("no Kubernetes client"),
                "{retention}: {stderr}"
            );
        } else {
            assert_eq!(out.status.code(), Some(2), "{retention}: {stderr}");
            assert!(stderr.contains("--retention"), "{retention}: {stderr}");
        }
    }
    for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert_eq!(
            value(key),
            Some(
                serde_json::json!({"name": key, "valueFrom": {"secretKeyRef": {"name": "backup-keys", "key": key}}})
            ),
            "{env:?}"
        );
    }
    agent_accepts(&agent_args(&objects));
    // Leases: one rule, in a Role of the release namespace bound to the
    // agent's ServiceAccount (the operator's own Lease Role is not the
    // agent's).
    let leases = agent_lease_grants(&objects);
    assert_eq!(
        leases,
        vec![(
            "Role".to_string(),
            support::SYSTEM_NS.to_string(),
            serde_json::json!({
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                // patch: a move's annotations (docs/moves.md).
                "verbs": ["get", "create", "update", "patch", "delete", "list"],
            })
        )]
    );
    // The store's rule comes after the default three (DNS, API server,
    // internet ranges).
    let policy = egress_policy(&objects).expect("the agents' egress NetworkPolicy");
    let rules = policy["spec"]["egress"].as_array().unwrap();
    assert_eq!(rules.len(), 4, "{rules:?}");
    assert_eq!(rules[3], store_rule);

    // The endpoint is optional (AWS's own), the region has a default that
    // can be changed.
    let objects = render(&[
        "--set",
        "backup.url=s3://agentcomputer",
        "--set",
        "backup.region=eu-west-1",
        "--set",
        "backup.credentialsSecret=backup-keys",
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let env = agent_env(&objects);
    assert!(
        !env.iter().any(|e| e["name"] == "AWS_ENDPOINT_URL"),
        "{env:?}"
    );
    assert!(
        env.iter()
            .any(|e| e["name"] == "AWS_REGION" && e["value"] == "eu-west-1"),
        "{env:?}"
    );
    assert_eq!(
        egress_policy(&objects).unwrap()["spec"]["egress"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Without backup.url: no backup environment, no Lease access, no rule
    // to the store, even with the other backup values set.
    let objects = render(&[
        "--set",
        "backup.credentialsSecret=backup-keys",
        "--set",
        "backup.endpoint=http://store.storage.svc:7070",
        "--set-json",
        &egress_to,
    ])
    .unwrap_or_else(|e| panic!("helm template: {e}"));
    let env = agent_env(&objects);
    assert!(
        !env.iter().any(|e| {
            let name = e["name"].as_str().unwrap();
            name.starts_with("AWS_") || name == "AGENTCOMPUTER_BACKUP_URL"
        }),
        "{env:?}"
    );
    assert_eq!(
        agent_lease_grants(&objects),
        vec![],
        "no Lease access without backups"
    );
    assert_eq!(
        egress_policy(&objects).unwrap()["spec"]["egress"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Refused: no Secret named, and local mode's file:// form.
    let refused = render(&["--set", "backup.url=s3://agentcomputer/prod"]).unwrap_err();
    assert!(
        refused.contains("backup.credentialsSecret is required with backup.url")
            && refused.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        "{refused}"
    );
    let refused = render(&[
        "--set",
        "backup.url=file:///var/backups",
        "--set",
        "backup.credentialsSecret=backup-keys",
    ])
    .unwrap_err();
    assert!(
        refused.contains("backup.url \"file:///var/backups\"")
            && refused.contains("s3://BUCKET/PREFIX only"),
        "{refused}"
    );
}

/// Every rule on Leases the node agent's ServiceAccount is bound to: the
/// role's kind, the binding's namespace ("" for a ClusterRoleBinding), the
/// rule.
fn agent_lease_grants(objects: &[serde_json::Value]) -> Vec<(String, String, serde_json::Value)> {
    let agent = serde_json::json!({
        "kind": "ServiceAccount",
        "name": "ac-agent-computer-node-agent",
        "namespace": support::SYSTEM_NS,
    });
    let mut grants = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
        .filter(|b| b["subjects"].as_array().unwrap().contains(&agent))
    {
        let namespace = binding["metadata"]["namespace"].as_str().unwrap_or("");
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == binding["roleRef"]["kind"]
                    && o["metadata"]["name"] == binding["roleRef"]["name"]
                    && (o["kind"] == "ClusterRole" || o["metadata"]["namespace"] == namespace)
            })
            .unwrap_or_else(|| panic!("the role of {binding}"));
        for rule in role["rules"].as_array().unwrap() {
            if rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "leases" || r == "*")
            {
                grants.push((
                    role["kind"].as_str().unwrap().to_string(),
                    namespace.to_string(),
                    rule.clone(),
                ));
            }
        }
    }
    grants
}

/// The node-agent container's environment.
fn agent_env(objects: &[serde_json::Value]) -> Vec<serde_json::Value> {
    agent_container(objects)["env"].as_array().unwrap().clone()
}

/// The node agents' egress NetworkPolicy, if rendered.
fn egress_policy(objects: &[serde_json::Value]) -> Option<&serde_json::Value> {
    objects.iter().find(|o| {
        o["kind"] == "NetworkPolicy" && o["spec"]["policyTypes"] == serde_json::json!(["Egress"])
    })
}

/// Who may reach the agents' gRPC port besides sandbox pods: the operator
/// always (it takes ComputerSnapshots at the serving agent), the API
/// gateway when it runs, and nobody else by default.
#[test]
fn the_agents_grpc_port_admits_the_operator_and_the_gateway_only() {
    if support::skipped() {
        return;
    }
    let grpc_peers = |objects: &[serde_json::Value]| -> Vec<serde_json::Value> {
        ingress_rules_on(objects, 7433)
            .iter()
            .flat_map(|r| r["from"].as_array().unwrap().clone())
            .collect()
    };
    let pods = |name: &str| {
        serde_json::json!({"podSelector": {"matchLabels": {
            "app.kubernetes.io/name": name, "app.kubernetes.io/instance": "ac"}}})
    };
    let sandboxes = serde_json::json!({"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "app.kubernetes.io/component": "sandbox",
        "app.kubernetes.io/managed-by": "agentcomputer-operator"}}});
    let defaults = render(&[]).unwrap_or_else(|e| panic!("helm template: {e}"));
    assert_eq!(
        grpc_peers(&defaults),
        vec![sandboxes.clone(), pods("agentcomputer-operator")]
    );
    let with_gateway =
        render(&["--set", "gateway.enabled=true"]).unwrap_or_else(|e| panic!("helm template: {e}"));
    assert_eq!(
        grpc_peers(&with_gateway),
        vec![
            sandboxes,
            pods("agentcomputer-operator"),
            pods("agentcomputer-gateway")
        ]
    );
}

/// The gateway announces its address on its Service (what `kubectl
/// computer credentials` prints) and, when asked, is exposed by two
/// Ingresses (gRPC with its own annotations, MCP) or by a Gateway API
/// GRPCRoute and HTTPRoute; each needs its host or parent.
#[test]
fn the_chart_exposes_the_gateway_when_asked() {
    if support::skipped() {
        return;
    }
    let of_kind = |objects: &[serde_json::Value], kind: &str| -> Vec<serde_json::Value> {
        objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .cloned()
            .collect()
    };
    let url = |objects: &[serde_json::Value]| -> String {
        of_kind(objects, "Service")
            .iter()
            .find(|s| s["metadata"]["name"] == "ac-agent-computer-gateway")
            .expect("the gateway's Service")["metadata"]["annotations"]
            ["agentcomputer.dev/gateway-url"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let plain = render(&["--set", "gateway.enabled=true"]).unwrap();
    assert_eq!(
        url(&plain),
        "http://ac-agent-computer-gateway.agentcomputer-system.svc:443"
    );
    assert!(of_kind(&plain, "Ingress").is_empty());
    assert!(of_kind(&plain, "GRPCRoute").is_empty());

    let ingress = render(&[
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.ingress.enabled=true",
        "--set",
        "gateway.ingress.host=agents.example.com",
        "--set",
        "gateway.ingress.tlsSecretName=agents-tls",
        "--set",
        "gateway.ingress.className=edge",
        "--set",
        "gateway.ingress.grpcAnnotations.nginx\\.ingress\\.kubernetes\\.io/backend-protocol=GRPC",
    ])
    .unwrap();
    assert_eq!(url(&ingress), "https://agents.example.com");
    let ingresses = of_kind(&ingress, "Ingress");
    let paths: Vec<(&str, &str, bool)> = ingresses
        .iter()
        .map(|i| {
            assert_eq!(i["spec"]["ingressClassName"], "edge");
            assert_eq!(i["spec"]["tls"][0]["secretName"], "agents-tls");
            let rule = &i["spec"]["rules"][0];
            assert_eq!(rule["host"], "agents.example.com");
            let path = &rule["http"]["paths"][0];
            assert_eq!(
                path["backend"]["service"]["name"],
                "ac-agent-computer-gateway"
            );
            (
                i["metadata"]["name"].as_str().unwrap(),
                path["path"].as_str().unwrap(),
                !i["metadata"]["annotations"].is_null(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        vec![
            (
                "ac-agent-computer-gateway-api",
                "/agentcomputer.v1.AgentComputer/",
                true
            ),
            ("ac-agent-computer-gateway-mcp", "/mcp/", false),
        ]
    );
    let err = render(&[
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.ingress.enabled=true",
    ])
    .unwrap_err();
    assert!(
        err.contains("gateway.ingress.enabled needs gateway.ingress.host"),
        "{err}"
    );

    let routes = render(&[
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.url=https://agents.example.com",
        "--set",
        "gateway.gatewayApi.enabled=true",
        "--set",
        "gateway.gatewayApi.parentRefs[0].name=public",
        "--set",
        "gateway.gatewayApi.hostnames[0]=agents.example.com",
    ])
    .unwrap();
    assert_eq!(url(&routes), "https://agents.example.com");
    let grpc = &of_kind(&routes, "GRPCRoute")[0];
    assert_eq!(grpc["spec"]["parentRefs"][0]["name"], "public");
    assert_eq!(grpc["spec"]["hostnames"][0], "agents.example.com");
    assert_eq!(
        grpc["spec"]["rules"][0]["matches"][0]["method"]["service"],
        "agentcomputer.v1.AgentComputer"
    );
    let http = &of_kind(&routes, "HTTPRoute")[0];
    assert_eq!(
        http["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/mcp/"
    );
    let err = render(&[
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.gatewayApi.enabled=true",
    ])
    .unwrap_err();
    assert!(err.contains("needs gateway.gatewayApi.parentRefs"), "{err}");
}

/// With the agents' TLS and `gateway.agentClientTls`, the agents ask for
/// client certificates signed by their CA and the gateway presents its
/// own from the Secret: mutual TLS. Both binaries accept the rendered
/// flags (they stop later, at the certificate files this test lacks).
/// Without the agents' TLS, helm refuses it.
#[test]
fn the_chart_turns_on_mutual_tls_between_the_gateway_and_the_agents() {
    if support::skipped() {
        return;
    }
    let tls = [
        "--set",
        "gateway.enabled=true",
        "--set",
        "nodeAgent.tls.secretName=agent-tls",
        "--set",
        "nodeAgent.tls.serverName=agent.test",
    ];
    let gateway_args = |objects: &[serde_json::Value]| -> Vec<String> {
        objects
            .iter()
            .find(|o| {
                o["kind"] == "Deployment" && o["metadata"]["name"] == "ac-agent-computer-gateway"
            })
            .expect("the gateway Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let server_only = render(&tls).unwrap();
    assert!(
        !agent_args(&server_only)
            .iter()
            .any(|a| a.starts_with("--tls-client-ca"))
    );
    assert!(
        !gateway_args(&server_only)
            .iter()
            .any(|a| a.starts_with("--agent-client-cert"))
    );

    let mutual = render(
        &[
            &tls[..],
            &["--set", "gateway.agentClientTls.secretName=gw-client"],
        ]
        .concat(),
    )
    .unwrap();
    let agent = agent_args(&mutual);
    assert!(
        agent.contains(&"--tls-client-ca=/etc/agentcomputer/tls/ca.crt".to_string()),
        "{agent:?}"
    );
    let gateway = gateway_args(&mutual);
    for flag in [
        "--agent-client-cert=/etc/agentcomputer/agent-client/tls.crt",
        "--agent-client-key=/etc/agentcomputer/agent-client/tls.key",
    ] {
        assert!(gateway.contains(&flag.to_string()), "{gateway:?}");
    }
    let parsed = |exe: &Path, args: &[String]| {
        let out = Command::new(exe)
            .args(args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // clap exits 2 on an argument it does not accept; these stop at
        // the first certificate file, which this test has not.
        assert_eq!(out.status.code(), Some(1), "{exe:?} {args:?}: {stderr}");
        assert!(stderr.contains("cannot read"), "{exe:?} {args:?}: {stderr}");
    };
    parsed(Path::new(env!("CARGO_BIN_EXE_node-agent")), &agent);
    parsed(&support::gateway_exe(), &gateway);

    let err = render(&[
        "--set",
        "gateway.enabled=true",
        "--set",
        "gateway.agentClientTls.secretName=gw-client",
    ])
    .unwrap_err();
    assert!(err.contains("needs nodeAgent.tls.secretName"), "{err}");
}

/// With `metrics.grafanaDashboard.enabled`, a ConfigMap carries the
/// dashboard, labelled for Grafana's sidecar, as valid JSON whose every
/// panel queries through the dashboard's Prometheus data source variable.
/// (The e2e suite checks every series it names is served.)
#[test]
fn the_chart_ships_the_grafana_dashboard_when_asked() {
    if support::skipped() {
        return;
    }
    let dashboards = |objects: &[serde_json::Value]| -> Vec<serde_json::Value> {
        objects
            .iter()
            .filter(|o| {
                o["kind"] == "ConfigMap" && o["metadata"]["name"] == "ac-agent-computer-dashboard"
            })
            .cloned()
            .collect()
    };
    assert!(dashboards(&render(&[]).unwrap()).is_empty());
    let on = render(&[
        "--set",
        "metrics.grafanaDashboard.enabled=true",
        "--set",
        "metrics.grafanaDashboard.namespace=monitoring",
    ])
    .unwrap();
    let cm = &dashboards(&on)[0];
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value =
        serde_json::from_str(cm["data"]["agent-computer.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "agentcomputer");
    let panels: Vec<&serde_json::Value> = json["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect();
    assert!(panels.len() >= 20, "{} panels", panels.len());
    for p in panels {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert!(
                t["expr"].as_str().unwrap().contains("agentcomputer_"),
                "{}",
                p["title"]
            );
        }
    }
}
