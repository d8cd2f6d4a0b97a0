//! The node agent's API port against one sandbox pod that floods it: the
//! chart's NetworkPolicy admits every sandbox to the agent's port 7433, so
//! a tenant's container run can open connections to it without any
//! credential. The agent keeps at most a few unauthenticated connections
//! per source address (a pod's address is its identity here) and closes
//! the rest, so the run holds almost none of the agent's descriptors while
//! another computer's calls keep their latency and the agent lives.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};

use super::Context;
use super::lifecycle::{agent_pod_on, restarts};
use crate::tools::text;

/// Connections the container run opens.
const OPENED: usize = 300;

/// The most sockets the flood may add to the node agents' descriptors:
/// the default cap of unauthenticated connections per source address (8,
/// `--api-unauthenticated-per-source`), with room for the agents' own
/// traffic meanwhile.
const HELD_AT_MOST: usize = 24;

/// Opens `OPENED` TCP connections to the agent's API port from the sandbox,
/// holds them 6 s, and prints how many were opened and how many were still
/// open from the sandbox's side after 3 s (a closed one reads EOF or a
/// reset; an open one would block; connections the kernel completed but
/// the agent has not accepted yet count as open here, so this is only
/// reported: the bound is checked on the agents' descriptors).
const FLOOD: &str = r#"python3 - "$AGENT" <<'PY'
import socket, sys, time
agent = sys.argv[1]
socks = []
for _ in range(OPENED):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((agent, 7433))
    except OSError:
        continue
    socks.append(s)
time.sleep(3)
held = 0
for s in socks:
    s.setblocking(False)
    try:
        if s.recv(1) != b"":
            held += 1
    except BlockingIOError:
        held += 1
    except OSError:
        pass
print(len(socks), held)
sys.stdout.flush()
time.sleep(3)
PY"#;

/// Sockets held by the node agent processes of the cluster's nodes (they
/// run on this machine): the descriptors of theirs that are sockets.
fn agent_sockets() -> Result<usize> {
    let mut sockets = 0;
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let pid = entry.path();
        let comm = std::fs::read_to_string(pid.join("comm")).unwrap_or_default();
        let cmdline = std::fs::read(pid.join("cmdline")).unwrap_or_default();
        if comm.trim() != "node-agent" || !cmdline.windows(7).any(|w| w == b"cluster") {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(pid.join("fd")) else {
            continue;
        };
        sockets += fds
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count();
    }
    Ok(sockets)
}

/// The node agent pod serving `node`: its address, uid and restart count.
fn agent_pod(cx: &Context, node: &str) -> Result<(String, String, i64)> {
    let pod = agent_pod_on(cx, node)?;
    Ok((
        text(&pod, "/status/podIP").to_string(),
        text(&pod, "/metadata/uid").to_string(),
        restarts(&pod),
    ))
}

/// A container run of computer `box` opens 300 connections to its node
/// agent's API port; the agents' processes never hold more than a few of
/// them (their socket descriptors, counted from this machine),
/// another computer's `echo ok` answered meanwhile within 5 s, and the
/// agent is the same pod with the same restart count.
pub fn one_sandbox_cannot_hold_the_agents_port(cx: &mut Context) -> Result<String> {
    let node = text(&cx.computer("box")?, "/status/node").to_string();
    ensure!(!node.is_empty(), "computer box has no node in its status");
    let (agent_ip, pod_before, restarts_before) = agent_pod(cx, &node)?;
    ensure!(!agent_ip.is_empty(), "the node agent pod has no address");
    let script = format!(
        "AGENT={agent_ip}\n{}",
        FLOOD.replace("OPENED", &OPENED.to_string())
    );
    let before = agent_sockets()?;
    ensure!(before > 0, "no node agent process found on this machine");
    let ctx: &Context = cx;
    let (flood, other, during) = std::thread::scope(|scope| {
        let flood = scope.spawn(|| ctx.exec("box", "container", &script));
        let other = scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(2));
            let t = Instant::now();
            ctx.exec("scratch", "shell", "echo ok")
                .map(|o| (o, t.elapsed()))
        });
        // While the flood holds its connections (it opens them within a
        // second or two and holds them 6 s): the most the agents held.
        let during = scope.spawn(|| {
            let mut most = 0;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(6) {
                std::thread::sleep(Duration::from_millis(500));
                most = most.max(agent_sockets().unwrap_or(0));
            }
            most
        });
        (
            flood.join().expect("flood thread"),
            other.join().expect("other thread"),
            during.join().expect("sampling thread"),
        )
    });
    let added = during.saturating_sub(before);
    let flood = flood.context("the flood from box's sandbox")?;
    let (opened, held) = flood
        .split_once(' ')
        .and_then(|(o, h)| {
            Some((
                o.trim().parse::<usize>().ok()?,
                h.trim().parse::<usize>().ok()?,
            ))
        })
        .with_context(|| format!("the flood printed {flood:?}"))?;
    let (other_out, other_took) = other.context("scratch's echo during the flood")?;
    ensure!(
        other_out == "ok\n",
        "scratch answered {other_out:?} during the flood"
    );
    ensure!(
        opened >= OPENED / 2,
        "the sandbox opened only {opened} of {OPENED} connections: the flood did not happen"
    );
    ensure!(
        added <= HELD_AT_MOST,
        "the node agents held up to {added} more sockets while one sandbox opened {opened} \
         idle connections (from the sandbox's side {held} were still open after 3 s)"
    );
    ensure!(
        other_took < Duration::from_secs(5),
        "another computer's echo took {other_took:?} during the flood"
    );
    let (_, pod_after, restarts_after) = agent_pod(cx, &node)?;
    ensure!(
        (pod_after.as_str(), restarts_after) == (pod_before.as_str(), restarts_before),
        "the node agent was replaced or restarted during the flood"
    );
    Ok(format!(
        "{opened} connections from one sandbox: the agents held at most {added} more \
         sockets ({held} still open from the sandbox's side after 3 s); another computer's \
         echo took {:.0} ms meanwhile",
        other_took.as_secs_f64() * 1e3
    ))
}
