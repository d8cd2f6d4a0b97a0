//! The reference of the custom resources (`docs/crd.md`), generated from
//! the same OpenAPI v3 schemas the CRDs carry: every field of `spec` and
//! `status` with its type, whether it is required, its default, allowed
//! values and description (the Rust doc comments). A test fails when the
//! committed file drifts from the types.

use kube::CustomResourceExt;
use serde_json::Value;

use crate::{AgentComputer, ComputerSnapshot};

/// The command that writes `docs/crd.md`.
pub const REGENERATE: &str = "cargo run -p agentcomputer-crds --bin crd-doc > docs/crd.md";

/// `docs/crd.md`: a section per resource, a table of fields per top-level
/// part (`spec`, `status`).
pub fn render() -> String {
    let mut out = format!(
        "<!-- Generated from the Rust types in crds/src by `{REGENERATE}`; do not edit by hand. -->\n\n\
         # Custom resources (agentcomputer.dev/v1alpha1)\n\n\
         The fields of each resource as the API server validates them (the CRDs'\n\
         OpenAPI v3 schemas). Descriptions come from the Rust types; how the\n\
         operator acts on them is in [operator.md](operator.md).\n"
    );
    for crd in [
        serde_json::to_value(AgentComputer::crd()).expect("CRD serializes"),
        serde_json::to_value(ComputerSnapshot::crd()).expect("CRD serializes"),
    ] {
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("");
        let short: Vec<&str> = crd["spec"]["names"]["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let version = &crd["spec"]["versions"][0];
        let schema = &version["schema"]["openAPIV3Schema"];
        out.push_str(&format!("\n## {kind}\n\n`kubectl get {plural}`"));
        if !short.is_empty() {
            out.push_str(&format!(" (short: `{}`)", short.join("`, `")));
        }
        out.push_str(&format!(
            "; namespaced: {}.\n",
            crd["spec"]["scope"].as_str() == Some("Namespaced")
        ));
        if let Some(d) = schema["description"].as_str() {
            out.push_str(&format!("\n{}\n", one_paragraph(d)));
        }
        for part in ["spec", "status"] {
            let Some(node) = schema["properties"].get(part) else {
                continue;
            };
            out.push_str(&format!(
                "\n### {kind} `{part}`\n\n| field | type | description |\n|---|---|---|\n"
            ));
            let required = schema["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == part));
            rows(&mut out, part, node, required);
        }
    }
    out
}

/// A table row for `node` at `path`, then rows for its fields.
fn rows(out: &mut String, path: &str, node: &Value, required: bool) {
    let mut notes = Vec::new();
    if required {
        notes.push("**required**".to_string());
    }
    if let Some(d) = node.get("default") {
        notes.push(format!("default `{d}`"));
    }
    if let Some(values) = node["enum"].as_array() {
        let shown: Vec<String> = values
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect();
        notes.push(format!("one of {}", shown.join(", ")));
    }
    let description = node["description"]
        .as_str()
        .map(one_paragraph)
        .unwrap_or_default();
    let mut text = description;
    if !notes.is_empty() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("({})", notes.join("; ")));
    }
    out.push_str(&format!(
        "| `{path}` | {} | {} |\n",
        type_of(node),
        text.replace('|', "\\|")
    ));
    let children = node["properties"]
        .as_object()
        .map(|p| (p, &node["required"]))
        .or_else(|| {
            node["items"]["properties"]
                .as_object()
                .map(|p| (p, &node["items"]["required"]))
        });
    if let Some((props, req)) = children {
        let inner = if node["items"].is_object() {
            format!("{path}[]")
        } else {
            path.to_string()
        };
        for (name, child) in props {
            let required = req
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == name.as_str()));
            rows(out, &format!("{inner}.{name}"), child, required);
        }
    }
}

/// The schema's type as a reader wants it: `string`, `integer`,
/// `[]object`, `map[string]string`, `int-or-string`, ...
fn type_of(node: &Value) -> String {
    if node["x-kubernetes-int-or-string"] == true {
        return "int-or-string".into();
    }
    match node["type"].as_str() {
        Some("array") => format!("[]{}", type_of(&node["items"])),
        Some("object") if node["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&node["additionalProperties"]))
        }
        Some(t) => {
            let nullable = if node["nullable"] == true {
                " (nullable)"
            } else {
                ""
            };
            format!("{t}{nullable}")
        }
        None if node["anyOf"].is_array() || node["oneOf"].is_array() => "one of several".into(),
        None => "any".into(),
    }
}

/// A description on one line: lines joined, paragraphs kept apart by a
/// space.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_read_as_kubernetes_documents_them() {
        let v = serde_json::json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(type_of(&v), "[]string");
        let v = serde_json::json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(type_of(&v), "map[string]string");
        let v = serde_json::json!({"x-kubernetes-int-or-string": true});
        assert_eq!(type_of(&v), "int-or-string");
    }

    #[test]
    fn every_spec_field_has_a_row() {
        let doc = render();
        for field in [
            "`spec.storage.size`",
            "`spec.egress.mode`",
            "`status.phase`",
            "`spec.computer`",
        ] {
            assert!(doc.contains(field), "{field} missing");
        }
    }
}
