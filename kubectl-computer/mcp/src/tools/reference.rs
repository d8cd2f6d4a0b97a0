//! The tools' reference (`docs/mcp-tools.md`), generated from the tool
//! list the server sends an MCP host: each tool's description, hints and
//! arguments from its JSON Schema. A test fails when the committed file
//! drifts from the code.

use serde_json::Value;

use super::router::Tools;

/// The command that writes `docs/mcp-tools.md`.
pub const REGENERATE: &str = "cargo run -p agentcomputer-mcp --bin mcp-doc > docs/mcp-tools.md";

/// `docs/mcp-tools.md`.
pub fn render() -> String {
    let mut out = format!(
        "<!-- Generated from the tool list of kubectl-computer/mcp by `{REGENERATE}`; do not edit by hand. -->\n\n\
         # MCP tools reference\n\n\
         The tools `kubectl computer mcp` and the API gateway's `/mcp/NAMESPACE/NAME`\n\
         offer, as an MCP host receives them (`tools/list`). How they behave,\n\
         their errors and limits: [mcp.md](mcp.md). `exec`'s `runtime` lists\n\
         `auto` and the runtimes the computer enables; all of them here.\n"
    );
    let mut tools = Tools::listed_for_reference();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    for t in tools {
        out.push_str(&format!("\n## `{}`\n\n", t.name));
        if let Some(d) = &t.description {
            out.push_str(&format!("{d}\n"));
        }
        if let Some(a) = &t.annotations {
            let mut hints = Vec::new();
            for (on, name) in [
                (a.read_only_hint, "read-only"),
                (a.destructive_hint, "destructive"),
                (a.idempotent_hint, "idempotent"),
                (a.open_world_hint, "open world"),
            ] {
                if let Some(v) = on {
                    hints.push(format!("{name}: {v}"));
                }
            }
            if !hints.is_empty() {
                out.push_str(&format!("\nHints: {}.\n", hints.join(", ")));
            }
        }
        let schema = Value::Object((*t.input_schema).clone());
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let Some(props) = schema["properties"].as_object().filter(|p| !p.is_empty()) else {
            out.push_str("\nNo arguments.\n");
            continue;
        };
        out.push_str("\n| argument | type | description |\n|---|---|---|\n");
        let mut names: Vec<&String> = props.keys().collect();
        names.sort_by_key(|n| (!required.contains(&n.as_str()), n.as_str()));
        for name in names {
            let p = &props[name.as_str()];
            let mut notes = Vec::new();
            if required.contains(&name.as_str()) {
                notes.push("**required**".to_string());
            }
            if let Some(d) = p.get("default") {
                notes.push(format!("default `{d}`"));
            }
            if let Some(e) = p["enum"].as_array() {
                let shown: Vec<String> = e
                    .iter()
                    .map(|v| format!("`{}`", v.as_str().unwrap_or("")))
                    .collect();
                notes.push(format!("one of {}", shown.join(", ")));
            }
            for (key, word) in [("minimum", "at least"), ("maximum", "at most")] {
                if let Some(v) = p.get(key) {
                    notes.push(format!("{word} {v}"));
                }
            }
            let mut text = p["description"]
                .as_str()
                .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            if !notes.is_empty() {
                text.push_str(&format!(" ({})", notes.join("; ")));
            }
            out.push_str(&format!(
                "| `{name}` | {} | {} |\n",
                type_of(p),
                text.trim().replace('|', "\\|")
            ));
        }
    }
    out
}

fn type_of(p: &Value) -> String {
    match &p["type"] {
        Value::String(t) if t == "array" => format!("array of {}", type_of(&p["items"])),
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ if p.get("additionalProperties").is_some() => "object".into(),
        _ => "any".into(),
    }
}
