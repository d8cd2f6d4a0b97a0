//! Steps over the cluster's nodes: a computer pinned to each node works in
//! every runtime there; a node drained as an operator drains one
//! (`kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --force`)
//! keeps its computers listed, with their state, and served by its node
//! agent until it is uncordoned; a node stopped abruptly makes its
//! computers Unavailable until it is back.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail, ensure};
use serde_json::{Value, json};

use super::{Context, NS};
use crate::tools::{condition, eventually, text};

/// Label of the computers these steps make.
const LABEL: &str = "e2e/nodes";

/// The names of the Ready, schedulable nodes, sorted.
pub fn ready_nodes(cx: &Context) -> Result<Vec<String>> {
    let nodes = cx.tools.kubectl_json(&["get", "nodes"])?;
    let mut names: Vec<String> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            condition(n, "Ready") == "True"
                && n.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true)
        })
        .map(|n| text(n, "/metadata/name").to_string())
        .collect();
    names.sort();
    ensure!(!names.is_empty(), "no Ready, schedulable node");
    Ok(names)
}

/// The node the object store's pod runs on, if it can be found. It keeps
/// its objects in an emptyDir, so the steps that drain or stop a node pick
/// another one, and the pods a drain refuses to evict (the egress step's
/// bare web server pod) are put on this node for the same reason.
pub fn object_store_node(cx: &Context) -> Option<String> {
    let pods = cx
        .tools
        .kubectl_json(&["-n", "agentcomputer-object-store", "get", "pods"])
        .ok()?;
    pods["items"]
        .as_array()?
        .iter()
        .find_map(|p| p.pointer("/spec/nodeName")?.as_str().map(String::from))
}

/// The computer the first step pins to `node`.
fn computer_on(node: &str) -> String {
    format!("on-{node}")
}

/// A container exec, retried while the sandbox's runner has not attached
/// yet; returns stdout.
fn container_exec(cx: &Context, name: &str, script: &str, secs: u64) -> Result<String> {
    eventually(secs, &format!("a container exec on {name}"), || {
        match cx.exec(name, "container", script) {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        }
    })?
}

/// The computer's `SandboxReady` condition: (status, reason).
fn sandbox_ready(cx: &Context, name: &str) -> Result<(String, String)> {
    let c = cx.computer(name)?;
    let cond = c
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| text(c, "/type") == "SandboxReady")
        .ok_or_else(|| anyhow!("{name} has no SandboxReady condition"))?;
    Ok((
        text(cond, "/status").to_string(),
        text(cond, "/reason").to_string(),
    ))
}

/// A computer with every runtime pinned to each Ready node (its
/// `nodeSelector` names the node's `kubernetes.io/hostname`): it is placed
/// there (`status.node`), its sandbox pod runs there, and a file the shell
/// writes is read by JavaScript and by `python3` in the container runtime.
pub fn computer_on_each_node(cx: &mut Context) -> Result<String> {
    let nodes = ready_nodes(cx)?;
    for node in &nodes {
        let manifest = json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": computer_on(node), "namespace": NS, "labels": {LABEL: "1"}},
            "spec": {
                "storage": {"size": "64Mi"},
                "runtimes": {"shell": true, "javascript": true, "container": true},
                "sandbox": {"image": cx.sandbox_image()},
                "nodeSelector": {"kubernetes.io/hostname": node},
            },
        });
        cx.tools
            .apply(&manifest.to_string())?
            .ok(&format!("kubectl apply of computer {}", computer_on(node)))?;
    }
    let mut notes = Vec::new();
    for node in &nodes {
        let name = computer_on(node);
        let ready = cx.wait_ready(&name, 180)?;
        let c = cx.computer(&name)?;
        ensure!(
            text(&c, "/status/node") == node,
            "{name} is on node {:?}, its nodeSelector names {node}",
            text(&c, "/status/node")
        );
        let out = cx.exec(
            &name,
            "shell",
            &format!("echo {node} > where.txt && cat where.txt"),
        )?;
        ensure!(
            out == format!("{node}\n"),
            "the shell on {name} printed {out:?}"
        );
        let out = cx.exec(
            &name,
            "javascript",
            r#"import fs from "node:fs"; export default () => fs.readFileSync("where.txt", "utf8").trim()"#,
        )?;
        ensure!(
            out == format!("\"{node}\"\n"),
            "javascript on {name} printed {out:?}"
        );
        let t = Instant::now();
        let out = container_exec(
            cx,
            &name,
            "python3 -c 'print(open(\"where.txt\").read().strip())'",
            120,
        )?;
        ensure!(
            out == format!("{node}\n"),
            "python3 in {name}'s container printed {out:?}"
        );
        let pod = cx
            .tools
            .kubectl_json(&["-n", NS, "get", "pod", &format!("{name}-sandbox")])?;
        ensure!(
            text(&pod, "/spec/nodeName") == node,
            "{name}'s sandbox pod runs on {:?}, not {node}",
            text(&pod, "/spec/nodeName")
        );
        cx.time(format!("computer on {node}: apply to Ready"), ready);
        notes.push(format!(
            "{node}: Ready after {:.1} s, container exec {:.1} s",
            ready.as_secs_f64(),
            t.elapsed().as_secs_f64()
        ));
    }
    Ok(notes.join("; "))
}

