//! Running sandboxes across node agent restarts and upgrades.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, ensure};

use super::*;
use crate::tools::{condition, eventually, text};

/// The node agent pod is deleted (the DaemonSet makes a new one) while a
/// process in a sandbox pod appends to a file on /workspace: the
/// computers' files are all there afterwards, the sandbox pod is the same
/// pod (its spec names the node-local agent Service), its writer saw no
/// error and lost or repeated no line (the mounter kept the FUSE
/// connection; the new agent resumed it), and its runner reconnected.
/// Measures the longest gap between two of its writes: the pause the
/// restart cost it.
pub(super) fn agent_restart(cx: &mut Context) -> Result<String> {
    let selector = "app.kubernetes.io/name=agentcomputer-node-agent";
    let old = release_pods(cx, selector)?;
    ensure!(!old.is_empty(), "no node agent pod");
    let sandbox_before = text(&cx.computer("box")?, "/status/sandboxPod").to_string();
    ensure!(
        !sandbox_before.is_empty(),
        "computer box has no sandbox pod"
    );
    let uid_before = pod_uid(cx, &sandbox_before)?;
    start_writer(cx, &sandbox_before)?;
    let start = Instant::now();
    replace_pods(cx, selector, "node agent", 180)?;
    cx.time("node agent pod deleted to new pod Ready", start.elapsed());
    let out = eventually(60, "an exec after the restart", || {
        Ok(Some(cx.exec("scratch", "shell", "cat s.txt j.txt")?))
    })?;
    ensure!(
        out == "from-shell\nfrom-js\n",
        "after the restart the files read {out:?}"
    );
    // The sandbox pod that ran across the restart is the same pod (its
    // spec names the node-local agent Service, not the agent pod), and its
    // writer never saw an error: the mounter kept the FUSE connection and
    // the new agent resumed it; requests made meanwhile waited.
    let pause = finish_writer(cx, &sandbox_before, &uid_before)?;
    cx.time(
        "longest gap between a running sandbox's writes across the restart",
        pause,
    );
    // The same pod's shell sees a file the shell runtime wrote after the
    // restart, and its runner reconnected: a container exec reads what the
    // pod wrote before.
    cx.exec("box", "shell", "echo after-restart > after.txt")?;
    let seen = cx.pod_exec(&sandbox_before, "cat /workspace/after.txt")?;
    ensure!(seen == "after-restart\n", "the sandbox pod read {seen:?}");
    let ran = eventually(60, "a container exec after the restart", || {
        match cx.exec("box", "container", "cat p.txt") {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        }
    })??;
    ensure!(
        ran == "from-pod\n",
        "the container read {ran:?} after the restart"
    );
    ensure!(
        pod_uid(cx, &sandbox_before)? == uid_before,
        "the sandbox pod was replaced after the restart"
    );
    Ok(format!(
        "sandbox pod kept; 600 writes across the restart, none lost, longest gap {} ms",
        pause.as_millis()
    ))
}

/// `helm upgrade` with changed values for both DaemonSets while a process
/// in the box's sandbox pod writes to `/workspace`: every node agent pod is
/// replaced, the mounter (updated `OnDelete`) is not, the sandbox pod is
/// kept and its writer sees no error and loses nothing; computers stay
/// Ready and container execs run. Then the mounter is replaced by hand and
/// the agent restarted after it: the writer again sees nothing (the new
/// mounter took the connections back from the agent).
pub(super) fn upgrade_keeps_sandbox(cx: &mut Context) -> Result<String> {
    let agents = "app.kubernetes.io/name=agentcomputer-node-agent";
    let mounters = "app.kubernetes.io/name=agentcomputer-mounter";
    let names = |cx: &Context, selector: &str| -> Result<Vec<String>> {
        Ok(release_pods(cx, selector)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    };
    let pod = text(&cx.computer("box")?, "/status/sandboxPod").to_string();
    ensure!(!pod.is_empty(), "computer box has no sandbox pod");
    let uid = pod_uid(cx, &pod)?;
    let (old_agents, old_mounters) = (names(cx, agents)?, names(cx, mounters)?);
    start_writer(cx, &pod)?;
    let start = Instant::now();
    cx.helm_upgrade(&[
        "--set",
        "nodeAgent.terminationGracePeriodSeconds=31",
        "--set",
        "mounter.logLevel=debug",
    ])?;
    eventually(180, "every node agent pod replaced and Ready", || {
        let now = names(cx, agents)?;
        Ok((!now.is_empty() && now.iter().all(|n| !old_agents.contains(n))).then_some(()))
    })?;
    cx.wait_release_ready()?;
    cx.time(
        "helm upgrade to every node agent replaced and Ready",
        start.elapsed(),
    );
    ensure!(
        names(cx, mounters)? == old_mounters,
        "the upgrade replaced the mounter (updateStrategy OnDelete expected)"
    );
    let upgrade_pause = finish_writer(cx, &pod, &uid)?;
    cx.time(
        "longest gap of a running sandbox's writes across helm upgrade",
        upgrade_pause,
    );
    ensure!(
        condition(&cx.computer("box")?, "Ready") == "True",
        "computer box is not Ready after the upgrade"
    );

    // The mounter replaced by hand (as OnDelete expects), then the agent:
    // the connection must have been given back to the new mounter.
    start_writer(cx, &pod)?;
    replace_pods(cx, mounters, "mounter", 120)?;
    // Time for the new mounter to take the connections back from the agent.
    std::thread::sleep(Duration::from_secs(3));
    replace_pods(cx, agents, "node agent", 120)?;
    let mounter_pause = finish_writer(cx, &pod, &uid)?;
    cx.time(
        "longest gap of a running sandbox's writes, mounter then agent replaced",
        mounter_pause,
    );
    let ran = eventually(60, "a container exec after the upgrade", || {
        match cx.exec("box", "container", "cat p.txt") {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        }
    })??;
    ensure!(ran == "from-pod\n", "the container read {ran:?}");
    Ok(format!(
        "sandbox pod kept; longest write gap {} ms across the upgrade, {} ms across a mounter then agent replacement",
        upgrade_pause.as_millis(),
        mounter_pause.as_millis()
    ))
}

/// The release's pods matching `selector`: name and whether Ready.
pub(super) fn release_pods(cx: &Context, selector: &str) -> Result<Vec<(String, bool)>> {
    let pods = cx
        .tools
        .kubectl_json(&["-n", SYSTEM_NS, "get", "pods", "-l", selector])?;
    Ok(pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                text(p, "/metadata/name").to_string(),
                condition(p, "Ready") == "True",
            )
        })
        .collect())
}

