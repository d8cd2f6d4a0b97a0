//! Deleting computers, and 200 computers on one node.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use serde_json::Value;

use super::*;
use crate::tools::{condition, eventually, text};

/// Deleting computers: under Delete, the PV, PVC, Secret, NetworkPolicy and
/// database go; under Retain the database stays.
pub(super) fn deletion(cx: &mut Context) -> Result<String> {
    let mut notes = Vec::new();
    for (name, keeps) in [("scratch", false), ("box", true)] {
        let c = cx.computer(name)?;
        let uid = text(&c, "/metadata/uid").to_string();
        cx.tools.kubectl_ok(&[
            "-n",
            NS,
            "delete",
            "agentcomputer",
            name,
            "--wait=true",
            "--timeout=120s",
        ])?;
        let pv = format!("agentcomputer-{uid}");
        // Under Retain the volume (PV and PVC) stays for a later computer
        // of the same name; everything else goes under both policies.
        let mut gone = vec![
            ("secret", format!("{name}-credential"), Some(NS)),
            ("networkpolicy", format!("{name}-egress"), Some(NS)),
            ("pod", format!("{name}-sandbox"), Some(NS)),
        ];
        if !keeps {
            gone.push(("pv", pv.clone(), None));
            gone.push(("pvc", format!("{name}-workspace"), Some(NS)));
        }
        eventually(120, &format!("the objects of {name} to go"), || {
            let mut left = Vec::new();
            for (kind, obj, ns) in gone.iter().cloned() {
                let mut args = vec!["get", kind, &obj, "--ignore-not-found", "-o", "name"];
                if let Some(ns) = ns {
                    args.extend(["-n", ns]);
                }
                if !cx.tools.kubectl_ok(&args)?.trim().is_empty() {
                    left.push(format!("{kind}/{obj}"));
                }
            }
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("still there: {}", left.join(", "))
            }
        })?;
        if keeps {
            let kept = cx.tools.kubectl_json(&["get", "pv", &pv])?;
            ensure!(
                text(
                    &kept,
                    "/metadata/annotations/agentcomputer.dev~1retained-from"
                ) == format!("{NS}/{name}"),
                "Retain: PV {pv} lacks agentcomputer.dev/retained-from"
            );
        }
        match &cx.node_data {
            Some(dirs) => {
                // On whichever node it was: the database is in one of them.
                let dbs: Vec<PathBuf> = dirs
                    .iter()
                    .map(|d| d.join("data/computers").join(&uid))
                    .collect();
                let shown = || {
                    dbs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                };
                if keeps {
                    ensure!(
                        dbs.iter().any(|db| db.exists()),
                        "Retain: {} is gone",
                        shown()
                    );
                } else {
                    eventually(60, &format!("{} to go", shown()), || {
                        Ok((!dbs.iter().any(|db| db.exists())).then_some(()))
                    })?;
                }
            }
            None => notes.push("database files not checked (E2E_NODE_DATA_DIR unset)"),
        }
        if keeps {
            // Released by hand, as a user would, so that the suite can run
            // again on the same cluster.
            let pvc = format!("{name}-workspace");
            cx.tools
                .kubectl_ok(&["-n", NS, "delete", "pvc", &pvc, "--timeout=60s"])?;
            cx.tools
                .kubectl_ok(&["delete", "pv", &pv, "--timeout=60s"])?;
        }
    }
    Ok(notes.join("; "))
}

/// How many computers the burst step applies at once.
pub(super) const BURST: usize = 200;

/// Clients that run the burst's first execs side by side.
pub(super) const BURST_CLIENTS: usize = 4;

