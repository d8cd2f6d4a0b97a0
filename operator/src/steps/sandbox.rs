//! The sandbox step: creates, keeps, replaces or removes the computer's
//! sandbox Pod (`NAME-sandbox`) when `runtimes.container` is on and the
//! sandbox is not idle. A live pod keeps the runner image it carries (a
//! new product version takes effect with the next pod, see
//! [`pod::keep_runner`]) unless the node agent refuses that runner.

use std::time::Duration;

use agentcomputer_crds::{AgentComputer, condition_types as ct, labels, sandbox_reasons};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;

use crate::conditions;
use crate::context::{Config, Context};
use crate::error::{Error, Result};
use crate::placement::{self, Agent};
use crate::resources::{self, pod};
use crate::writes::{apply_obj, delete_ignoring_absent};

/// How often a sandbox pod refused by the API server is tried again.
pub const SANDBOX_REJECTED_RETRY: Duration = Duration::from_secs(30);
/// Reason of `SandboxReady=False` (and of the Warning event) when the API
/// server refuses the sandbox pod (HTTP 403 or 400, e.g. an exceeded
/// ResourceQuota or an admission webhook).
pub const SANDBOX_REJECTED: &str = sandbox_reasons::REJECTED;
/// How soon a pod being replaced is looked at again.
const REPLACE_RETRY: Duration = Duration::from_secs(2);

/// Runs the sandbox step for `c` in namespace `ns`, served by `agent`:
/// where the sandbox's runner and proxy settings point is the node-local
/// agent Service when one is configured (stable across agent pods), else
/// the agent pod's IP. Returns the sandbox's state (None when the container
/// runtime is off) and the time until the next look (an idle timeout
/// running, or a pod being replaced). Errors: the API server's refusal of
/// a read, delete or apply other than those reported in the state.
pub async fn run(
    ctx: &Context,
    c: &AgentComputer,
    ns: &str,
    agent: Option<&Agent>,
    credential_hash: Option<&str>,
    pin_to: Option<&str>,
    now: Timestamp,
) -> Result<(Option<SandboxState>, Option<Duration>)> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let agent_address = match ctx.agent_service_ip().await? {
        Some(ip) => Some(ip),
        None => agent.and_then(|a| a.ip.clone()),
    };
    let site = Site {
        agent_address: agent_address.as_deref(),
        pin_to,
    };
    let (mut st, idle) = reconcile_sandbox(
        c,
        &pods,
        &resources::pod_name(c),
        site,
        &ctx.config,
        credential_hash,
        now,
    )
    .await?;
    if let Some(st) = st.as_mut() {
        let computers: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
        keep_lost_reason(&computers, c, st).await?;
    }
    Ok((st, idle))
}

/// A starting sandbox pod that replaces one whose workspace mount was lost
/// keeps reason [`sandbox_reasons::WORKSPACE_LOST`] until it is ready. The
/// memory is the computer's own `SandboxReady` condition, read from the API
/// server when the cached object lacks it: the reconcile right after the
/// deletion may run on a cached object that does not have that status yet.
async fn keep_lost_reason(
    api: &Api<AgentComputer>,
    c: &AgentComputer,
    st: &mut SandboxState,
) -> Result<()> {
    if st.ready || st.reason != sandbox_reasons::STARTING {
        return Ok(());
    }
    let was_lost = |c: &AgentComputer| {
        c.status.as_ref().is_some_and(|s| {
            conditions::has_reason(
                &s.conditions,
                ct::SANDBOX_READY,
                sandbox_reasons::WORKSPACE_LOST,
            )
        })
    };
    if !was_lost(c) && !was_lost(&api.get(&c.name_any()).await?) {
        return Ok(());
    }
    st.reason = sandbox_reasons::WORKSPACE_LOST.into();
    st.message = format!(
        "{}; it replaces a pod whose workspace mount was lost",
        st.message
    );
    Ok(())
}