/// Drains the last Ready node with `kubectl drain` as documented: the
/// computer on it stays listed (`kubectl get agentcomputers`, `kubectl
/// computer list`) on that node with its state, its shell still answers
/// (the node agent is a DaemonSet pod, which the drain leaves), its
/// evicted sandbox pod cannot come back (`SandboxReady=False`, reason
/// `Unschedulable`: it is pinned to the cordoned node), it does not move
/// (its nodeSelector names that node: with a backup store, `Moving=False`
/// says `NoEligibleTarget`), and a new
/// computer is placed on another node. After `kubectl uncordon` the
/// sandbox runs again on the same files. Needs two nodes; the computers of
/// these steps are deleted at the end either way.
pub fn drained_node_listed(cx: &mut Context) -> Result<String> {
    let nodes = ready_nodes(cx)?;
    let result = if nodes.len() < 2 {
        Ok("skipped: one node (draining it would evict the operator with nowhere to go)".into())
    } else {
        let node = nodes.last().expect("two nodes").clone();
        let drained = drain_and_check(cx, &node);
        let uncordoned = cx
            .tools
            .kubectl(&["uncordon", &node])
            .and_then(|o| o.ok("kubectl uncordon"));
        match (drained, uncordoned) {
            (Ok(note), Ok(_)) => {
                back_after_uncordon(cx, &node).map(|back| format!("{note}; {back}"))
            }
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
        }
    };
    let deleted = cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputers",
        "-l",
        &format!("{LABEL}=1"),
        "--wait=true",
        "--timeout=180s",
    ]);
    let note = result?;
    deleted?;
    Ok(note)
}

fn drain_and_check(cx: &mut Context, node: &str) -> Result<String> {
    let name = computer_on(node);
    cx.wait_ready(&name, 60)?;
    let t = Instant::now();
    cx.tools
        .kubectl(&[
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=180s",
        ])?
        .ok(&format!("kubectl drain {node}"))?;
    let drain = t.elapsed();
    cx.time(format!("kubectl drain {node}"), drain);

    // Listed, on its node, with its state.
    let table = cx
        .tools
        .kubectl_ok(&["-n", NS, "get", "agentcomputers", "-o", "wide"])?;
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| anyhow!("kubectl get agentcomputers does not list {name}:\n{table}"))?;
    ensure!(
        row.split_whitespace().any(|f| f == node),
        "kubectl get agentcomputers lists {name} without its node {node}: {row}"
    );
    let listed = cx
        .tools
        .cli(&["-n", NS, "list"], None)?
        .ok("kubectl computer list")?;
    let cli_row = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| anyhow!("kubectl computer list does not list {name}:\n{listed}"))?;

    // The evicted sandbox pod cannot come back while the node is cordoned.
    let (status, reason) = eventually(
        120,
        &format!("{name}'s sandbox to wait for its node"),
        || {
            let (status, reason) = sandbox_ready(cx, &name)?;
            Ok((status == "False" && reason == "Unschedulable").then_some((status, reason)))
        },
    )
    .map_err(|e| {
        let now = sandbox_ready(cx, &name)
            .map(|(s, r)| format!("SandboxReady={s} ({r})"))
            .unwrap_or_else(|e| format!("{e:#}"));
        anyhow!("{e:#}; now {now}")
    })?;

    // Pinned by its nodeSelector: a move has nowhere to go, and says so.
    let c = cx.computer(&name)?;
    let moving = c
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|k| text(k, "/type") == "Moving")
        .map(|k| text(k, "/reason").to_string());
    ensure!(
        moving.is_none() || moving.as_deref() == Some("NoEligibleTarget"),
        "{name} is pinned to {node}, yet its Moving condition says {moving:?}"
    );

    // The node agent still serves the computer's files.
    let out = cx.exec(&name, "shell", "cat where.txt")?;
    ensure!(
        out == format!("{node}\n"),
        "the shell on drained {name} printed {out:?}"
    );

    // A new computer goes elsewhere.
    cx.apply_computer("after-drain", json!({"storage": {"size": "16Mi"}}))?;
    let placed = cx.wait_ready("after-drain", 120).and_then(|_| {
        let c = cx.computer("after-drain")?;
        let on = text(&c, "/status/node").to_string();
        ensure!(
            on != node,
            "after-drain was placed on the cordoned node {node}"
        );
        Ok(on)
    });
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        "after-drain",
        "--wait=true",
        "--timeout=120s",
    ])?;
    let placed = placed?;
    let c = cx.computer(&name)?;
    Ok(format!(
        "drained in {:.1} s; {name} listed on {node}, phase {}, SandboxReady={status} ({reason}), `kubectl computer list`: {}; its shell answers; a new computer went to {placed}",
        drain.as_secs_f64(),
        text(&c, "/status/phase"),
        cli_row.split_whitespace().collect::<Vec<_>>().join(" "),
    ))
}

