//! Computers moving between nodes through the backup store
//! (docs/moves.md), as an operator and a user see it: the documented
//! `kubectl drain` of the node serving a computer whose sandbox keeps
//! appending records, and `kubectl computer move`.

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, ensure};
use serde_json::{Value, json};

use super::nodes::{object_store_node, ready_nodes};
use super::{Context, NS, SYSTEM_NS};
use crate::tools::{condition, eventually, text};

/// The computer these steps make.
const NAME: &str = "mover";

/// The writer a sandbox runs: resumes after the last record in `records`,
/// appends the next number, fsyncs the file (`sync FILE` calls fsync(2)
/// on it) and only then prints the number, every 50 ms. A printed number
/// is one the computer acknowledged as durable.
const WRITER: &str = "n=$(tail -n1 records 2>/dev/null || echo 0); \
     while :; do n=$((n+1)); echo $n >> records; sync records; echo $n; sleep 0.05; done";

/// A writer started through `kubectl computer exec --runtime container`:
/// the numbers it printed, with when each arrived.
struct Writer {
    child: std::process::Child,
    printed: Arc<Mutex<Vec<(u64, Instant)>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Writer {
    fn start(cx: &Context) -> Result<Writer> {
        let mut child = cx.tools.cli_child(&[
            "-n",
            NS,
            "exec",
            NAME,
            "--runtime",
            "container",
            "--",
            WRITER,
        ])?;
        let out = child.stdout.take().context("the writer's stdout")?;
        let printed = Arc::new(Mutex::new(Vec::new()));
        let sink = printed.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(n) = line.trim().parse::<u64>() {
                    sink.lock().unwrap().push((n, Instant::now()));
                }
            }
        });
        Ok(Writer {
            child,
            printed,
            reader,
        })
    }

    fn count(&self) -> usize {
        self.printed.lock().unwrap().len()
    }

    /// Stops it (if it still runs) and returns what it printed.
    fn finish(mut self) -> Vec<(u64, Instant)> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        std::mem::take(&mut *self.printed.lock().unwrap())
    }
}

/// The node a step may drain or stop: with the release's backup store and
/// two nodes, the last Ready one that does not run the object store; else
/// `Err` with the step's skip note (computers cannot `what` then).
fn node_to_empty(cx: &Context, what: &str) -> Result<std::result::Result<String, String>> {
    let values: Value = serde_json::from_str(
        &cx.tools
            .helm(&["get", "values", "ac", "-n", SYSTEM_NS, "-o", "json"])?
            .ok("helm get values")?,
    )
    .context("helm get values printed no JSON")?;
    if text(&values, "/backup/url").is_empty() {
        return Ok(Err(format!(
            "skipped: the release has no backup.url, so computers cannot {what}"
        )));
    }
    let nodes = ready_nodes(cx)?;
    if nodes.len() < 2 {
        return Ok(Err("skipped: one node".into()));
    }
    let store = object_store_node(cx);
    let bare = nodes_with_bare_pods(cx)?;
    nodes
        .iter()
        .rev()
        .find(|n| Some(n.as_str()) != store.as_deref() && !bare.contains(n))
        .cloned()
        .map(Ok)
        .ok_or_else(|| {
            anyhow!(
                "no node to empty: the object store runs on {store:?} and pods with no controller \
                 (which `kubectl drain` refuses without --force) on {bare:?}"
            )
        })
}

/// The nodes running an unfinished pod with no controller that is not a
/// static pod's mirror: `kubectl drain` without `--force` refuses them.
fn nodes_with_bare_pods(cx: &Context) -> Result<Vec<String>> {
    let pods = cx.tools.kubectl_json(&["get", "pods", "-A"])?;
    Ok(pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            let controlled = p["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["controller"].as_bool() == Some(true));
            let mirror = p
                .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
                .is_some();
            let finished = matches!(text(p, "/status/phase"), "Succeeded" | "Failed");
            !controlled && !mirror && !finished
        })
        .filter_map(|p| p.pointer("/spec/nodeName")?.as_str().map(String::from))
        .collect())
}