/// What the sandbox step found: the `SandboxReady` condition and whether a
/// pod is there (`status.sandboxPod`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxState {
    /// The pod is running and ready.
    pub ready: bool,
    /// A pod exists (it was not deleted or refused).
    pub running: bool,
    /// One of [`sandbox_reasons`], or the kubelet's reason for a pod that
    /// cannot run.
    pub reason: String,
    /// The message of `SandboxReady`.
    pub message: String,
}

/// Creates, keeps, replaces or removes the sandbox pod `name`; `config`
/// gives the runner image and the agents' TLS trust. Returns its state
/// (None when the container runtime is off) and, when an idle timeout is
/// running, the time until it fires.
/// Where a sandbox pod runs and whom it dials.
#[derive(Clone, Copy)]
struct Site<'a> {
    /// The node agent's address (its Service or pod IP).
    agent_address: Option<&'a str>,
    /// The `kubernetes.io/hostname` the pod is pinned to, if its volume
    /// does not pin it.
    pin_to: Option<&'a str>,
}

async fn reconcile_sandbox(
    c: &AgentComputer,
    pods: &Api<Pod>,
    name: &str,
    site: Site<'_>,
    config: &Config,
    credential_hash: Option<&str>,
    now: Timestamp,
) -> Result<(Option<SandboxState>, Option<Duration>)> {
    let Site {
        agent_address,
        pin_to,
    } = site;
    let Some(sandbox) = c
        .spec
        .sandbox
        .as_ref()
        .filter(|_| c.spec.runtimes.container)
    else {
        delete_ignoring_absent(pods, name).await?;
        return Ok((None, None));
    };
    let idle_left = idle_remaining(c, sandbox.idle_timeout_seconds, now);
    if idle_left == Some(Duration::ZERO) {
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::IDLE.into(),
            message: format!(
                "stopped after {}s without activity",
                sandbox.idle_timeout_seconds
            ),
        };
        return Ok((Some(st), None));
    }
    let mut desired = pod::build(
        c,
        sandbox,
        agent_address,
        credential_hash,
        config.runner_image.as_deref().map(|image| pod::Runner {
            image,
            credential_hash,
            tls: config.agent_tls.as_ref(),
        }),
        pin_to,
    );
    // A new product version (runner image) alone never replaces or
    // restarts a live sandbox: the pod keeps the runner it runs, and the
    // newer one comes with the next pod (pod::keep_runner).
    let mut pending_runner = None;
    let existing = pods.get_opt(name).await?;
    // A pod whose workspace mount ended for good (its node agent did not
    // come back in time) cannot get it back in place: its containers bind
    // the dead mount. Replace it.
    if let Some(why) = existing.as_ref().and_then(pod::workspace_lost) {
        tracing::warn!(
            pod = name,
            why,
            "the sandbox's workspace mount is lost; replacing the pod"
        );
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::WORKSPACE_LOST.into(),
            message: format!("pod {name}: {why}; the pod is being replaced"),
        };
        return Ok((Some(st), Some(REPLACE_RETRY)));
    }
    if let Some(existing) = existing
        && let Some(newer) = pod::keep_runner(&mut desired, &existing)
    {
        // Unless the node agent refuses the runner the pod carries: no
        // exec can reach that pod (its runner is not attached, and the
        // runs of its last stream were killed when the stream ended),
        // so it is idle, and only a pod with the newer runner serves.
        if let Some(why) = pod::runner_refused(&existing) {
            let kept = pod::runner_image(&existing).unwrap_or_default();
            tracing::info!(
                pod = name,
                kept,
                newer,
                why,
                "the node agent refuses the sandbox's runner; replacing the pod"
            );
            delete_ignoring_absent(pods, name).await?;
            let st = SandboxState {
                ready: false,
                running: false,
                reason: sandbox_reasons::REPLACING.into(),
                message: format!(
                    "the node agent refuses the runner of pod {name} ({kept}: {why}); \
                         the pod is being replaced with runner {newer}"
                ),
            };
            return Ok((Some(st), Some(REPLACE_RETRY)));
        }
        pending_runner = Some(newer);
    }
    let applied = match apply_obj(pods, name, &desired).await {
        Ok(p) => p,
        // Most of a pod's spec is immutable: replace the pod when it changed.
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 422 => {
            tracing::info!(pod = name, "sandbox spec changed; replacing the pod");
            delete_ignoring_absent(pods, name).await?;
            let st = SandboxState {
                ready: false,
                running: false,
                reason: sandbox_reasons::REPLACING.into(),
                message: "sandbox spec changed; the pod is being replaced".into(),
            };
            return Ok((Some(st), Some(REPLACE_RETRY)));
        }
        // Admission refused the pod (quota, Pod Security, a webhook, a
        // missing service account): report it on the computer rather than
        // fail the whole reconcile, so the volume, endpoint and in-process
        // runtimes stay usable and the user sees why there is no sandbox.
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 403 || s.code == 400 => {
            let st = SandboxState {
                ready: false,
                running: false,
                reason: SANDBOX_REJECTED.into(),
                message: format!("the API server refused pod {name}: {}", s.message),
            };
            return Ok((Some(st), Some(SANDBOX_REJECTED_RETRY)));
        }
        Err(e) => return Err(e),
    };
    let ready = placement::pod_ready(&applied);
    let phase = applied
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    // A pod that ended (evicted, or its runner gone for good) never runs
    // again under restartPolicy Always: replace it.
    if matches!(phase.as_str(), "Failed" | "Succeeded") {
        let why = applied
            .status
            .as_ref()
            .and_then(|s| s.message.clone().or_else(|| s.reason.clone()))
            .unwrap_or_default();
        tracing::info!(pod = name, phase, why, "sandbox pod ended; replacing it");
        delete_ignoring_absent(pods, name).await?;
        let st = SandboxState {
            ready: false,
            running: false,
            reason: sandbox_reasons::ENDED.into(),
            message: format!("pod {name} ended ({phase}: {why}); it is being replaced"),
        };
        return Ok((Some(st), Some(REPLACE_RETRY)));
    }
    let (reason, mut message) = if ready {
        (
            sandbox_reasons::RUNNING.to_string(),
            format!("pod {name} is {phase}"),
        )
    } else if let Some(why) = pod::runner_refused(&applied) {
        (
            sandbox_reasons::RUNNER_INCOMPATIBLE.to_string(),
            format!(
                "the node agent refuses the runner of pod {name} ({}): {why}; the kubelet \
                 restarts it until a node agent that serves it runs on the node",
                pod::runner_image(&applied).unwrap_or_default()
            ),
        )
    } else if let Some(trouble) = placement::pod_trouble(&applied) {
        (trouble.reason, format!("pod {name}: {}", trouble.message))
    } else {
        (
            sandbox_reasons::STARTING.to_string(),
            format!("pod {name} is {phase}"),
        )
    };
    if let (Some(newer), Some(kept)) = (&pending_runner, pod::runner_image(&applied)) {
        message.push_str(&format!(
            "; runner {kept} kept, {newer} pending until the pod is next created"
        ));
    }
    let st = SandboxState {
        ready,
        running: true,
        reason,
        message,
    };
    Ok((Some(st), idle_left))
}

/// Time left before the sandbox counts as idle: None without a timeout or
/// without recorded activity, zero once expired.
fn idle_remaining(c: &AgentComputer, timeout_secs: i64, now: Timestamp) -> Option<Duration> {
    if timeout_secs <= 0 {
        return None;
    }
    let last: Timestamp = c.annotations().get(labels::LAST_ACTIVITY)?.parse().ok()?;
    let idle = now.duration_since(last).as_secs().max(0) as u64;
    Some(Duration::from_secs(
        (timeout_secs as u64).saturating_sub(idle),
    ))
}
