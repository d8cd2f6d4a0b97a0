//! The workspace's `rust-version` is the oldest Rust that builds it: at
//! least the highest `rust-version` any locked dependency declares, so a
//! dependency update that needs a newer compiler cannot slip in under an
//! older promise.

use std::process::Command;

/// `1.89` and `1.89.0` alike, as (major, minor, patch).
fn version(text: &str) -> [u64; 3] {
    let mut v = [0; 3];
    for (slot, part) in v.iter_mut().zip(text.split('.')) {
        *slot = part.parse().unwrap_or(0);
    }
    v
}

#[test]
fn rust_version_covers_every_locked_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let packages = meta["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == "agentcomputer-node-agent")
        .and_then(|p| p["rust_version"].as_str())
        .expect("the workspace sets rust-version");
    let (needed, by) = packages
        .iter()
        .filter(|p| !members.contains(&p["id"].as_str().unwrap_or_default()))
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].as_str()?)))
        .max()
        .expect("some dependency declares rust-version");
    assert!(
        version(ours) >= needed,
        "rust-version {ours} is older than {by}'s {needed:?}: raise [workspace.package] rust-version"
    );
}
