//! `move`: asks the operator to move a computer to another node (annotation
//! `agentcomputer.dev/move-to`) and follows the move in its status until it
//! ends (docs/moves.md).

use std::time::{Duration, Instant};

use agentcomputer_crds::AgentComputer;
use agentcomputer_crds::moves::{MOVE_REQUEST, MOVING, move_condition_reasons};
use kube::api::{Patch, PatchParams};

use super::{Cluster, api_error};
use crate::error::{CliError, Result};

/// How long `move` follows a move before it gives up waiting (the move
/// itself goes on).
pub const MOVE_WAIT: Duration = Duration::from_secs(600);

/// Asks for `name` to move (to `to`, or any eligible node) and waits until
/// its status says the move ended, printing where it went and how long
/// calls waited. Errors: the computer is missing; the operator says the
/// move cannot happen (no backup store, no eligible node, a bad target:
/// its condition's message); the move did not end within [`MOVE_WAIT`].
pub async fn move_computer(cluster: &Cluster, name: &str, to: Option<&str>) -> Result<()> {
    let before = cluster.get(name).await?;
    let from = before.status.as_ref().and_then(|s| s.node.clone());
    let last_before = before
        .status
        .as_ref()
        .and_then(|s| s.last_move.as_ref())
        .map(|m| m.finished_time.clone());
    let patch = serde_json::json!({"metadata": {"annotations": {MOVE_REQUEST: to.unwrap_or("")}}});
    cluster
        .computers()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error(&e))?;
    eprintln!(
        "asked to move {name} from {} to {}",
        from.as_deref().unwrap_or("(no node)"),
        to.unwrap_or("another node")
    );
    let started = Instant::now();
    let mut said_phase = None;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let c = cluster.get(name).await?;
        let status = c.status.clone().unwrap_or_default();
        if let Some(m) = &status.moving {
            if said_phase != Some(m.phase) {
                eprintln!("  {:?}: {} -> {}", m.phase, m.source, m.target);
                said_phase = Some(m.phase);
            }
        } else if let Some(last) = &status.last_move
            && Some(&last.finished_time) != last_before.as_ref()
        {
            println!(
                "moved {name} from {} to {} in {:.1} s{}",
                last.source,
                last.target,
                started.elapsed().as_secs_f64(),
                last.hand_over_millis
                    .map(|ms| format!("; calls waited {ms} ms while it was handed over"))
                    .unwrap_or_default()
            );
            return Ok(());
        } else if let Some(why) = refused(&c) {
            return Err(CliError::new(format!("{name} cannot move: {why}")));
        }
        if started.elapsed() > MOVE_WAIT {
            return Err(CliError::new(format!(
                "{name} did not finish moving within {} s; `kubectl get agentcomputer {name} -o yaml` shows how far it got",
                MOVE_WAIT.as_secs()
            )));
        }
    }
}

/// The operator's reason not to move `c`, once the request is gone.
fn refused(c: &AgentComputer) -> Option<String> {
    let asked = c
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MOVE_REQUEST));
    if asked {
        return None;
    }
    let cond = c
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == MOVING)?;
    (cond.status == "False" && cond.reason != move_condition_reasons::MOVED)
        .then(|| format!("{} ({})", cond.message, cond.reason))
}
