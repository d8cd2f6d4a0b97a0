//! Writes the AgentComputer CRD manifest to the given paths (default: the
//! committed `crds/agentcomputer.yaml` and the Helm chart's copy), or to
//! stdout with `-`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let yaml = agentcomputer_crds::crd_yaml()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-") {
        print!("{yaml}");
        return Ok(());
    }
    let targets: Vec<PathBuf> = if args.is_empty() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        vec![
            root.join("agentcomputer.yaml"),
            root.join("../charts/agent-computer/crds/agentcomputer.yaml"),
        ]
    } else {
        args.into_iter().map(PathBuf::from).collect()
    };
    for path in targets {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, &yaml)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
