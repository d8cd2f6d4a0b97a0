//! An exec's wait for its computer's sandbox pod: the `last-activity`
//! annotation written at once (it makes the operator start a pod stopped
//! when idle) and renewed every [`RENEW`], the `SandboxReady` condition
//! followed and told to the caller step by step, until the runner attaches
//! or a reason the pod cannot run, [`ATTACH_GRACE`] or [`START_TIMEOUT`]
//! ends the wait.

use std::time::{Duration, Instant};

use agentcomputer_crds::{AgentComputer, sandbox_reasons};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Sandboxes;
use crate::cluster::index::Entry;
use crate::cluster::keys::FIELD_MANAGER;

/// Longest wait of an exec for its computer's sandbox pod to start and its
/// runner to attach (an image pull included).
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a waiting exec looks at its computer's `SandboxReady`
/// condition in the watch-fed index (an attach wakes it at once).
const START_POLL: Duration = Duration::from_millis(500);
/// How often the `last-activity` annotation of a computer is rewritten
/// while execs wait for its pod or run in it (at most once per computer,
/// however many execs), so that an idle timeout longer than this never
/// stops a pod in use.
pub(super) const RENEW: Duration = Duration::from_secs(10);
/// How long a pod may report Ready without its runner attaching before a
/// waiting exec gives up: the runner cannot reach or is refused by this
/// agent (TLS trust, NetworkPolicy, no runner image).
pub(super) const ATTACH_GRACE: Duration = Duration::from_secs(30);

/// What a computer's resource says about its sandbox.
enum View {
    /// `spec.sandbox` is unset or `spec.runtimes.container` is off: the
    /// operator makes no pod.
    NotConfigured,
    /// The `SandboxReady` condition; None before the operator wrote one.
    Condition(Option<Sandbox>),
}

/// The `SandboxReady` condition as the operator last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sandbox {
    ready: bool,
    reason: String,
    message: String,
}

impl Sandbox {
    /// Whether the pod cannot run: not ready for a reason other than a
    /// normal start or an idle stop (the kubelet's or the API server's).
    fn failing(&self) -> bool {
        !self.ready && !sandbox_reasons::is_progress(&self.reason)
    }

    fn cannot_start(&self, entry: &Entry) -> String {
        format!(
            "container: the sandbox pod of {} cannot run: {}: {}",
            entry.shown(),
            self.reason,
            self.message
        )
    }
}

fn no_sandbox(entry: &Entry) -> String {
    format!(
        "computer {} has no sandbox pod: set spec.sandbox.image and spec.runtimes.container: true",
        entry.shown()
    )
}

impl Sandboxes {
    /// Why an exec on computer `key` cannot wait for its runner: None when
    /// a runner is attached or one may come (the exec then waits in
    /// [`Sandboxes::wait_for_runner`]); the reason when the computer has no
    /// sandbox or its pod cannot run.
    pub(super) async fn why_not_ready(&self, key: &str) -> Option<String> {
        if self.runner(key).is_some() {
            return None;
        }
        let Some(entry) = self.index.get(key) else {
            return Some(self.not_connected(key));
        };
        match self.view(&entry).await {
            Ok(View::NotConfigured) => Some(no_sandbox(&entry)),
            Ok(View::Condition(Some(c))) if c.failing() => Some(c.cannot_start(&entry)),
            // Starting, idle, unknown yet, or unreadable now: wait for it.
            Ok(View::Condition(_)) | Err(_) => None,
        }
    }