/// `kubectl drain NODE --ignore-daemonsets --delete-emptydir-data`, the
/// command docs/moves.md gives, of the node serving a computer whose
/// sandbox appends a numbered, fsynced record every 50 ms: the drain
/// completes, the computer is Ready on the other node, every number the
/// writer printed is in the file there, and the writer resumes after the
/// last record. Reports the hand-over (`lastMove.handOverMillis`), the
/// move, the sandbox's restart and the writer's longest pause apart. Then
/// `kubectl computer move NAME --to NODE` brings it back. Needs two nodes
/// and the release's backup store; skipped otherwise.
pub fn drained_node_moves_its_computers(cx: &mut Context) -> Result<String> {
    let node = match node_to_empty(cx, "move")? {
        Ok(node) => node,
        Err(skipped) => return Ok(skipped),
    };
    let result = drain_and_move(cx, &node);
    let uncordoned = cx
        .tools
        .kubectl(&["uncordon", &node])
        .and_then(|o| o.ok("kubectl uncordon"));
    let note = match (result, uncordoned) {
        (Ok(note), Ok(_)) => move_back(cx, &node).map(|back| format!("{note}; {back}")),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    };
    let deleted = cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        NAME,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    ]);
    let note = note?;
    deleted?;
    Ok(note)
}

fn drain_and_move(cx: &mut Context, node: &str) -> Result<String> {
    // Placed on `node` by a nodeSelector, which then goes so that the
    // computer may move.
    cx.apply_computer(
        NAME,
        json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": cx.sandbox_image()},
            "nodeSelector": {"kubernetes.io/hostname": node},
        }),
    )?;
    cx.wait_ready(NAME, 180)?;
    cx.apply_computer(
        NAME,
        json!({
            "storage": {"size": "64Mi"},
            "runtimes": {"shell": true, "javascript": true, "container": true},
            "sandbox": {"image": cx.sandbox_image()},
        }),
    )?;
    let c = cx.computer(NAME)?;
    ensure!(
        text(&c, "/status/node") == node,
        "{NAME} is on {:?}, not {node}",
        text(&c, "/status/node")
    );
    container_ready(cx, 240)?;
    let writer = Writer::start(cx)?;
    eventually(120, "the writer to print 20 records", || {
        Ok((writer.count() >= 20).then_some(()))
    })?;

    let t = Instant::now();
    let drained = cx.tools.kubectl(&[
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=300s",
    ])?;
    let drain = t.elapsed();
    let drained = drained.ok(&format!(
        "kubectl drain {node} --ignore-daemonsets --delete-emptydir-data"
    ));
    if let Err(e) = drained {
        let _ = writer.finish();
        return Err(e);
    }
    cx.time(format!("kubectl drain {node} (moves its computers)"), drain);

    let c = eventually(300, &format!("{NAME} to move off {node}"), || {
        let c = cx.computer(NAME)?;
        let on = text(&c, "/status/node");
        Ok((on != node && !on.is_empty() && condition(&c, "Ready") == "True").then_some(c))
    })
    .map_err(|e| {
        let now = cx
            .computer(NAME)
            .map(|c| format!("status {}", c["status"]))
            .unwrap_or_else(|e| format!("{e:#}"));
        anyhow!("{e:#}; now {now}")
    })?;
    let moved_at = Instant::now();
    let target = text(&c, "/status/node").to_string();
    let hand_over_ms = c
        .pointer("/status/lastMove/handOverMillis")
        .and_then(Value::as_i64)
        .context("status.lastMove.handOverMillis")?;
    let reason = text(&c, "/status/lastMove/reason").to_string();
    ensure!(reason == "NodeCordoned", "lastMove.reason {reason:?}");

    // The sandbox comes back on the target, with every printed record.
    let records = container_exec(cx, "cat records", 300)?;
    let restart = moved_at.elapsed();
    let printed = writer.finish();
    ensure!(!printed.is_empty(), "the writer printed nothing");
    let in_file: std::collections::HashSet<u64> = records
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let missing: Vec<u64> = printed
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !in_file.contains(n))
        .collect();
    ensure!(
        missing.is_empty(),
        "{} printed records are not in the file on {target}: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    let last = records
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    // The API gateway (when the release runs one) routes to the new node.
    if let Some(out) = super::gateway::exec_if_running(cx, NAME, "cat records")? {
        ensure!(
            out.lines()
                .filter_map(|l| l.trim().parse::<u64>().ok())
                .max()
                == Some(last),
            "through the gateway after the move, the records end at {:?}, not {last}",
            out.lines().last()
        );
    }

    // The writer resumes after the last record, on the target.
    let resumed_from = Instant::now();
    let again = Writer::start(cx)?;
    eventually(120, "the writer to print again", || {
        Ok((again.count() >= 5).then_some(()))
    })?;
    let again = again.finish();
    ensure!(
        again.first().map(|(n, _)| *n) == Some(last + 1),
        "the writer resumed at {:?}, the file ends at {last}",
        again.first()
    );
    let pod = cx
        .tools
        .kubectl_json(&["-n", NS, "get", "pod", &format!("{NAME}-sandbox")])?;
    ensure!(
        text(&pod, "/spec/nodeName") == target,
        "the sandbox pod runs on {:?}, the computer on {target}",
        text(&pod, "/spec/nodeName")
    );
    let paused = printed
        .last()
        .map(|(_, at)| resumed_from.saturating_duration_since(*at))
        .unwrap_or_default();
    cx.time(
        "move: hand-over (calls held)",
        Duration::from_millis(hand_over_ms as u64),
    );
    cx.time(
        "move: computer Ready on target to a container exec",
        restart,
    );
    Ok(format!(
        "drained {node} in {:.1} s; {NAME} moved to {target}: hand-over {hand_over_ms} ms, \
         sandbox back {:.1} s after the move; all {} printed records there (last {last}); \
         the writer resumed at {}; its longest pause {:.1} s (eviction to resumed writer)",
        drain.as_secs_f64(),
        restart.as_secs_f64(),
        printed.len(),
        last + 1,
        paused.as_secs_f64(),
    ))
}

