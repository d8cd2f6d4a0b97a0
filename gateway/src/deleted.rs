//! Computers deleted while the gateway watched.
//!
//! Routing is by credential, and a deleted computer's credential is gone
//! with it, so without this record its last token would look like one that
//! never was valid (`UNAUTHENTICATED`). The holder of that token is told
//! instead that its computer no longer exists (`NOT_FOUND`, naming it).
//! Only the token's own holder learns that: the record is looked up by the
//! token's fingerprint, never by a name.
//!
//! The record is each replica's memory of its watch: a replica started
//! after the deletion answers `UNAUTHENTICATED`. A deletion missed while
//! the watch was down is found when the watch lists again (the computer is
//! absent from the new list).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use agentcomputer_crds::AgentComputer;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use parking_lot::Mutex;

/// How long a deleted computer's token is remembered.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(24 * 3600);

/// How many deleted computers are remembered at most (the oldest go
/// first); about 200 bytes each.
pub const REMEMBERED_AT_MOST: usize = 100_000;

/// The record of deletions, fed by the watch's events.
#[derive(Default)]
pub struct Deleted {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Computers in the watch now: uid to (fingerprint, `NS/NAME`).
    live: HashMap<String, (String, String)>,
    /// Uids seen in a list under way (between `Init` and `InitDone`).
    listing: Option<HashSet<String>>,
    /// Fingerprint of a deleted computer's last credential to its name.
    gone: HashMap<String, (String, Instant)>,
    /// `gone`'s keys, oldest first.
    order: VecDeque<(String, Instant)>,
}

impl Deleted {
    /// An empty record.
    pub fn new() -> Deleted {
        Deleted::default()
    }

    /// Takes one event of the AgentComputer watch into account.
    pub fn observe(&self, event: &Event<AgentComputer>) {
        self.observe_at(event, Instant::now());
    }

    fn observe_at(&self, event: &Event<AgentComputer>, now: Instant) {
        let mut inner = self.inner.lock();
        match event {
            Event::Apply(c) => inner.live_one(c),
            Event::InitApply(c) => {
                inner.live_one(c);
                if let (Some(listing), Some(uid)) = (inner.listing.as_mut(), c.uid()) {
                    listing.insert(uid);
                }
            }
            Event::Delete(c) => {
                if let Some(uid) = c.uid() {
                    inner.live.remove(&uid);
                }
                if let Some(fp) = fingerprint_of(c) {
                    inner.bury(fp, computer_of(c), now);
                }
            }
            Event::Init => inner.listing = Some(HashSet::new()),
            Event::InitDone => {
                let Some(listed) = inner.listing.take() else {
                    return;
                };
                let missing: Vec<String> = inner
                    .live
                    .keys()
                    .filter(|uid| !listed.contains(*uid))
                    .cloned()
                    .collect();
                for uid in missing {
                    if let Some((fp, name)) = inner.live.remove(&uid) {
                        inner.bury(fp, name, now);
                    }
                }
            }
        }
    }

    /// `NS/NAME` of the deleted computer whose last credential has
    /// `fingerprint`, if it is remembered.
    pub fn computer(&self, fingerprint: &str) -> Option<String> {
        self.computer_at(fingerprint, Instant::now())
    }

    fn computer_at(&self, fingerprint: &str, now: Instant) -> Option<String> {
        let mut inner = self.inner.lock();
        inner.forget_before(now);
        inner.gone.get(fingerprint).map(|(name, _)| name.clone())
    }
}

impl Inner {
    fn live_one(&mut self, c: &AgentComputer) {
        let (Some(uid), Some(fp)) = (c.uid(), fingerprint_of(c)) else {
            return;
        };
        // A credential in use again is no deleted computer's.
        self.gone.remove(&fp);
        self.live.insert(uid, (fp, computer_of(c)));
    }

    fn bury(&mut self, fingerprint: String, computer: String, now: Instant) {
        self.forget_before(now);
        while self.gone.len() >= REMEMBERED_AT_MOST {
            let Some((fp, at)) = self.order.pop_front() else {
                break;
            };
            self.forget(&fp, at);
        }
        self.gone.insert(fingerprint.clone(), (computer, now));
        self.order.push_back((fingerprint, now));
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some((fp, at)) = self.order.front().cloned() {
            if now.saturating_duration_since(at) < REMEMBERED_FOR {
                break;
            }
            self.order.pop_front();
            self.forget(&fp, at);
        }
    }

