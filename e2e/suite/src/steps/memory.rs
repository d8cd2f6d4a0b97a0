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

    let (burst, calm_took, _) = burst(cx, false)?;
    let huge = huge_limit_bounded(cx)?;
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

/// Runs [`EXECS`] 600 MiB JavaScript execs of `hungry` at once while
/// `calm` answers an `echo`; checks that every one was bounded or refused
/// (or, when `may_complete`, completed with all 600 MiB) and that calm
/// answered. Returns the burst's and calm's echo's times and how many
/// completed.
fn burst(cx: &Context, may_complete: bool) -> Result<(Duration, Duration, usize)> {
    let ctx = cx;
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
    let mut completed = 0;
    for out in outcomes {
        let out = out?;
        if may_complete && out.code == 0 && out.stdout.trim() == "600" {
            completed += 1;
        } else {
            bounded(&out)?;
        }
    }

    Ok((burst, calm_took, completed))
}

/// `spec.limits.memory: 1Ei` is a valid quantity the CRD admits (below
/// 8Ei) and more than any node agent holds: the agent never reserves more
/// than its exec memory (within its container's limit) and caps one
/// computer at its fair share, so once the spec has been reconciled the
/// same burst ends with each exec bounded, refused or (600 MiB fitting in
/// the budget it was given) completed, `calm` answering, and the caller
/// checks the agent lived. Returns what it saw.
fn huge_limit_bounded(cx: &Context) -> Result<String> {
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
    eventually(60, "hungry's 1Ei limit observed", || {
        let c = cx.computer("hungry")?;
        let observed = c
            .pointer("/status/observedGeneration")
            .and_then(|v| v.as_i64());
        let generation = c.pointer("/metadata/generation").and_then(|v| v.as_i64());
        Ok((observed.is_some() && observed == generation).then_some(()))
    })?;
    // The node agent reads the spec from its own watch of the same object.
    std::thread::sleep(Duration::from_secs(2));
    let (took, calm_took, completed) = burst(cx, true)?;
    Ok(format!(
        "the same burst ended in {} ms ({completed} of {EXECS} completed within their budgets), \
         calm's echo {} ms",
        took.as_millis(),
        calm_took.as_millis()
    ))
}