/// `kubectl computer move NAME --to NODE`: back to `node`, with its files.
fn move_back(cx: &mut Context, node: &str) -> Result<String> {
    let before = cx.exec(NAME, "shell", "wc -l < records")?;
    let t = Instant::now();
    let out = cx
        .tools
        .cli(&["-n", NS, "move", NAME, "--to", node], None)?
        .ok(&format!("kubectl computer move {NAME} --to {node}"))?;
    let took = t.elapsed();
    cx.time("kubectl computer move", took);
    let c = cx.computer(NAME)?;
    ensure!(
        text(&c, "/status/node") == node,
        "after `kubectl computer move` {NAME} is on {:?}, not {node}: {out}",
        text(&c, "/status/node")
    );
    cx.wait_ready(NAME, 120)?;
    let after = cx.exec(NAME, "shell", "wc -l < records")?;
    ensure!(
        after == before,
        "records: {before:?} before the move, {after:?} after"
    );
    Ok(format!(
        "`kubectl computer move --to {node}` took {:.1} s ({})",
        took.as_secs_f64(),
        out.trim()
    ))
}

/// Waits until a container exec runs on the computer (its sandbox pod is
/// up and its runner attached).
fn container_ready(cx: &Context, secs: u64) -> Result<()> {
    container_exec(cx, "true", secs).map(|_| ())
}

/// A container exec, retried while the sandbox is not there yet.
fn container_exec(cx: &Context, script: &str, secs: u64) -> Result<String> {
    eventually(secs, &format!("a container exec on {NAME}"), || {
        let out = cx.exec_output(NAME, "container", script)?;
        if out.code == 0 {
            Ok(Some(out.stdout))
        } else {
            Err(anyhow!("exit {}: {}", out.code, out.stderr.trim()))
        }
    })
}

/// The computer the failover step makes.
const SURVIVOR: &str = "survivor";

/// A node lost (`E2E_NODE_CTL stop NODE`: its kubelet, containerd and node
/// agent killed together) with a computer whose writes were synced:
/// annotated `agentcomputer.dev/failover: now`, the computer comes back on
/// the other node once the lost node's writer Lease expired, with every
/// synced record, and `status.lastMove` says what it came back to. The node
/// then returns (`E2E_NODE_CTL start NODE`): its agent does not serve the
/// computer, and removes its copy (the store's log has gone past it).
/// Needs two nodes, the release's backup store and `E2E_NODE_CTL`.
pub fn lost_node_fails_over(cx: &mut Context) -> Result<String> {
    let Some(ctl) = std::env::var_os("E2E_NODE_CTL") else {
        return Ok("skipped: E2E_NODE_CTL unset (no way to stop a node of this cluster)".into());
    };
    let node = match node_to_empty(cx, "fail over")? {
        Ok(node) => node,
        Err(skipped) => return Ok(skipped),
    };
    let ctl = std::path::PathBuf::from(ctl);
    let ctl_run = |cx: &Context, op: &str| -> Result<()> {
        cx.tools
            .run(&ctl, &[op, &node])?
            .ok(&format!("{} {op} {node}", ctl.display()))
            .map(|_| ())
    };
    cx.apply_computer(
        SURVIVOR,
        json!({"storage": {"size": "32Mi"}, "nodeSelector": {"kubernetes.io/hostname": node}}),
    )?;
    cx.wait_ready(SURVIVOR, 120)?;
    cx.apply_computer(SURVIVOR, json!({"storage": {"size": "32Mi"}}))?;
    let c = cx.computer(SURVIVOR)?;
    let uid = text(&c, "/metadata/uid").to_string();
    cx.exec(SURVIVOR, "shell", "seq 1 500 > records")?;
    cx.tools
        .cli(&["-n", NS, "sync", SURVIVOR], None)?
        .ok(&format!("kubectl computer sync {SURVIVOR}"))?;

    ctl_run(cx, "stop")?;
    let stopped = Instant::now();
    let result = fail_over(cx, &node, stopped);
    let started = ctl_run(cx, "start");
    let note = result.and_then(|note| {
        started?;
        back_without_serving(cx, &node, &uid).map(|back| format!("{note}; {back}"))
    });
    let deleted = cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        SURVIVOR,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    ]);
    let note = note?;
    deleted?;
    Ok(note)
}