    /// Removes `fp` if it is still the entry buried at `at` (a later burial
    /// of the same fingerprint stays).
    fn forget(&mut self, fp: &str, at: Instant) {
        if self.gone.get(fp).is_some_and(|(_, t)| *t == at) {
            self.gone.remove(fp);
        }
    }
}

fn fingerprint_of(c: &AgentComputer) -> Option<String> {
    c.status
        .as_ref()
        .and_then(|s| s.credential_hash.clone())
        .filter(|h| !h.is_empty())
}

fn computer_of(c: &AgentComputer) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::fingerprint;
    use agentcomputer_crds::AgentComputerStatus;

    fn computer(name: &str, uid: &str, token: &str) -> AgentComputer {
        let mut c: AgentComputer = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"storage": {"size": "1Gi"}},
        }))
        .unwrap();
        c.status = Some(AgentComputerStatus {
            credential_hash: Some(fingerprint(token)),
            ..Default::default()
        });
        c
    }

    #[test]
    fn a_deleted_computers_token_names_it_and_a_live_ones_does_not() {
        let d = Deleted::new();
        d.observe(&Event::Apply(computer("a", "u1", "t1")));
        d.observe(&Event::Apply(computer("b", "u2", "t2")));
        d.observe(&Event::Delete(computer("a", "u1", "t1")));
        assert_eq!(d.computer(&fingerprint("t1")).as_deref(), Some("ns/a"));
        assert_eq!(d.computer(&fingerprint("t2")), None);
        assert_eq!(d.computer(&fingerprint("never")), None);
    }

    #[test]
    fn a_rotated_token_is_not_a_deletion() {
        let d = Deleted::new();
        d.observe(&Event::Apply(computer("a", "u1", "old")));
        d.observe(&Event::Apply(computer("a", "u1", "new")));
        assert_eq!(d.computer(&fingerprint("old")), None);
    }

    #[test]
    fn a_deletion_missed_by_the_watch_is_found_by_the_next_list() {
        let d = Deleted::new();
        d.observe(&Event::Init);
        d.observe(&Event::InitApply(computer("a", "u1", "t1")));
        d.observe(&Event::InitApply(computer("b", "u2", "t2")));
        d.observe(&Event::InitDone);
        // The watch broke; `a` was deleted meanwhile; the relist lacks it.
        d.observe(&Event::Init);
        d.observe(&Event::InitApply(computer("b", "u2", "t2")));
        assert_eq!(
            d.computer(&fingerprint("t1")),
            None,
            "not before the list ends"
        );
        d.observe(&Event::InitDone);
        assert_eq!(d.computer(&fingerprint("t1")).as_deref(), Some("ns/a"));
        assert_eq!(d.computer(&fingerprint("t2")), None);
    }

    #[test]
    fn a_deletion_is_forgotten_after_its_time() {
        let d = Deleted::new();
        let t0 = Instant::now();
        d.observe_at(&Event::Delete(computer("a", "u1", "t1")), t0);
        assert!(
            d.computer_at(&fingerprint("t1"), t0 + REMEMBERED_FOR / 2)
                .is_some()
        );
        assert!(
            d.computer_at(&fingerprint("t1"), t0 + REMEMBERED_FOR)
                .is_none()
        );
    }

    #[test]
    fn the_oldest_deletion_goes_first_past_the_bound() {
        let d = Deleted::new();
        for i in 0..=REMEMBERED_AT_MOST {
            d.observe(&Event::Delete(computer(
                &format!("c{i}"),
                &format!("u{i}"),
                &format!("t{i}"),
            )));
        }
        assert_eq!(d.computer(&fingerprint("t0")), None);
        assert_eq!(d.computer(&fingerprint("t1")).as_deref(), Some("ns/c1"));
        let last = REMEMBERED_AT_MOST;
        assert!(d.computer(&fingerprint(&format!("t{last}"))).is_some());
    }

    #[test]
    fn a_computer_made_again_with_the_token_is_live() {
        let d = Deleted::new();
        d.observe(&Event::Delete(computer("a", "u1", "t1")));
        d.observe(&Event::Apply(computer("a", "u3", "t1")));
        assert_eq!(d.computer(&fingerprint("t1")), None);
    }
}