/// After the uncordon: the sandbox pod runs again on the same node and the
/// container runtime reads the file written before the drain.
fn back_after_uncordon(cx: &mut Context, node: &str) -> Result<String> {
    let name = computer_on(node);
    let t = Instant::now();
    eventually(180, &format!("{name}'s sandbox to run again"), || {
        let (status, reason) = sandbox_ready(cx, &name)?;
        if status == "True" {
            Ok(Some(()))
        } else {
            bail!("SandboxReady={status} ({reason})")
        }
    })?;
    let out = container_exec(cx, &name, "cat where.txt", 120)?;
    ensure!(
        out == format!("{node}\n"),
        "the container on {name} printed {out:?}"
    );
    let back = t.elapsed();
    cx.time(format!("uncordon {node} to a container exec"), back);
    Ok(format!(
        "after uncordon its sandbox ran again in {:.1} s",
        Duration::as_secs_f64(&back)
    ))
}

/// Stops the last Ready node abruptly with the cluster's own node command
/// (`E2E_NODE_CTL stop NODE`: its kubelet, containerd and node agent killed
/// together): a computer there turns `Unavailable` (`Ready=False`, reason
/// `NodeAgentNotReady` or `NodeGone`) once the cluster notices; after
/// `E2E_NODE_CTL start NODE` it is Ready again and its shell reads the file
/// written before the stop. Needs two nodes and `E2E_NODE_CTL`
/// (`e2e/run.sh` sets it to `e2e/cluster/node`); skipped otherwise.
pub fn stopped_node_comes_back(cx: &mut Context) -> Result<String> {
    let Some(ctl) = std::env::var_os("E2E_NODE_CTL") else {
        return Ok("skipped: E2E_NODE_CTL unset (no way to stop a node of this cluster)".into());
    };
    let nodes = ready_nodes(cx)?;
    if nodes.len() < 2 {
        return Ok("skipped: one node (stopping it would stop the operator too)".into());
    }
    let node = nodes.last().expect("two nodes").clone();
    let name = "stopped";
    cx.apply_computer(
        name,
        json!({"storage": {"size": "16Mi"},
               "nodeSelector": {"kubernetes.io/hostname": node}}),
    )?;
    cx.wait_ready(name, 120)?;
    cx.exec(name, "shell", "echo before-stop > s.txt")?;
    let ctl = std::path::PathBuf::from(ctl);
    let ctl_run = |cx: &Context, op: &str| -> Result<()> {
        cx.tools
            .run(&ctl, &[op, &node])?
            .ok(&format!("{} {op} {node}", ctl.display()))
            .map(|_| ())
    };
    let t = Instant::now();
    ctl_run(cx, "stop")?;
    let result = (|| -> Result<String> {
        let (reason, phase) = eventually(240, &format!("{name} to turn Unavailable"), || {
            let c = cx.computer(name)?;
            let ready = c
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| text(c, "/type") == "Ready")
                .cloned()
                .unwrap_or(Value::Null);
            let reason = text(&ready, "/reason").to_string();
            Ok((text(&ready, "/status") == "False"
                && (reason == "NodeAgentNotReady" || reason == "NodeGone"))
                .then(|| (reason, text(&c, "/status/phase").to_string())))
        })?;
        let noticed = t.elapsed();
        cx.time(
            format!("{node} stopped to its computer Unavailable"),
            noticed,
        );
        Ok(format!(
            "{name} on {node}: phase {phase}, Ready=False ({reason}) {:.0} s after the stop",
            noticed.as_secs_f64()
        ))
    })();
    let t = Instant::now();
    let started = ctl_run(cx, "start");
    let down = result?;
    started?;
    cx.wait_ready(name, 180)?;
    let out = eventually(60, &format!("{name}'s shell after the restart"), || {
        cx.exec(name, "shell", "cat s.txt").map(Some)
    })?;
    ensure!(
        out == "before-stop\n",
        "the shell read {out:?} after the restart"
    );
    let back = t.elapsed();
    cx.time(format!("{node} started to its computer's shell"), back);
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        name,
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(format!(
        "{down}; Ready again, files intact, {:.1} s after the start",
        back.as_secs_f64()
    ))
}
