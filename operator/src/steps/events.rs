//! The events step: publishes the transitions [`crate::status::derive`]
//! found as events.k8s.io Events on the computer.

use agentcomputer_crds::AgentComputer;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::status::Transition;

/// events.k8s.io/v1 limit of `reason`, in bytes.
const REASON_MAX: usize = 128;
/// events.k8s.io/v1 limit of `note`, in bytes.
const NOTE_MAX: usize = 1024;

/// Publishes each transition, in order. A Warning is also logged. Best
/// effort: an Event the API server refuses is logged, never an error of
/// the reconcile.
pub async fn publish_all(ctx: &Context, c: &AgentComputer, transitions: &[Transition]) {
    for t in transitions {
        if t.type_ == EventType::Warning {
            tracing::warn!(
                computer = %c.name_any(),
                namespace = ?c.namespace(),
                reason = %t.reason,
                message = %t.note,
                "warning event"
            );
        }
        publish(ctx, c, t.type_, &t.reason, t.note.clone()).await;
    }
}

/// Publishes one Event on `c` with action `Reconcile`; `reason` is cut to
/// 128 bytes and `note` to 1 KiB (on character boundaries). Best effort, as
/// [`publish_all`].
pub async fn publish(
    ctx: &Context,
    c: &AgentComputer,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = KubeEvent {
        type_,
        reason: truncate(reason, REASON_MAX),
        note: Some(truncate(&note, NOTE_MAX)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &c.object_ref(&())).await {
        tracing::warn!(computer = %c.name_any(), error = %e, "could not publish event");
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("abc", 128), "abc");
        assert_eq!(truncate("abcdef", 4), "abcd");
        // "é" is two bytes: a cut inside it drops it whole.
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate(&"x".repeat(2000), NOTE_MAX).len(), NOTE_MAX);
    }
}
