use std::collections::BTreeMap;

use agentcomputer_crds::moves::{FAILOVER, MOVE_REQUEST, MovePhase, MoveReason, MoveStatus};
use agentcomputer_crds::{AgentComputer, AgentComputerSpec, AgentComputerStatus, StorageSpec};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use super::*;

fn computer(annotations: &[(&str, &str)]) -> AgentComputer {
    let mut c = AgentComputer::new(
        "c",
        AgentComputerSpec {
            storage: StorageSpec {
                size: Quantity("1Gi".into()),
                reclaim_policy: Default::default(),
                max_inodes: None,
            },
            runtimes: Default::default(),
            sandbox: None,
            egress: Default::default(),
            limits: Default::default(),
            node_selector: None,
            tolerations: None,
            source: None,
            retention: None,
        },
    );
    c.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    c
}

fn node(cordoned: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(cordoned),
            ..Default::default()
        }),
        status: None,
    }
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn not_ready_since(secs: i64) -> AgentComputerStatus {
    AgentComputerStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: NODE_AGENT_NOT_READY.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(t(secs)),
        }],
        ..Default::default()
    }
}

struct Case {
    c: AgentComputer,
    old: AgentComputerStatus,
    node: Option<Node>,
    agent_ready: bool,
    moves: bool,
    lease: LeaseView,
    now: Timestamp,
}

impl Case {
    fn new() -> Self {
        Case {
            c: computer(&[]),
            old: AgentComputerStatus::default(),
            node: Some(node(false)),
            agent_ready: true,
            moves: true,
            lease: LeaseView {
                holder: Some("n1".into()),
                ..Default::default()
            },
            now: t(0),
        }
    }

    fn decide(&self) -> Decision {
        decide(&Seen {
            computer: &self.c,
            old: &self.old,
            node: "n1",
            node_obj: self.node.as_ref(),
            agent_ready: self.agent_ready,
            moves_enabled: self.moves,
            failover_after: Duration::from_secs(300),
            lease: self.lease.clone(),
            target: Ok("n2".into()),
            now: self.now,
        })
    }
}

fn moving(phase: MovePhase, reason: MoveReason) -> MoveStatus {
    MoveStatus {
        source: "n1".into(),
        target: "n2".into(),
        reason,
        phase,
        started_time: Time(t(0)),
        hand_over_time: (phase == MovePhase::HandingOver).then(|| Time(t(10))),
    }
}

#[test]
fn a_healthy_node_keeps_its_computer() {
    assert_eq!(
        Case::new().decide(),
        Decision::Stay {
            blocked: None,
            clear_request: false
        }
    );
}

