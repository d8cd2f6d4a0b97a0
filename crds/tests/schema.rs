//! Shape of the generated CRD: the parts clients and kubectl rely on.

use agentcomputer_crds::{AgentComputer, AgentComputerSpec};
use kube::CustomResourceExt;
use serde_json::Value;

fn schema() -> Value {
    let crd = AgentComputer::crd();
    let v = serde_json::to_value(&crd.spec.versions[0]).unwrap();
    v["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn names_scope_and_subresources() {
    let crd = AgentComputer::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("agentcomputers.agentcomputer.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref().unwrap()[0],
        "computer"
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<&str> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for want in ["Phase", "Node", "Size", "Disk", "Backup", "Age"] {
        assert!(
            cols.contains(&want),
            "printer column {want} missing: {cols:?}"
        );
    }
    // The disk column is the quantity the node agent writes beside
    // diskBytes, not a raw byte count.
    let disk = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "Disk")
        .unwrap();
    assert_eq!(
        (disk.type_.as_str(), disk.json_path.as_str()),
        ("string", ".status.volume.disk")
    );
    // The backup column is an age (kubectl prints "5s", "3m"), of the
    // time the latest backup object went up.
    let backup = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "Backup")
        .unwrap();
    assert_eq!(backup.type_, "date");
    assert_eq!(backup.json_path, ".status.backup.lastShippedTime");
}

/// What the node agent reports of a computer's backup: typed as the API
/// server checks it (an integer position, an RFC 3339 time, a number of
/// seconds), and read back by the Rust types.
#[test]
fn backup_status_fields() {
    let s = schema();
    let backup = &s["properties"]["status"]["properties"]["backup"]["properties"];
    assert_eq!(backup["position"]["type"], "integer");
    assert_eq!(backup["lastShippedTime"]["type"], "string");
    assert_eq!(backup["lastShippedTime"]["format"], "date-time");
    assert_eq!(backup["lagSeconds"]["type"], "number");
    let status: agentcomputer_crds::AgentComputerStatus = serde_json::from_value(serde_json::json!({
        "backup": {"position": 42, "lastShippedTime": "2026-01-02T03:04:05Z", "lagSeconds": 0.25},
    }))
    .unwrap();
    let b = status.backup.unwrap();
    assert_eq!(b.position, Some(42));
    assert_eq!(b.lag_seconds, Some(0.25));
    assert_eq!(
        b.last_shipped_time.unwrap().0.to_string(),
        "2026-01-02T03:04:05Z"
    );
}

#[test]
fn every_spec_field_is_documented() {
    fn walk(path: &str, v: &Value, missing: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                let p = format!("{path}.{k}");
                if sub
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    missing.push(p.clone());
                }
                walk(&p, sub, missing);
                if let Some(items) = sub.get("items") {
                    walk(&p, items, missing);
                }
            }
        }
    }
    let mut missing = Vec::new();
    let s = schema();
    walk("spec", &s["properties"]["spec"], &mut missing);
    walk("status", &s["properties"]["status"], &mut missing);
    // Upstream core/v1 types embedded as they are (Toleration, Condition, ...)
    // carry their own docs or none; only ours must be complete.
    missing.retain(|p| {
        !p.starts_with("spec.tolerations.")
            && !p.starts_with("status.conditions.")
            && !p.starts_with("spec.sandbox.resources.")
    });
    assert!(
        missing.is_empty(),
        "fields without description: {missing:?}"
    );
}

#[test]
fn egress_mode_is_an_enum_with_deny_all_default() {
    let egress = &schema()["properties"]["spec"]["properties"]["egress"];
    assert_eq!(
        egress["properties"]["mode"]["enum"],
        serde_json::json!(["deny-all", "allow-all", "allow-list"])
    );
    assert_eq!(egress["properties"]["mode"]["default"], "deny-all");
    assert!(
        egress["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap()
            .contains("allow-list")
    );
}

#[test]
fn storage_size_may_only_grow() {
    let storage = &schema()["properties"]["spec"]["properties"]["storage"];
    let rules: Vec<&str> = storage["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert!(
        rules.iter().any(|r| r.contains("oldSelf.size")),
        "{rules:?}"
    );
}

#[test]
fn defaults_fill_a_minimal_spec() {
    let spec: AgentComputerSpec =
        serde_json::from_value(serde_json::json!({"storage": {"size": "1Gi"}})).unwrap();
    assert!(spec.runtimes.shell && spec.runtimes.javascript && !spec.runtimes.container);
    assert_eq!(spec.egress.mode, agentcomputer_crds::EgressMode::DenyAll);
    assert_eq!(
        spec.storage.reclaim_policy,
        agentcomputer_crds::ReclaimPolicy::Delete
    );
    assert_eq!(spec.limits.timeout_seconds, 300);
    let bad = serde_json::from_value::<AgentComputerSpec>(
        serde_json::json!({"storage": {"size": "1Gi"}, "egress": {"mode": "open"}}),
    );
    assert!(bad.is_err());
}
