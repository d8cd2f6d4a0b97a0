//! `status.backup` and the `BackupHealthy` condition of each AgentComputer
//! this node serves, when the agent backs computers up (docs/backup.md):
//! server-side apply on the status subresource under a field manager of
//! their own ([`NODE_AGENT_BACKUP_FIELD_MANAGER`]), at once when the
//! health changes, otherwise at most once per `status_interval` and only
//! when something shown changed. A backup that stops or falls behind also
//! raises a Warning Event on the computer (and a Normal one when it is
//! healthy again).

use std::time::{Duration, Instant, SystemTime};

use agentcomputer_backup::Position;
use agentcomputer_crds::{
    AgentComputer, NODE_AGENT_BACKUP_FIELD_MANAGER, backup_reasons, condition_types,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use tracing::{debug, warn};

use super::Node;
use super::index::Entry;

/// Commits waiting longer than this to be shipped make the backup
/// `BackupFailing` (a healthy shipper ships within a second).
pub const FAILING_LAG: Duration = Duration::from_secs(30);

/// What the status shows of one computer's backup.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupView {
    /// The log's latest position, once known.
    pub position: Option<u64>,
    /// When the latest object went up, once one did.
    pub shipped_at: Option<SystemTime>,
    /// How long the oldest unshipped commit has waited.
    pub lag: Duration,
    /// The `BackupHealthy` condition: status, reason, message.
    pub healthy: bool,
    pub reason: &'static str,
    pub message: String,
}

impl BackupView {
    fn health(&self) -> (bool, &'static str) {
        (self.healthy, self.reason)
    }
}

/// The view of an open computer's backup report `state` at `now`.
/// `previous` (the last view) gives the position and time when the backup
/// stopped, as the report then has neither.
pub fn derive(
    state: &Result<Position, String>,
    previous: Option<&BackupView>,
    now: Instant,
) -> BackupView {
    match state {
        Ok(p) => {
            let lag = p
                .unshipped_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
            let (healthy, reason, message) = if lag >= FAILING_LAG {
                (
                    false,
                    backup_reasons::FAILING,
                    format!(
                        "commits have waited {}s to be shipped to the backup store; {} backup rounds failed since the shipper started (the node agent's log names the errors)",
                        lag.as_secs(),
                        p.failed_rounds
                    ),
                )
            } else {
                (
                    true,
                    backup_reasons::SHIPPING,
                    "every commit is shipped to the backup store as it is made".to_string(),
                )
            };
            BackupView {
                position: Some(p.position),
                shipped_at: p.shipped_at.or(previous.and_then(|v| v.shipped_at)),
                lag,
                healthy,
                reason,
                message,
            }
        }
        Err(why) => BackupView {
            position: previous.and_then(|v| v.position),
            shipped_at: previous.and_then(|v| v.shipped_at),
            lag: Duration::ZERO,
            healthy: false,
            reason: backup_reasons::STOPPED,
            message: format!("the computer is not backed up: {why}"),
        },
    }
}

/// The view of a computer that was open at `previous` and is not any
/// more: shipped whole at its close when the backup was healthy; an
/// unhealthy one stays as it was (`None`) until the computer opens again.
pub fn closed(previous: &BackupView) -> Option<BackupView> {
    previous.healthy.then(|| BackupView {
        lag: Duration::ZERO,
        reason: backup_reasons::SHIPPED_AT_CLOSE,
        message: "hibernated; everything committed was shipped when it closed".to_string(),
        ..previous.clone()
    })
}

/// Whether `next` is to be written, `written` being the last view written
/// and when: a change of health at once; other changes (position, time,
/// lag in whole seconds, message) once `interval` has passed.
pub fn due(
    written: Option<&(BackupView, Instant)>,
    next: &BackupView,
    interval: Duration,
    now: Instant,
) -> bool {
    let Some((w, at)) = written else {
        return true;
    };
    if w.health() != next.health() {
        return true;
    }
    now.saturating_duration_since(*at) >= interval
        && (w.position != next.position
            || w.shipped_at != next.shipped_at
            || w.lag.as_secs() != next.lag.as_secs()
            || w.message != next.message)
}

/// The server-side apply body of `view` for computer `name`, the
/// condition's last transition at `transition`.
pub fn body(name: &str, view: &BackupView, transition: SystemTime) -> serde_json::Value {
    let mut backup = serde_json::Map::new();
    if let Some(p) = view.position {
        backup.insert(
            "position".into(),
            i64::try_from(p).unwrap_or(i64::MAX).into(),
        );
    }
    if let Some(t) = view.shipped_at.and_then(rfc3339) {
        backup.insert("lastShippedTime".into(), t.into());
    }
    // Milliseconds are plenty, and keep the number short.
    let lag = (view.lag.as_secs_f64() * 1000.0).round() / 1000.0;
    backup.insert("lagSeconds".into(), lag.into());
    serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1",
        "kind": "AgentComputer",
        "metadata": {"name": name},
        "status": {
            "backup": backup,
            "conditions": [{
                "type": condition_types::BACKUP_HEALTHY,
                "status": if view.healthy { "True" } else { "False" },
                "reason": view.reason,
                "message": view.message,
                "lastTransitionTime": rfc3339(transition),
            }],
        },
    })
}

