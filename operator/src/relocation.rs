//! When and where a computer moves: a pure function of what one reconcile
//! observed ([`decide`]); the step that acts on it is
//! [`crate::steps::relocation`]. docs/moves.md tells the whole protocol.
//!
//! A move starts when the computer's node is cordoned, when someone asks
//! (annotation [`MOVE_REQUEST`]), or when the node is lost: its Node object
//! is gone, or its node agent has not been ready for `failover_after`
//! (at once with annotation [`FAILOVER`] `now`). Moves need the node
//! agents' backup store (the data follows through it); without one a
//! cordoned or lost node keeps its computers and the `Moving` condition
//! says why.
//!
//! A move of a live source runs in two phases: `Preparing` (the target
//! restores in the background while the source serves; it says so on the
//! writer Lease, [`PREPARED_ON`]) and `HandingOver` (the source holds new
//! calls, closes the computer, ships its last changes and gives its Lease
//! up, saying so on the Lease, `HANDED_OVER_TO`). Then the target is made
//! the computer's node. A lost source skips both: the target restores from
//! the store's latest position once the source's Lease has expired.

use std::time::Duration;

use agentcomputer_crds::moves::{
    FAILOVER, MOVE_REQUEST, MovePhase, MoveReason, MoveRecord, MoveStatus, PREPARED_ON,
};
use agentcomputer_crds::{AgentComputer, AgentComputerStatus, condition_types as ct};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::status::{NODE_AGENT_NOT_READY, NODE_GONE};

/// Annotation the source's node agent puts on the writer Lease once it
/// closed the computer, shipped its last changes and released the Lease:
/// `<target> <position>`.
pub use agentcomputer_crds::moves::HANDED_OVER_TO;

/// How long a target may take to restore in the background before the
/// source is told to hand over anyway (the target then finishes its
/// restore while calls wait).
pub const PREPARE_LIMIT: Duration = Duration::from_secs(300);

/// How long a source may take to hand over before the move is given up
/// (the source then serves the computer again).
pub const HAND_OVER_LIMIT: Duration = Duration::from_secs(600);

/// Reason of `Moving=False` (and of the Warning event) when a source did
/// not hand over within [`HAND_OVER_LIMIT`].
pub use agentcomputer_crds::moves::move_condition_reasons::HAND_OVER_TIMED_OUT;

/// What the computer's writer Lease says, as far as moves care.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// `spec.holderIdentity`, if held.
    pub holder: Option<String>,
    /// The holder's renew deadline has passed (`renewTime` +
    /// `leaseDurationSeconds` before now), or nobody holds it.
    pub expired: bool,
    /// [`PREPARED_ON`]: the node that restored the computer in the
    /// background, and the position it reached.
    pub prepared_on: Option<(String, u64)>,
    /// `HANDED_OVER_TO`: the node the holder handed the computer to, and
    /// the last position it shipped.
    pub handed_over_to: Option<(String, u64)>,
}