#[test]
fn a_cordoned_node_starts_a_move_that_prepares_first() {
    let mut case = Case::new();
    case.node = Some(node(true));
    match case.decide() {
        Decision::Moving(m) => {
            assert_eq!(
                (m.phase, m.reason),
                (MovePhase::Preparing, MoveReason::NodeCordoned)
            );
            assert_eq!((m.source.as_str(), m.target.as_str()), ("n1", "n2"));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn without_a_backup_store_a_cordoned_node_says_why_nothing_moves() {
    let mut case = Case::new();
    case.node = Some(node(true));
    case.moves = false;
    match case.decide() {
        Decision::Stay {
            blocked: Some((reason, why)),
            ..
        } => {
            assert_eq!(reason, "NoBackupStore");
            assert!(
                why.contains("node n1 is cordoned") && why.contains("backup"),
                "{why}"
            );
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn the_hand_over_starts_once_the_target_is_prepared() {
    let mut case = Case::new();
    case.c = computer(&[(MOVE_REQUEST, "")]);
    case.old.moving = Some(moving(MovePhase::Preparing, MoveReason::Requested));
    case.now = t(5);
    assert!(matches!(case.decide(), Decision::Moving(m) if m.phase == MovePhase::Preparing));
    // Another node's preparation does not count.
    case.lease.prepared_on = Some(("n3".into(), 7));
    assert!(matches!(case.decide(), Decision::Moving(m) if m.phase == MovePhase::Preparing));
    case.lease.prepared_on = Some(("n2".into(), 7));
    match case.decide() {
        Decision::Moving(m) => {
            assert_eq!(m.phase, MovePhase::HandingOver);
            assert_eq!(m.hand_over_time, Some(Time(t(5))));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_target_that_never_prepares_gets_the_hand_over_after_the_limit() {
    let mut case = Case::new();
    case.node = Some(node(true));
    case.old.moving = Some(moving(MovePhase::Preparing, MoveReason::NodeCordoned));
    case.now = t(PREPARE_LIMIT.as_secs() as i64);
    assert!(matches!(case.decide(), Decision::Moving(m) if m.phase == MovePhase::HandingOver));
}

#[test]
fn the_target_becomes_the_node_once_the_source_handed_over() {
    let mut case = Case::new();
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::NodeCordoned));
    case.now = t(11);
    // Still held by the source: wait.
    case.lease.handed_over_to = Some(("n2".into(), 42));
    assert!(matches!(case.decide(), Decision::Moving(_)));
    case.lease.holder = None;
    match case.decide() {
        Decision::Switch(r) => {
            assert_eq!((r.source.as_str(), r.target.as_str()), ("n1", "n2"));
            assert_eq!(r.hand_over_millis, Some(1000));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_lost_node_fails_over_after_the_delay_once_its_lease_expired() {
    let mut case = Case::new();
    case.agent_ready = false;
    case.old = not_ready_since(0);
    case.lease.expired = true;
    case.now = t(299);
    assert!(matches!(
        case.decide(),
        Decision::Stay { blocked: None, .. }
    ));
    case.now = t(300);
    match case.decide() {
        Decision::Switch(r) => {
            assert_eq!(r.reason, MoveReason::NodeLost);
            assert_eq!(r.source_last_ready_time, Some(Time(t(0))));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn failover_now_skips_the_delay_but_never_the_lease() {
    let mut case = Case::new();
    case.c = computer(&[(FAILOVER, "now")]);
    case.agent_ready = false;
    case.old = not_ready_since(0);
    case.now = t(1);
    // The lost node's Lease still runs: wait in HandingOver.
    match case.decide() {
        Decision::Moving(m) => {
            assert_eq!(
                (m.phase, m.reason),
                (MovePhase::HandingOver, MoveReason::NodeLost)
            )
        }
        d => panic!("{d:?}"),
    }
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::NodeLost));
    assert!(matches!(case.decide(), Decision::Moving(_)));
    case.lease.expired = true;
    assert!(matches!(case.decide(), Decision::Switch(r) if r.reason == MoveReason::NodeLost));
}

#[test]
fn a_gone_node_fails_over_at_once() {
    let mut case = Case::new();
    case.node = None;
    case.agent_ready = false;
    case.lease.expired = true;
    assert!(matches!(case.decide(), Decision::Switch(r) if r.reason == MoveReason::NodeLost));
}

#[test]
fn failover_now_on_a_ready_node_is_cleared() {
    let mut case = Case::new();
    case.c = computer(&[(FAILOVER, "now")]);
    assert_eq!(
        case.decide(),
        Decision::Stay {
            blocked: None,
            clear_request: true
        }
    );
}

#[test]
fn a_request_moves_even_from_a_healthy_node() {
    let mut case = Case::new();
    case.c = computer(&[(MOVE_REQUEST, "")]);
    assert!(matches!(case.decide(), Decision::Moving(m) if m.reason == MoveReason::Requested));
}

#[test]
fn a_move_whose_cause_went_while_preparing_is_given_up() {
    let mut case = Case::new();
    case.old.moving = Some(moving(MovePhase::Preparing, MoveReason::NodeCordoned));
    // Uncordoned.
    assert!(matches!(
        case.decide(),
        Decision::Stay { blocked: None, .. }
    ));
    // A request taken back.
    case.old.moving = Some(moving(MovePhase::Preparing, MoveReason::Requested));
    assert!(matches!(
        case.decide(),
        Decision::Stay { blocked: None, .. }
    ));
    // Once handing over it goes on.
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::Requested));
    assert!(matches!(case.decide(), Decision::Moving(_)));
}

#[test]
fn a_computer_already_labelled_for_its_target_finishes_the_switch() {
    let mut case = Case::new();
    // As a cache can show it: the switch's labels (its `failover`
    // annotation gone) with the status from before.
    case.c
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("agentcomputer.dev/node".into(), "n2".into());
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::NodeLost));
    case.agent_ready = false;
    case.old.conditions = not_ready_since(0).conditions;
    // The target holds the Lease by now: still a switch, never a way back,
    // recorded as the failover it is.
    case.lease.holder = Some("n2".into());
    match case.decide() {
        Decision::Switch(r) => {
            assert_eq!(r.target, "n2");
            assert_eq!(r.hand_over_millis, None);
            assert_eq!(r.source_last_ready_time, Some(Time(t(0))));
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_failover_whose_source_came_back_is_given_up() {
    let mut case = Case::new();
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::NodeLost));
    // The source's agent is ready again and holds its Lease.
    assert!(matches!(
        case.decide(),
        Decision::Stay {
            blocked: None,
            clear_request: true
        }
    ));
}

#[test]
fn a_source_that_never_hands_over_keeps_the_computer_after_the_limit() {
    let mut case = Case::new();
    case.c = computer(&[(MOVE_REQUEST, "")]);
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::Requested));
    case.now = t(10 + HAND_OVER_LIMIT.as_secs() as i64 - 1);
    assert!(matches!(case.decide(), Decision::Moving(_)));
    case.now = t(10 + HAND_OVER_LIMIT.as_secs() as i64);
    match case.decide() {
        Decision::Stay {
            blocked: Some((reason, why)),
            clear_request: true,
        } => {
            assert_eq!(reason, HAND_OVER_TIMED_OUT);
            assert!(why.contains("stays on n1"), "{why}");
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_hand_over_whose_release_failed_switches_once_the_lease_expired() {
    let mut case = Case::new();
    case.old.moving = Some(moving(MovePhase::HandingOver, MoveReason::NodeCordoned));
    case.node = Some(node(true));
    case.lease.handed_over_to = Some(("n2".into(), 4));
    // Still named holder (the release failed): wait for the Lease to run out.
    assert!(matches!(case.decide(), Decision::Moving(_)));
    case.lease.expired = true;
    assert!(matches!(case.decide(), Decision::Switch(_)));
}
