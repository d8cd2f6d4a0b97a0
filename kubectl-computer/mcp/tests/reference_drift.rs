//! `docs/mcp-tools.md` is the reference the tool list generates: it fails
//! when a tool, its description or an argument changed without
//! regenerating it (`UPDATE_MCP_DOC=1` rewrites it).

use std::path::Path;

use agentcomputer_mcp::tools::reference::{REGENERATE, render};

#[test]
fn committed_reference_matches_the_tools() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/mcp-tools.md");
    let generated = render();
    if std::env::var_os("UPDATE_MCP_DOC").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with `{REGENERATE}`",
            path.display()
        )
    });
    assert!(
        committed == generated,
        "docs/mcp-tools.md is out of date with the tools; regenerate it with `{REGENERATE}`"
    );
}

#[test]
fn every_tool_and_argument_is_in_it() {
    let doc = render();
    for tool in [
        "read", "write", "edit", "ls", "find", "grep", "delete", "exec", "share", "snapshot",
        "restore", "publish",
    ] {
        assert!(doc.contains(&format!("## `{tool}`")), "{tool} missing");
    }
    for arg in [
        "`old_string`",
        "`timeout_seconds`",
        "`expires_in_seconds`",
        "`context_lines`",
        "`credentials_env`",
    ] {
        assert!(doc.contains(arg), "{arg} missing");
    }
    assert!(
        doc.contains("one of `auto`, `shell`, `javascript`, `container`"),
        "exec's runtimes"
    );
}
