//! A ComputerSnapshot, and a computer that starts from it on the other
//! node, as a user does it with `kubectl apply` (docs/snapshots.md, "In a
//! cluster").

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use super::nodes::ready_nodes;
use super::*;
use crate::tools::{eventually, text};

/// The computer snapshotted.
const SOURCE: &str = "snapped";
/// Its snapshot.
const SNAPSHOT: &str = "snapped-s1";
/// The computer made from the snapshot.
const COPY: &str = "from-snapshot";

/// With the release's backup store: a computer's files, a ComputerSnapshot
/// of it (`readyToUse`, with its time and size), then an AgentComputer
/// with `spec.source` naming the snapshot, on another node when there are
/// two: Ready, with the snapshot's files (checksums), not the source's
/// later changes. Skipped (and says so) without backup.url.
pub(super) fn fork_across_nodes(cx: &mut Context) -> Result<String> {
    let values: Value = serde_json::from_str(
        &cx.tools
            .helm(&["get", "values", "ac", "-n", SYSTEM_NS, "-o", "json"])?
            .ok("helm get values")?,
    )?;
    if text(&values, "/backup/url").is_empty() {
        return Ok(
            "skipped: the release has no backup.url (snapshots live in the backup store)".into(),
        );
    }
    let nodes = ready_nodes(cx)?;
    let (first, other) = (nodes[0].clone(), nodes.last().cloned().unwrap_or_default());
    cx.apply_computer(
        SOURCE,
        json!({"storage": {"size": "64Mi"}, "nodeSelector": {"kubernetes.io/hostname": first}}),
    )?;
    cx.wait_ready(SOURCE, 120)?;
    let script = "mkdir -p src && seq 1 5000 > src/lines.txt && head -c 200000 /dev/urandom > blob.bin && sha256sum src/lines.txt blob.bin";
    let sums = cx.exec(SOURCE, "shell", script)?;

    let snapshot = json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "ComputerSnapshot",
        "metadata": {"name": SNAPSHOT, "namespace": NS}, "spec": {"computer": SOURCE},
    });
    cx.tools
        .apply(&snapshot.to_string())?
        .ok("kubectl apply of the ComputerSnapshot")?;
    let started = std::time::Instant::now();
    let taken = eventually(
        120,
        &format!("ComputerSnapshot {SNAPSHOT} readyToUse"),
        || {
            let s = cx
                .tools
                .kubectl_json(&["-n", NS, "get", "computersnapshot", SNAPSHOT])?;
            Ok((s.pointer("/status/readyToUse") == Some(&Value::Bool(true))).then_some(s))
        },
    )?;
    cx.time("ComputerSnapshot readyToUse", started.elapsed());
    ensure!(
        !text(&taken, "/status/time").is_empty() && !text(&taken, "/status/size").is_empty(),
        "status without time or size: {}",
        taken["status"]
    );
    // Changed after the snapshot: the copy must not have this.
    cx.exec(SOURCE, "shell", "echo later >> src/lines.txt")?;

    cx.apply_computer(
        COPY,
        json!({"storage": {"size": "64Mi"},
            "nodeSelector": {"kubernetes.io/hostname": other},
            "source": {"kind": "ComputerSnapshot", "name": SNAPSHOT}}),
    )?;
    let took = cx.wait_ready(COPY, 180)?;
    cx.time("computer from a snapshot Ready", took);
    let node = text(&cx.computer(COPY)?, "/status/node").to_string();
    ensure!(node == other, "the copy is on {node}, not {other}");
    let copied = eventually(60, "the copy's files", || {
        Ok(cx
            .exec(COPY, "shell", "sha256sum src/lines.txt blob.bin")
            .ok())
    })?;
    ensure!(
        copied == sums,
        "the copy's checksums differ:\n{copied}\nthe source's at the snapshot:\n{sums}"
    );

    for (kind, name) in [
        ("agentcomputer", COPY),
        ("computersnapshot", SNAPSHOT),
        ("agentcomputer", SOURCE),
    ] {
        cx.tools.kubectl_ok(&[
            "-n",
            NS,
            "delete",
            kind,
            name,
            "--wait=true",
            "--timeout=120s",
        ])?;
    }
    Ok(format!(
        "snapshot on {first}, copy on {other}{}",
        if first == other {
            " (one node only)"
        } else {
            ""
        }
    ))
}