impl LeaseView {
    /// Reads the annotations and holder of a Lease (`None`: no Lease, which
    /// is a computer never opened since backups began).
    pub fn of(lease: Option<&k8s_openapi::api::coordination::v1::Lease>, now: Timestamp) -> Self {
        let Some(lease) = lease else {
            return LeaseView {
                expired: true,
                ..Default::default()
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.filter(|h| !h.is_empty());
        let expired = match (&holder, &spec.renew_time, spec.lease_duration_seconds) {
            (None, _, _) => true,
            (Some(_), Some(renewed), Some(secs)) => {
                renewed.0 + std::time::Duration::from_secs(secs.max(0) as u64) < now
            }
            // Held without a renew time or duration: never taken as expired.
            _ => false,
        };
        let annotation = |key: &str| -> Option<(String, u64)> {
            let v = lease.annotations().get(key)?;
            let (node, pos) = v.split_once(' ')?;
            Some((node.to_string(), pos.parse().ok()?))
        };
        LeaseView {
            holder,
            expired,
            prepared_on: annotation(PREPARED_ON),
            handed_over_to: annotation(HANDED_OVER_TO),
        }
    }
}

/// What one reconcile observed that bears on moving the computer.
pub struct Seen<'a> {
    /// The computer.
    pub computer: &'a AgentComputer,
    /// Its status before this reconcile.
    pub old: &'a AgentComputerStatus,
    /// The node serving it now.
    pub node: &'a str,
    /// That node's object; None when it is gone.
    pub node_obj: Option<&'a Node>,
    /// That node has a ready node agent.
    pub agent_ready: bool,
    /// The node agents have a backup store (operator `--moves`).
    pub moves_enabled: bool,
    /// Operator `--failover-after`.
    pub failover_after: Duration,
    /// The computer's writer Lease.
    pub lease: LeaseView,
    /// A target for a new move: the requested node if it is eligible,
    /// else the eligible node placement would choose (never `node`);
    /// `Err` says why there is none.
    pub target: Result<String, (&'static str, String)>,
    /// The time of this reconcile.
    pub now: Timestamp,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing moves. `blocked`: the computer should move but cannot
    /// (reason, message) for `Moving=False` and a Warning event;
    /// `clear_request`: the move annotation is removed.
    Stay {
        /// Why a needed move cannot happen.
        blocked: Option<(&'static str, String)>,
        /// Remove [`MOVE_REQUEST`] / [`FAILOVER`].
        clear_request: bool,
    },
    /// A move runs (new or going on) with this status; the computer stays
    /// at its source for now.
    Moving(MoveStatus),
    /// The target becomes the computer's node now.
    Switch(MoveRecord),
}

/// Why the computer's node is lost, if it is: its Node object is gone, or
/// its agent has not been ready for `failover_after` (or at all, with
/// annotation `failover: now`). Returns the time the agent was last seen
/// ready (from the `Ready` condition's transition), when known.
fn lost(s: &Seen) -> Option<Option<Time>> {
    let down_since = down_since(s);
    if s.node_obj.is_none() {
        return Some(down_since);
    }
    if s.agent_ready {
        return None;
    }
    let now_asked = s
        .computer
        .annotations()
        .get(FAILOVER)
        .is_some_and(|v| v == "now");
    match &down_since {
        _ if now_asked => Some(down_since),
        Some(since) if since.0 + s.failover_after <= s.now => Some(down_since),
        _ => None,
    }
}

/// When the computer's `Ready` condition turned False because its node
/// agent or Node went away, if it says so.
fn down_since(s: &Seen) -> Option<Time> {
    s.old
        .conditions
        .iter()
        .find(|c| c.type_ == ct::READY)
        .filter(|c| {
            c.status == "False" && (c.reason == NODE_AGENT_NOT_READY || c.reason == NODE_GONE)
        })
        .map(|c| c.last_transition_time.clone())
}

/// Decides for one reconcile (see the module docs).
pub fn decide(s: &Seen) -> Decision {
    let requested = s.computer.annotations().contains_key(MOVE_REQUEST);
    if let Some(m) = &s.old.moving {
        return going_on(s, m);
    }
    let cordoned = s
        .node_obj
        .and_then(|n| n.spec.as_ref())
        .and_then(|sp| sp.unschedulable)
        .unwrap_or(false);
    let lost_since = lost(s);
    let reason = if lost_since.is_some() {
        MoveReason::NodeLost
    } else if requested {
        MoveReason::Requested
    } else if cordoned {
        MoveReason::NodeCordoned
    } else {
        let failover_asked = s.computer.annotations().contains_key(FAILOVER);
        return Decision::Stay {
            blocked: None,
            // `failover: now` on a computer whose agent is ready: nothing
            // to fail over from.
            clear_request: failover_asked,
        };
    };
    if !s.moves_enabled {
        return Decision::Stay {
            blocked: Some((
                agentcomputer_crds::moves::move_condition_reasons::NO_BACKUP,
                format!(
                    "{} but the computer cannot move: the node agents have no backup store \
                     (chart value backup.url), so its data cannot follow; it stays on {}",
                    describe(reason, s.node),
                    s.node
                ),
            )),
            clear_request: requested,
        };
    }
    let target = match &s.target {
        Ok(t) => t.clone(),
        Err((reason_code, why)) => {
            return Decision::Stay {
                blocked: Some((
                    reason_code,
                    format!(
                        "{} but no other node can take the computer: {why}",
                        describe(reason, s.node)
                    ),
                )),
                clear_request: requested,
            };
        }
    };
    let started = Time(s.now);
    if reason == MoveReason::NodeLost {
        return switch_lost(s, &target, started, lost_since.flatten());
    }
    Decision::Moving(MoveStatus {
        source: s.node.to_string(),
        target,
        reason,
        phase: MovePhase::Preparing,
        started_time: started,
        hand_over_time: None,
    })
}

/// The next step of a move that runs.
fn going_on(s: &Seen, m: &MoveStatus) -> Decision {
    // Already switched (a reconcile that failed after labelling the
    // computer for its target): finish the switch, never undo it.
    if s.computer
        .labels()
        .get(agentcomputer_crds::labels::NODE)
        .is_some_and(|n| *n == m.target)
    {
        let mut r = record(s, m);
        if m.reason == MoveReason::NodeLost {
            // As the switch itself recorded it (the cache may show the
            // label before the status written with it).
            r.hand_over_millis = None;
            let backup = s.old.backup.as_ref();
            r.last_reported_position = backup.and_then(|b| b.position);
            r.last_reported_shipped_time = backup.and_then(|b| b.last_shipped_time.clone());
            r.source_last_ready_time = down_since(s);
        }
        return Decision::Switch(r);
    }
    let lost_since = lost(s);
    // The source is lost while the move runs: fail over to the same target.
    if let Some(since) = &lost_since
        && s.lease.expired
    {
        let mut d = switch_lost(s, &m.target, m.started_time.clone(), since.clone());
        if let Decision::Switch(r) = &mut d {
            r.reason = m.reason;
        }
        return d;
    }
    // A failover whose source came back before its Lease expired: it
    // serves the computer again.
    if m.reason == MoveReason::NodeLost && lost_since.is_none() {
        return Decision::Stay {
            blocked: None,
            clear_request: true,
        };
    }
    match m.phase {
        MovePhase::Preparing => {
            // The cause went (the request was taken back, the node
            // uncordoned): the move is given up.
            let cordoned = s
                .node_obj
                .and_then(|n| n.spec.as_ref())
                .and_then(|sp| sp.unschedulable)
                .unwrap_or(false);
            let requested = s.computer.annotations().contains_key(MOVE_REQUEST);
            let cause_gone = match m.reason {
                MoveReason::Requested => !requested,
                MoveReason::NodeCordoned => !cordoned && !requested,
                MoveReason::NodeLost => false,
            };
            if cause_gone {
                return Decision::Stay {
                    blocked: None,
                    clear_request: false,
                };
            }
            let prepared = s
                .lease
                .prepared_on
                .as_ref()
                .is_some_and(|(node, _)| node == &m.target);
            // Never opened since backups began, or closed with its Lease
            // released: nothing serves it at the source.
            let idle =
                s.lease.expired && s.lease.handed_over_to.is_none() && s.lease.holder.is_none();
            let waited_enough = m.started_time.0 + PREPARE_LIMIT <= s.now;
            if prepared || waited_enough || idle {
                Decision::Moving(MoveStatus {
                    phase: MovePhase::HandingOver,
                    hand_over_time: Some(Time(s.now)),
                    ..m.clone()
                })
            } else {
                Decision::Moving(m.clone())
            }
        }
        MovePhase::HandingOver => {
            // Handed over: the source says so, and no longer holds the
            // Lease (released, or past its duration: a source whose
            // release failed or that restarted is fenced by then).
            let handed = s
                .lease
                .handed_over_to
                .as_ref()
                .is_some_and(|(node, _)| node == &m.target)
                && (s.lease.holder.as_deref() != Some(m.source.as_str()) || s.lease.expired);
            if handed {
                return Decision::Switch(record(s, m));
            }
            let since = m.hand_over_time.as_ref().unwrap_or(&m.started_time);
            if m.reason != MoveReason::NodeLost && since.0 + HAND_OVER_LIMIT <= s.now {
                return Decision::Stay {
                    blocked: Some((
                        HAND_OVER_TIMED_OUT,
                        format!(
                            "{} did not hand the computer over to {} within {} s; it stays on {}",
                            m.source,
                            m.target,
                            HAND_OVER_LIMIT.as_secs(),
                            m.source
                        ),
                    )),
                    clear_request: true,
                };
            }
            Decision::Moving(m.clone())
        }
    }
}

/// The record of move `m` ending now.
fn record(s: &Seen, m: &MoveStatus) -> MoveRecord {
    let millis = m
        .hand_over_time
        .as_ref()
        .map(|t| (s.now.as_millisecond() - t.0.as_millisecond()).max(0));
    MoveRecord {
        source: m.source.clone(),
        target: m.target.clone(),
        reason: m.reason,
        started_time: m.started_time.clone(),
        finished_time: Time(s.now),
        hand_over_millis: millis,
        last_reported_position: None,
        last_reported_shipped_time: None,
        source_last_ready_time: None,
    }
}

/// A failover to `target`: now if the source's Lease has expired (no
/// node can still be writing), else the move waits in `HandingOver` for
/// it to expire.
fn switch_lost(s: &Seen, target: &str, started: Time, last_ready: Option<Time>) -> Decision {
    if !s.lease.expired {
        return Decision::Moving(MoveStatus {
            source: s.node.to_string(),
            target: target.to_string(),
            reason: MoveReason::NodeLost,
            phase: MovePhase::HandingOver,
            started_time: started.clone(),
            hand_over_time: Some(started),
        });
    }
    let backup = s.old.backup.as_ref();
    Decision::Switch(MoveRecord {
        source: s.node.to_string(),
        target: target.to_string(),
        reason: MoveReason::NodeLost,
        started_time: started,
        finished_time: Time(s.now),
        hand_over_millis: None,
        last_reported_position: backup.and_then(|b| b.position),
        last_reported_shipped_time: backup.and_then(|b| b.last_shipped_time.clone()),
        source_last_ready_time: last_ready,
    })
}

/// "node n1 is cordoned" and the like, for messages.
pub fn describe(reason: MoveReason, node: &str) -> String {
    match reason {
        MoveReason::NodeCordoned => format!("node {node} is cordoned"),
        MoveReason::Requested => "a move was asked for".to_string(),
        MoveReason::NodeLost => format!("node {node} is lost"),
    }
}

#[cfg(test)]
mod tests;