fn fail_over(cx: &mut Context, node: &str, stopped: Instant) -> Result<String> {
    eventually(180, &format!("{SURVIVOR} to turn Unavailable"), || {
        let c = cx.computer(SURVIVOR)?;
        Ok((text(&c, "/status/phase") == "Unavailable").then_some(()))
    })?;
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "annotate",
        "agentcomputer",
        SURVIVOR,
        "agentcomputer.dev/failover=now",
    ])?;
    let c = eventually(240, &format!("{SURVIVOR} to fail over"), || {
        let c = cx.computer(SURVIVOR)?;
        let on = text(&c, "/status/node");
        Ok((on != node && !on.is_empty() && condition(&c, "Ready") == "True").then_some(c))
    })
    .map_err(|e| {
        let now = cx
            .computer(SURVIVOR)
            .map(|c| format!("status {}", c["status"]))
            .unwrap_or_else(|e| format!("{e:#}"));
        anyhow!("{e:#}; now {now}")
    })?;
    let target = text(&c, "/status/node").to_string();
    ensure!(
        text(&c, "/status/lastMove/reason") == "NodeLost",
        "lastMove {}",
        c["status"]["lastMove"]
    );
    let count = cx.exec(SURVIVOR, "shell", "wc -l < records")?;
    let took = stopped.elapsed();
    ensure!(
        count.trim() == "500",
        "after the failover records has {count:?} lines, 500 were synced"
    );
    cx.time(
        "node stopped to its computer failed over and answering",
        took,
    );
    Ok(format!(
        "{node} stopped; {SURVIVOR} answered on {target} {:.0} s later with all 500 synced records (lastMove: position {} shipped {})",
        took.as_secs_f64(),
        c["status"]["lastMove"]["lastReportedPosition"],
        text(&c, "/status/lastMove/lastReportedShippedTime"),
    ))
}

/// After the lost node is back: the computer stays where it failed over
/// to, and the returned node's copy goes (checked on the node agents'
/// host directories when `E2E_NODE_DATA_DIR` names them).
fn back_without_serving(cx: &mut Context, node: &str, uid: &str) -> Result<String> {
    eventually(
        240,
        &format!("{node}'s node agent to be ready again"),
        || {
            let nodes = ready_nodes(cx)?;
            Ok(nodes.iter().any(|n| n == node).then_some(()))
        },
    )?;
    let c = cx.computer(SURVIVOR)?;
    ensure!(
        text(&c, "/status/node") != node,
        "{SURVIVOR} went back to {node} after it returned"
    );
    let count = cx.exec(SURVIVOR, "shell", "wc -l < records")?;
    ensure!(
        count.trim() == "500",
        "records has {count:?} lines after {node} returned"
    );
    match &cx.node_data {
        Some(dirs) => {
            let copies = || -> usize {
                dirs.iter()
                    .filter(|d| d.join("data/computers").join(uid).exists())
                    .count()
            };
            // The new node shipped past the old copy once it wrote.
            cx.exec(SURVIVOR, "shell", "echo after >> records")?;
            eventually(
                180,
                &format!("{node}'s stale copy of {SURVIVOR} to go"),
                || Ok((copies() == 1).then_some(())),
            )?;
            Ok(format!(
                "{node} returned without serving it, and removed its stale copy"
            ))
        }
        None => Ok(format!(
            "{node} returned without serving it (its copy not checked: E2E_NODE_DATA_DIR unset)"
        )),
    }
}