/// `t` in RFC 3339, UTC, whole seconds (as metav1.Time is).
fn rfc3339(t: SystemTime) -> Option<String> {
    let stamp = Timestamp::try_from(t).ok()?;
    Some(stamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// One computer's backup reporting state.
#[derive(Default)]
pub struct Reported {
    /// The last view derived (written or not).
    last: Option<BackupView>,
    /// The last view written, and when.
    written: Option<(BackupView, Instant)>,
    /// The condition as the computer has it: (status True, reason, last
    /// transition); read from the object once, then kept here.
    condition: Option<(bool, String, SystemTime)>,
    /// Whether the condition was read from the object.
    read: bool,
}

/// Reports computer `entry`'s backup: `state` is its report when it is
/// open, `None` when it is not.
pub async fn report(
    node: &Node,
    entry: &Entry,
    state: Option<&Result<Position, String>>,
    r: &mut Reported,
    now: Instant,
) {
    let next = match state {
        Some(s) => derive(s, r.last.as_ref(), now),
        None => match r.last.as_ref().and_then(closed) {
            Some(v) => v,
            None => return,
        },
    };
    r.last = Some(next.clone());
    if !due(r.written.as_ref(), &next, node.config.status_interval, now) {
        return;
    }
    let api: Api<AgentComputer> = Api::namespaced(node.client.clone(), &entry.namespace);
    if !r.read {
        // The condition this computer has, so that an agent restart keeps
        // its transition time and raises no second Warning for it.
        match api.get(&entry.name).await {
            Ok(c) => {
                r.condition = c.status.and_then(|s| {
                    s.conditions
                        .into_iter()
                        .find(|c| c.type_ == condition_types::BACKUP_HEALTHY)
                        .map(|c| {
                            (
                                c.status == "True",
                                c.reason,
                                SystemTime::from(c.last_transition_time.0),
                            )
                        })
                });
                r.read = true;
            }
            Err(e) => {
                warn!(computer = %entry.shown(), error = %e, "cannot read the computer's backup condition");
                return;
            }
        }
    }
    let before = r.condition.clone();
    let transition = match &before {
        Some((ok, _, at)) if *ok == next.healthy => *at,
        _ => SystemTime::now(),
    };
    let params = PatchParams::apply(NODE_AGENT_BACKUP_FIELD_MANAGER).force();
    let patch = Patch::Apply(body(&entry.name, &next, transition));
    if let Err(e) = api.patch_status(&entry.name, &params, &patch).await {
        warn!(computer = %entry.shown(), error = %e, "cannot report the backup status");
        return;
    }
    debug!(computer = %entry.shown(), position = ?next.position, lag_ms = next.lag.as_millis() as u64, reason = next.reason, "reported backup status");
    r.written = Some((next.clone(), now));
    r.condition = Some((next.healthy, next.reason.to_string(), transition));
    if let Some(event) = event_of(
        before.as_ref().map(|(ok, why, _)| (*ok, why.as_str())),
        &next,
    ) {
        if event.type_ == EventType::Warning {
            warn!(computer = %entry.shown(), reason = %event.reason, message = %next.message, "backup unhealthy");
        }
        if let Err(e) = node.recorder.publish(&event, &reference(entry)).await {
            warn!(computer = %entry.shown(), error = %e, "could not publish the backup event");
        }
    }
}

/// events.k8s.io/v1 limit of `note`, in bytes.
const NOTE_MAX: usize = 1024;

/// The Event a change of the condition from `before` (status True,
/// reason) to `next` raises: a Warning when the backup becomes unhealthy
/// or unhealthy for another reason, a Normal one when it is healthy again.
pub fn event_of(before: Option<(bool, &str)>, next: &BackupView) -> Option<Event> {
    let (type_, reason) = match (before, next.healthy) {
        (Some((false, why)), false) if why == next.reason => return None,
        (_, false) => (EventType::Warning, next.reason),
        (Some((false, _)), true) => (EventType::Normal, "BackupHealthy"),
        (_, true) => return None,
    };
    let mut end = next.message.len().min(NOTE_MAX);
    while !next.message.is_char_boundary(end) {
        end -= 1;
    }
    Some(Event {
        type_,
        reason: reason.to_string(),
        note: Some(next.message[..end].to_string()),
        action: "Backup".into(),
        secondary: None,
    })
}

/// The computer as an Event's object.
fn reference(entry: &Entry) -> ObjectReference {
    ObjectReference {
        api_version: Some("agentcomputer.dev/v1alpha1".into()),
        kind: Some("AgentComputer".into()),
        name: Some(entry.name.clone()),
        namespace: Some(entry.namespace.clone()),
        uid: Some(entry.uid.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(position: u64) -> Position {
        Position {
            position,
            uploads: position,
            shipped_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)),
            ..Default::default()
        }
    }

    #[test]
    fn a_shipping_backup_is_healthy_with_its_lag() {
        let now = Instant::now();
        let v = derive(&Ok(at(5)), None, now);
        assert_eq!(v.position, Some(5));
        assert!(v.healthy);
        assert_eq!(v.reason, backup_reasons::SHIPPING);
        assert_eq!(v.lag, Duration::ZERO);
        let waiting = Position {
            unshipped_since: Some(now - Duration::from_millis(1500)),
            ..at(5)
        };
        let v = derive(&Ok(waiting), None, now);
        assert_eq!(v.lag, Duration::from_millis(1500));
        assert!(v.healthy, "a short wait is normal");
        let b = body("demo", &v, SystemTime::UNIX_EPOCH);
        assert_eq!(b["status"]["backup"]["position"], 5);
        assert_eq!(b["status"]["backup"]["lagSeconds"], 1.5);
        assert_eq!(
            b["status"]["backup"]["lastShippedTime"],
            "2026-01-01T00:00:00Z"
        );
        let c = &b["status"]["conditions"][0];
        assert_eq!(c["type"], "BackupHealthy");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "Shipping");
        assert_eq!(c["lastTransitionTime"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn a_long_wait_is_failing_and_a_stop_is_stopped() {
        let now = Instant::now();
        let stuck = Position {
            unshipped_since: Some(now - Duration::from_secs(45)),
            failed_rounds: 12,
            ..at(5)
        };
        let v = derive(&Ok(stuck), None, now);
        assert!(!v.healthy);
        assert_eq!(v.reason, backup_reasons::FAILING);
        assert!(v.message.contains("45s"), "{}", v.message);
        assert!(
            v.message.contains("12 backup rounds failed"),
            "{}",
            v.message
        );

        let shipping = derive(&Ok(at(7)), None, now);
        let why = "backup position 8 was written by another shipper; this shipper stopped";
        let v = derive(&Err(why.into()), Some(&shipping), now);
        assert!(!v.healthy);
        assert_eq!(v.reason, backup_reasons::STOPPED);
        assert!(v.message.ends_with(why), "{}", v.message);
        assert_eq!(v.position, Some(7), "the last known position stays");
        assert_eq!(v.shipped_at, shipping.shipped_at);
        assert_eq!(
            body("demo", &v, SystemTime::now())["status"]["conditions"][0]["status"],
            "False"
        );
    }

    #[test]
    fn a_closed_computer_keeps_its_position_without_lag_unless_unhealthy() {
        let now = Instant::now();
        let waiting = Position {
            unshipped_since: Some(now - Duration::from_secs(2)),
            ..at(9)
        };
        let open = derive(&Ok(waiting), None, now);
        let c = closed(&open).unwrap();
        assert_eq!(c.position, Some(9));
        assert_eq!(c.lag, Duration::ZERO);
        assert!(c.healthy);
        assert_eq!(c.reason, backup_reasons::SHIPPED_AT_CLOSE);
        let stopped = derive(&Err("fenced".into()), Some(&open), now);
        assert_eq!(closed(&stopped), None, "a stopped backup stays reported");
    }

    #[test]
    fn writes_are_due_on_health_at_once_and_on_change_per_interval() {
        let now = Instant::now();
        let interval = Duration::from_secs(10);
        let v = derive(&Ok(at(1)), None, now);
        assert!(due(None, &v, interval, now), "the first is due");
        let written = (v.clone(), now);
        assert!(
            !due(Some(&written), &v, interval, now + interval),
            "unchanged"
        );
        let moved = derive(&Ok(at(2)), None, now);
        assert!(!due(
            Some(&written),
            &moved,
            interval,
            now + Duration::from_secs(1)
        ));
        assert!(due(Some(&written), &moved, interval, now + interval));
        let stopped = derive(&Err("fenced".into()), Some(&v), now);
        assert!(
            due(Some(&written), &stopped, interval, now),
            "health: at once"
        );
    }

    #[test]
    fn events_on_becoming_unhealthy_and_on_recovery() {
        let now = Instant::now();
        let ok = derive(&Ok(at(1)), None, now);
        let stopped = derive(&Err("fenced".into()), Some(&ok), now);
        assert!(event_of(None, &ok).is_none());
        assert!(event_of(Some((true, "Shipping")), &ok).is_none());
        let e = event_of(Some((true, "Shipping")), &stopped).unwrap();
        assert_eq!(e.type_, EventType::Warning);
        assert_eq!(e.reason, "BackupStopped");
        assert!(e.note.unwrap().contains("fenced"));
        assert_eq!(event_of(None, &stopped).unwrap().type_, EventType::Warning);
        assert!(
            event_of(Some((false, "BackupStopped")), &stopped).is_none(),
            "no second Warning for the same reason"
        );
        assert_eq!(
            event_of(Some((false, "BackupFailing")), &stopped)
                .unwrap()
                .reason,
            "BackupStopped"
        );
        let back = event_of(Some((false, "BackupStopped")), &ok).unwrap();
        assert_eq!(back.type_, EventType::Normal);
        assert_eq!(back.reason, "BackupHealthy");
        let long = BackupView {
            message: "é".repeat(1000),
            ..stopped
        };
        assert!(event_of(None, &long).unwrap().note.unwrap().len() <= NOTE_MAX);
    }
}
