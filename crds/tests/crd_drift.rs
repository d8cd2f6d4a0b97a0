//! The committed CRD manifests must equal what the Rust types generate, so
//! that `kubectl apply -f crds/agentcomputer.yaml` and the Helm chart install
//! exactly the API the operator speaks.

use std::path::Path;

fn check(rel: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = agentcomputer_crds::crd_yaml().expect("CRD serializes");
    assert!(
        committed == generated,
        "{} is out of date with the Rust types in crds/src; regenerate it with \
         `cargo run -p agentcomputer-crds --bin crdgen`",
        path.display()
    );
}

#[test]
fn committed_crd_matches_types() {
    check("agentcomputer.yaml");
}

#[test]
fn chart_crd_matches_types() {
    check("../charts/agent-computer/crds/agentcomputer.yaml");
}

/// `docs/crd.md` is the reference the types generate
/// (`agentcomputer_crds::reference`).
#[test]
fn committed_reference_matches_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/crd.md");
    let generated = agentcomputer_crds::reference::render();
    if std::env::var_os("UPDATE_CRD_DOC").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        committed == generated,
        "docs/crd.md is out of date with the Rust types in crds/src; regenerate it with `{}`",
        agentcomputer_crds::reference::REGENERATE
    );
}