/// `BURST` computers applied at once (one `kubectl apply` of a List), all
/// on the node of the first Ready node agent (their `nodeSelector`), all
/// reach Ready; the first shell exec of each succeeds; that node agent's
/// resident memory (its `process_resident_memory_bytes`, read through the
/// API server's pod proxy) is measured with them all open and again after
/// they hibernate; then they are deleted.
pub(super) fn burst(cx: &mut Context) -> Result<String> {
    let agent = agent_pod(cx)?;
    let node = text(&agent, "/spec/nodeName").to_string();
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{i:03}")).collect();
    let items: Vec<Value> = names
        .iter()
        .map(|n| {
            serde_json::json!({
                "apiVersion": "agentcomputer.dev/v1alpha1",
                "kind": "AgentComputer",
                "metadata": {"name": n, "namespace": NS, "labels": {"e2e/burst": "1"}},
                "spec": {"storage": {"size": "16Mi"},
                         "nodeSelector": {"kubernetes.io/hostname": node}},
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let start = Instant::now();
    cx.tools
        .apply(&list.to_string())?
        .ok("kubectl apply of the burst")?;
    let mut last_ready = 0;
    eventually(600, &format!("{BURST} computers Ready"), || {
        let all =
            cx.tools
                .kubectl_json(&["-n", NS, "get", "agentcomputers", "-l", "e2e/burst=1"])?;
        let ready = all["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| condition(c, "Ready") == "True")
            .count();
        last_ready = ready;
        Ok((ready == BURST).then_some(()))
    })
    .map_err(|e| anyhow!("{e:#} ({last_ready} of {BURST} Ready)"))?;
    let all_ready = start.elapsed();
    cx.time(
        format!("{BURST} computers: kubectl apply to all Ready"),
        all_ready,
    );
    // Four clients at a time, so all the first execs land well within the
    // agent's idle timeout (120 s here) and every computer is open when the
    // memory is read.
    let ctx: &Context = cx;
    let results: Vec<Result<Vec<Duration>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = names
            .chunks(BURST.div_ceil(BURST_CLIENTS))
            .map(|chunk| {
                scope.spawn(move || {
                    let mut took = Vec::with_capacity(chunk.len());
                    for name in chunk {
                        let t = Instant::now();
                        let out = ctx.exec(name, "shell", "echo ok-$((20+22))")?;
                        took.push(t.elapsed());
                        ensure!(out == "ok-42\n", "first exec on {name} printed {out:?}");
                    }
                    Ok(took)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(anyhow!("an exec client panicked")))
            })
            .collect()
    });
    let mut latencies = Vec::with_capacity(BURST);
    for r in results {
        latencies.extend(r?);
    }
    let execs_done = start.elapsed() - all_ready;
    latencies.sort();
    let p50 = latencies[BURST / 2];
    let max = latencies[BURST - 1];
    cx.time(
        format!("{BURST} computers: first shell exec each, median"),
        p50,
    );
    cx.time(
        format!("{BURST} computers: first shell exec each, slowest"),
        max,
    );
    cx.time(
        format!("{BURST} computers: all first execs, {BURST_CLIENTS} clients"),
        execs_done,
    );
    let open = agent_metrics(cx, &agent)?;
    let open_computers = metric(&open, r#"agentcomputer_node_computers{state="open"}"#)?;
    ensure!(
        open_computers >= BURST as f64,
        "the node agent has {open_computers} computers open right after their execs, fewer than {BURST}"
    );
    let rss_open = metric(&open, "process_resident_memory_bytes")?;
    // The chart's idle timeout is 120 s here (helm_upgrade).
    let hibernated = eventually(300, "the burst's computers to hibernate", || {
        let m = agent_metrics(cx, &agent)?;
        let still_open = metric(&m, r#"agentcomputer_node_computers{state="open"}"#)?;
        Ok((still_open < 10.0).then_some(m))
    })?;
    let rss_idle = metric(&hibernated, "process_resident_memory_bytes")?;
    let mib = |b: f64| b / (1024.0 * 1024.0);
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputers",
        "-l",
        "e2e/burst=1",
        "--wait=true",
        "--timeout=300s",
    ])?;
    Ok(format!(
        "on {node}: all Ready {:.1} s after apply; first exec median {} ms, slowest {} ms; \
         agent RSS {:.0} MiB with {open_computers} open, {:.0} MiB after they hibernated",
        all_ready.as_secs_f64(),
        p50.as_millis(),
        max.as_millis(),
        mib(rss_open),
        mib(rss_idle),
    ))
}

/// The release's node agent pods.
pub(super) fn agent_pods(cx: &Context) -> Result<Vec<Value>> {
    let pods = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=agentcomputer-node-agent",
    ])?;
    Ok(pods["items"].as_array().cloned().unwrap_or_default())
}

/// The node agent pod on `node` (Ready or not).
pub(super) fn agent_pod_on(cx: &Context, node: &str) -> Result<Value> {
    agent_pods(cx)?
        .into_iter()
        .find(|p| text(p, "/spec/nodeName") == node)
        .with_context(|| format!("no node agent pod on node {node}"))
}

/// The restarts of a pod's containers, summed.
pub(super) fn restarts(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum()
}

/// The first Ready node agent pod, by node name.
pub(super) fn agent_pod(cx: &Context) -> Result<Value> {
    let mut ready: Vec<Value> = agent_pods(cx)?
        .into_iter()
        .filter(|p| condition(p, "Ready") == "True")
        .collect();
    ready.sort_by(|a, b| text(a, "/spec/nodeName").cmp(text(b, "/spec/nodeName")));
    ready
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("no Ready node agent pod"))
}

/// The `/metrics` text of the node agent on `agent`'s node (the pod may
/// have been replaced since), through the API server's pod proxy.
pub(super) fn agent_metrics(cx: &Context, agent: &Value) -> Result<String> {
    let node = text(agent, "/spec/nodeName");
    let pods = cx.tools.kubectl_json(&[
        "-n",
        SYSTEM_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=agentcomputer-node-agent",
        "--field-selector",
        &format!("spec.nodeName={node}"),
    ])?;
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| condition(p, "Ready") == "True")
        .ok_or_else(|| anyhow!("no Ready node agent pod on {node}"))?;
    let name = text(pod, "/metadata/name");
    cx.tools.kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{SYSTEM_NS}/pods/{name}:9090/proxy/metrics"),
    ])
}

/// The value of the sample line that starts with `series` (name and labels
/// exactly as exposed).
pub(super) fn metric(text: &str, series: &str) -> Result<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .ok_or_else(|| anyhow!("no {series} in the node agent's metrics"))?
        .trim()
        .parse()
        .map_err(|e| anyhow!("{series}: {e}"))
}