/// Deletes the release's pods matching `selector` (waiting for them to go)
/// and waits up to `secs` until a new one of them is Ready.
pub(super) fn replace_pods(cx: &Context, selector: &str, what: &str, secs: u64) -> Result<()> {
    let old: Vec<String> = release_pods(cx, selector)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "delete",
        "pods",
        "-l",
        selector,
        "--wait=true",
    ])?;
    eventually(secs, &format!("a new {what} pod Ready"), || {
        Ok(release_pods(cx, selector)?
            .iter()
            .any(|(n, ready)| *ready && !old.contains(n))
            .then_some(()))
    })
}

/// Starts, in sandbox pod `pod`, a writer that appends one numbered, timed
/// line to `/workspace/tick.log` every 50 ms for 30 s (600 lines), failures
/// into `/tmp/tick.err` (outside the volume); returns once it has written.
pub(super) fn start_writer(cx: &Context, pod: &str) -> Result<()> {
    // `setsid` detaches the writer from the exec session, so it lives on
    // after `kubectl exec` returns.
    cx.pod_exec(
        pod,
        "rm -f /workspace/tick.log /tmp/tick.err /tmp/tick.done; \
         setsid sh -c 'i=1; while [ $i -le 600 ]; do \
           echo \"$i $(date +%s%N)\" >> /workspace/tick.log || echo \"$i $?\" >> /tmp/tick.err; \
           i=$((i+1)); sleep 0.05; done; touch /tmp/tick.done' >/dev/null 2>&1 < /dev/null &",
    )?;
    eventually(20, "the writer in the sandbox pod to start", || {
        Ok(cx
            .pod_exec(pod, "test -s /workspace/tick.log && echo yes")
            .ok()
            .filter(|o| o.trim() == "yes"))
    })?;
    Ok(())
}

/// Waits for the writer of [`start_writer`] in `pod` to finish, checks that
/// the pod is still the one with uid `uid`, that no write failed and that
/// all 600 lines are there once and in order; returns the longest gap
/// between two writes.
pub(super) fn finish_writer(cx: &Context, pod: &str, uid: &str) -> Result<Duration> {
    eventually(90, "the writer in the sandbox pod to finish", || {
        Ok(cx
            .pod_exec(pod, "test -e /tmp/tick.done && echo yes")
            .ok()
            .filter(|o| o.trim() == "yes"))
    })?;
    ensure!(
        pod_uid(cx, pod)? == uid,
        "the operator replaced the sandbox pod while its writer ran"
    );
    let errors = cx.pod_exec(pod, "cat /tmp/tick.err 2>/dev/null; true")?;
    ensure!(
        errors.trim().is_empty(),
        "writes to /workspace failed while the writer ran: {}",
        errors.trim()
    );
    let log = cx.pod_exec(pod, "cat /workspace/tick.log")?;
    let mut times = Vec::new();
    for (n, line) in log.lines().enumerate() {
        let (i, ns) = line
            .split_once(' ')
            .ok_or_else(|| anyhow!("tick.log line {} is {line:?}", n + 1))?;
        ensure!(
            i == (n + 1).to_string(),
            "tick.log line {} is {line:?}: a write was lost or repeated",
            n + 1
        );
        times.push(ns.parse::<u128>()?);
    }
    ensure!(
        times.len() == 600,
        "tick.log has {} lines, not 600",
        times.len()
    );
    let pause = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(0);
    let pause = Duration::from_nanos(pause as u64);
    Ok(pause)
}

/// The uid of pod `name` of the suite's namespace ("" when it is gone).
pub(super) fn pod_uid(cx: &Context, name: &str) -> Result<String> {
    let out = cx.tools.kubectl(&[
        "-n",
        NS,
        "get",
        "pod",
        name,
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;
    Ok(if out.code == 0 {
        out.stdout.trim().to_string()
    } else {
        String::new()
    })
}