    /// Waits until a runner of computer `key` attaches, sending each step
    /// to `progress`. Errors: the message for the exec's client when the
    /// computer has no sandbox, its pod cannot run, its runner does not
    /// attach within [`ATTACH_GRACE`] of the pod being Ready or within
    /// [`START_TIMEOUT`], or `cancel` fires.
    pub(super) async fn wait_for_runner(
        &self,
        key: &str,
        progress: mpsc::Sender<String>,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        if self.runner(key).is_some() {
            return Ok(());
        }
        let Some(entry) = self.index.get(key) else {
            return Err(self.not_connected(key));
        };
        let began = Instant::now();
        let pod = format!("{}-sandbox", entry.name);
        // Use of the computer is what starts a stopped sandbox pod.
        self.activity.record(key);
        let mut shown: Option<Sandbox> = None;
        let mut first = true;
        let mut ready_since: Option<Instant> = None;
        loop {
            self.renew(&entry);
            let attached = self.attach_seen.notified();
            tokio::pin!(attached);
            attached.as_mut().enable();
            if self.runner(key).is_some() {
                if !first {
                    let _ = progress
                        .send(format!(
                            "container: sandbox pod {pod} attached after {:.1}s",
                            began.elapsed().as_secs_f64()
                        ))
                        .await;
                }
                return Ok(());
            }
            match self.view(&entry).await {
                Ok(View::NotConfigured) => return Err(no_sandbox(&entry)),
                Ok(View::Condition(Some(c))) if c.failing() => {
                    return Err(c.cannot_start(&entry));
                }
                Ok(View::Condition(now)) => {
                    let ready = now.as_ref().is_some_and(|c| c.ready);
                    let since = *ready_since.get_or_insert_with(Instant::now);
                    if !ready {
                        ready_since = None;
                    } else if since.elapsed() >= ATTACH_GRACE {
                        return Err(format!(
                            "container: sandbox pod {pod} is running but its runner has not attached to this node agent for {}s; see kubectl logs {pod} -n {} (TLS trust, NetworkPolicy or the operator's --runner-image)",
                            ATTACH_GRACE.as_secs(),
                            entry.namespace
                        ));
                    }
                    if first || now != shown {
                        let line = match &now {
                            Some(c) if c.reason == sandbox_reasons::IDLE => format!(
                                "container: sandbox pod {pod} was stopped when idle; starting it (up to {}s)",
                                START_TIMEOUT.as_secs()
                            ),
                            Some(c) => format!(
                                "container: waiting for sandbox pod {pod}: {}: {}",
                                c.reason, c.message
                            ),
                            None => format!(
                                "container: waiting for sandbox pod {pod} (not reported by the operator yet)"
                            ),
                        };
                        let _ = progress.send(line).await;
                        shown = now;
                    }
                }
                Err(e) => return Err(format!("container: {e}")),
            }
            first = false;
            let left = START_TIMEOUT.saturating_sub(began.elapsed());
            if left.is_zero() {
                let last = shown
                    .map(|c| format!(" (last: {}: {})", c.reason, c.message))
                    .unwrap_or_default();
                return Err(format!(
                    "container: sandbox pod {pod} did not attach within {}s{last}; see kubectl describe pod {pod} -n {}",
                    START_TIMEOUT.as_secs(),
                    entry.namespace
                ));
            }
            tokio::select! {
                () = &mut attached => {}
                () = cancel.cancelled() => {
                    return Err("container: the wait for the sandbox pod was cancelled".into());
                }
                () = tokio::time::sleep(START_POLL.min(left)) => {}
            }
        }
    }

    /// Computer `entry`'s sandbox settings and condition, as the
    /// AgentComputer watch last saw them (no call to the API server).
    /// Errors: the computer left this node.
    async fn view(&self, entry: &Entry) -> Result<View, String> {
        let now = self
            .index
            .get(&entry.uid)
            .ok_or_else(|| format!("computer {} is no longer on this node", entry.shown()))?;
        if !now.sandbox.configured {
            return Ok(View::NotConfigured);
        }
        Ok(View::Condition(now.sandbox.condition.map(
            |(ready, reason, message)| Sandbox {
                ready,
                reason,
                message,
            },
        )))
    }

    /// Writes `agentcomputer.dev/last-activity` = now on `entry` in the
    /// background, unless this agent wrote it less than [`RENEW`] ago (the
    /// status reporter's pace is too slow for a pod in use).
    pub(super) fn renew(&self, entry: &Entry) {
        {
            let mut touched = self.touched.lock();
            touched.retain(|_, at| at.elapsed() < RENEW);
            if touched.contains_key(&entry.uid) {
                return;
            }
            touched.insert(entry.uid.clone(), Instant::now());
        }
        let api: Api<AgentComputer> = Api::namespaced(self.client.clone(), &entry.namespace);
        let (name, shown) = (entry.name.clone(), entry.shown());
        tokio::spawn(async move {
            let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let patch = serde_json::json!({"metadata": {"annotations": {
                agentcomputer_crds::labels::LAST_ACTIVITY: now}}});
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            if let Err(e) = api.patch(&name, &params, &Patch::Merge(patch)).await {
                warn!(computer = %shown, error = %e, "cannot record activity for the sandbox pod");
            }
        });
    }
}
