//! The node agent's memory under JavaScript that asks for more than an
//! exec may hold: three execs of one computer, each filling 600 MiB, at
//! once. Each exec's heap is bounded by its memory budget (256 MiB at
//! most, docs/isolation.md) and the agent admits budgets against its own
//! container's limit, so every one of them ends refused or bounded (a
//! memory message, or an admission refusal) while the agent lives: its pod and
//! restart count unchanged, another computer's `echo ok` answering during
//! and after the burst.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use serde_json::json;

use super::lifecycle::{agent_pod_on, restarts};
use super::{Context, NS};
use crate::tools::{Output, eventually, text};

/// Execs started at once.
const EXECS: usize = 3;

/// Allocates 600 MiB in 1 MiB typed arrays, each touched (filled) so that
/// the pages are really used; returns the MiB it got.
const FILL_600_MIB: &str = "export default () => { const held = []; \
    for (let i = 0; i < 600; i++) held.push(new Uint8Array(1 << 20).fill(i & 255)); \
    return held.length; }";

/// The node agent pod serving `node`: its uid and its containers' restart
/// count.
fn agent_on(cx: &Context, node: &str) -> Result<(String, i64)> {
    let pod = agent_pod_on(cx, node)?;
    Ok((text(&pod, "/metadata/uid").to_string(), restarts(&pod)))
}

/// Checks that one 600 MiB exec was stopped by its memory budget or
/// refused admission, with the agent's message: 600 MiB is past the
/// largest budget an exec can have (256 MiB), so completing would mean the
/// bound did not hold.
fn bounded(out: &Output) -> Result<()> {
    ensure!(
        out.code != 0,
        "a 600 MiB JavaScript exec completed: {:?}",
        out.stdout.trim()
    );
    let said = format!("{}{}", out.stderr, out.stdout).to_lowercase();
    ensure!(
        [
            "memory",
            "resource_exhausted",
            "resourceexhausted",
            "resource exhausted"
        ]
        .iter()
        .any(|w| said.contains(w)),
        "a 600 MiB exec failed without a memory or admission message: exit {}, {:?}",
        out.code,
        said.trim()
    );
    Ok(())
}

/// Three 600 MiB JavaScript execs of one computer at once are bounded or
/// refused, the node agent keeps running (same pod, same restart count)
/// and another computer's shell answers during and after them.
pub fn js_memory_burst(cx: &mut Context) -> Result<String> {
    for name in ["hungry", "calm"] {
        cx.apply_computer(name, json!({"storage": {"size": "64Mi"}}))?;
    }
    cx.wait_ready("hungry", 180)?;
    cx.wait_ready("calm", 180)?;
    let node = text(&cx.computer("hungry")?, "/status/node").to_string();
    ensure!(
        !node.is_empty(),
        "computer hungry has no node in its status"
    );
    let (pod_before, restarts_before) = agent_on(cx, &node)?;
    ensure!(
        cx.exec("calm", "shell", "echo ok")? == "ok\n",
        "calm did not answer before the burst"
    );

    let ctx: &Context = cx;
    let start = Instant::now();
    let (outcomes, calm_during) = std::thread::scope(|scope| {
        let hungry: Vec<_> = (0..EXECS)
            .map(|_| scope.spawn(|| ctx.exec_output("hungry", "javascript", FILL_600_MIB)))
            .collect();
        // While they run: the other computer answers.
        let calm = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            let t = Instant::now();
            ctx.exec("calm", "shell", "echo ok")
                .map(|o| (o, t.elapsed()))
        });
        let outcomes: Vec<Result<Output>> = hungry
            .into_iter()
            .map(|h| h.join().expect("exec thread"))
            .collect();
        (outcomes, calm.join().expect("calm thread"))
    });
    let burst = start.elapsed();
    let (calm_out, calm_took) = calm_during.context("calm's echo during the burst")?;
    ensure!(
        calm_out == "ok\n",
        "calm answered {calm_out:?} during the burst"
    );
    for out in outcomes {
        bounded(&out?)?;
    }

    // The agent lived through it: the same pod, no restart, still serving.
    let (pod_after, restarts_after) = agent_on(cx, &node)?;
    ensure!(
        pod_after == pod_before,
        "the node agent pod was replaced during the burst ({pod_before} -> {pod_after})"
    );
    ensure!(
        restarts_after == restarts_before,
        "the node agent restarted during the burst ({restarts_before} -> {restarts_after} restarts)"
    );
    let after = eventually(30, "calm's echo after the burst", || {
        cx.exec("calm", "shell", "echo ok").map(Some)
    })?;
    ensure!(after == "ok\n", "calm answered {after:?} after the burst");
    let again = cx.exec("hungry", "shell", "echo ok")?;
    ensure!(again == "ok\n", "hungry answered {again:?} after the burst");
    let huge = huge_budget_refused(cx)?;
    for name in ["hungry", "calm"] {
        cx.tools
            .kubectl_ok(&["-n", NS, "delete", "agentcomputer", name, "--wait=false"])?;
    }
    cx.time(format!("{EXECS} x 600 MiB JavaScript execs at once"), burst);
    Ok(format!(
        "{EXECS} bounded or refused; agent kept ({restarts_after} restarts); \
         another computer's echo took {} ms during the burst; limits.memory 1Ei: {huge}",
        calm_took.as_millis()
    ))
}

/// `spec.limits.memory: 1Ei` is a valid quantity the CRD admits (below
/// 8Ei), and more than any node agent may reserve: once the agent has it,
/// every exec of that computer is refused naming both budgets, and the
/// other computer still answers. Returns the refusal.
fn huge_budget_refused(cx: &Context) -> Result<String> {
    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "patch",
        "agentcomputer",
        "hungry",
        "--type=merge",
        "-p",
        r#"{"spec":{"limits":{"memory":"1Ei"}}}"#,
    ])?;
    let refusal = eventually(60, "an exec refused for its 1Ei memory budget", || {
        let out = cx.exec_output("hungry", "shell", "echo ok")?;
        let said = format!("{}{}", out.stderr, out.stdout);
        Ok(
            (out.code != 0 && said.contains("more than all execs may reserve together"))
                .then(|| said.trim().to_string()),
        )
    })?;
    ensure!(
        cx.exec("calm", "shell", "echo ok")? == "ok\n",
        "calm did not answer after hungry's 1Ei budget"
    );
    Ok(refusal)
}
