//! The storage room of one namespace: an upper bound on the sum of its
//! computers' quotas (`--namespace-storage-limit`, chart value
//! `operator.namespaceStorageLimit`; docs/operator.md, "Storage room per
//! namespace").
//!
//! A ResourceQuota on `requests.storage` counts a computer's claim, whose
//! request is the quota at creation and never changes (a claim of a
//! pre-provisioned volume cannot be resized), while a grown quota grows the
//! volume and the room the computer takes on its node. So the operator
//! bounds the quotas themselves:
//!
//! * A computer **holds** the capacity of its volume (`status.volume.capacity`,
//!   for the computer reconciled its PersistentVolume's), 0 before it has
//!   one.
//! * Its **demand** is what its `spec.storage.size` asks beyond that: all of
//!   it for a new computer, the growth for a resized one.
//! * Demands are granted in creation order (then by name): each fits when
//!   every hold plus the demands granted before it stays within the limit.
//!   Every reconcile computes the same order from the same objects, so two
//!   computers reconciled at once cannot both take the last room.
//! * A new computer whose demand does not fit is not placed (condition
//!   `Placed=False`, reason `NamespaceStorageLimit`); a growth that does not
//!   fit leaves the volume at the capacity it has (condition
//!   `StorageGranted=False`, same reason). Both are retried, and fit once
//!   room is freed (a computer deleted) or the limit raised.

use std::cmp::Ordering;

use agentcomputer_crds::AgentComputer;
use agentcomputer_crds::quantity::quantity_bytes;
use agentcomputer_runtime_contract::human_quantity;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

/// Condition type saying whether the computer's whole quota is granted.
pub const STORAGE_GRANTED: &str = "StorageGranted";
/// Reason of a demand refused for the namespace's limit.
pub const NAMESPACE_STORAGE_LIMIT: &str = "NamespaceStorageLimit";
/// Reason of a quota within the limit.
pub const WITHIN_LIMIT: &str = "WithinNamespaceLimit";

/// What the namespace's limit grants one computer.
#[derive(Debug, Clone, PartialEq)]
pub enum Grant {
    /// No limit, or the whole `spec.storage.size` fits.
    Whole,
    /// The demand does not fit: the computer keeps the capacity `held` of
    /// its volume, as written there (`0` when it has none). `message`
    /// says why, with the numbers.
    Refused {
        /// The capacity the volume keeps (`0` when it has none yet).
        held: Quantity,
        /// The refusal for the computer's condition, with the numbers.
        message: String,
    },
}

/// One computer as the limit sees it.
#[derive(Debug, Clone)]
struct Entry<'a> {
    created: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    name: String,
    uid: String,
    held: u64,
    /// `held` as written (the volume's or the status's quantity).
    held_as: Option<&'a Quantity>,
    wants: u64,
}

impl Entry<'_> {
    fn demand(&self) -> u64 {
        self.wants.saturating_sub(self.held)
    }

    fn order(&self, other: &Entry) -> Ordering {
        let t = |e: &Entry| e.created.map(|t| t.0);
        t(self)
            .cmp(&t(other))
            .then_with(|| self.name.cmp(&other.name))
            .then_with(|| self.uid.cmp(&other.uid))
    }
}

/// Bytes of a quantity, 0 when it has none.
fn bytes(q: Option<&Quantity>) -> u64 {
    q.and_then(|q| quantity_bytes(q).ok()).unwrap_or(0)
}

/// The capacity a PersistentVolume gives, in bytes.
pub fn pv_capacity(pv: &PersistentVolume) -> u64 {
    bytes(
        pv.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

/// What `limit` (bytes; `None`: no limit) grants `me` among `all`, the
/// computers of its namespace (`me` among them or not; others' namespaces
/// are skipped). `my_volume` is `me`'s PersistentVolume when it has one
/// (its capacity is what `me` holds, whatever the cached status says).
pub fn grant<'a>(
    limit: Option<u64>,
    me: &'a AgentComputer,
    my_volume: Option<&PersistentVolume>,
    all: impl IntoIterator<Item = &'a AgentComputer>,
) -> Grant {
    let Some(limit) = limit else {
        return Grant::Whole;
    };
    let ns = me.namespace();
    let my_uid = me.uid().unwrap_or_default();
    let entry = |c: &'a AgentComputer| {
        let held_as = c
            .status
            .as_ref()
            .and_then(|s| s.volume.as_ref())
            .and_then(|v| v.capacity.as_ref());
        Entry {
            created: c.metadata.creation_timestamp.as_ref(),
            name: c.name_any(),
            uid: c.uid().unwrap_or_default(),
            held: bytes(held_as),
            held_as,
            wants: bytes(Some(&c.spec.storage.size)),
        }
    };
    let mut mine = entry(me);
    let volume_capacity =
        my_volume.and_then(|pv| pv.spec.as_ref()?.capacity.as_ref()?.get("storage").cloned());
    if let Some(q) = &volume_capacity {
        mine.held = bytes(Some(q));
    }
    let held_as = volume_capacity
        .or_else(|| mine.held_as.cloned())
        .unwrap_or_else(|| Quantity("0".into()));
    if mine.demand() == 0 {
        return Grant::Whole;
    }
    let others: Vec<Entry> = all
        .into_iter()
        .filter(|c| c.namespace() == ns && c.uid().unwrap_or_default() != my_uid)
        .map(entry)
        .collect();
    let mut total: u64 = mine.held + others.iter().map(|o| o.held).sum::<u64>();
    let mut earlier: Vec<&Entry> = others
        .iter()
        .filter(|o| o.demand() > 0 && o.order(&mine) == Ordering::Less)
        .collect();
    earlier.sort_by(|a, b| a.order(b));
    for o in earlier {
        if total + o.demand() <= limit {
            total += o.demand();
        }
    }
    if total + mine.demand() <= limit {
        return Grant::Whole;
    }
    let ns = ns.unwrap_or_default();
    let message = format!(
        "namespace {ns}: {} more would bring its computers' quotas to {}, over the operator's limit of {} per namespace (--namespace-storage-limit); {} is free",
        human_quantity(mine.demand()),
        human_quantity(total + mine.demand()),
        human_quantity(limit),
        human_quantity(limit.saturating_sub(total)),
    );
    Grant::Refused {
        held: held_as,
        message,
    }
}

/// `c` with `spec.storage.size` set to `held`: what the volume step
/// applies when a growth is refused (the volume keeps its capacity).
pub fn with_size(c: &AgentComputer, held: &Quantity) -> AgentComputer {
    let mut kept = c.clone();
    kept.spec.storage.size = held.clone();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::{AgentComputerStatus, VolumeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const GI: u64 = 1 << 30;

    fn computer(
        name: &str,
        ns: &str,
        created_s: i64,
        size: &str,
        held: Option<&str>,
    ) -> AgentComputer {
        let mut c: AgentComputer = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}")},
            "spec": {"storage": {"size": size}},
        }))
        .unwrap();
        c.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + created_s).unwrap(),
        ));
        c.status = held.map(|h| AgentComputerStatus {
            volume: Some(VolumeStatus {
                capacity: Some(Quantity(h.into())),
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    }

    fn refused(g: Grant) -> (Quantity, String) {
        match g {
            Grant::Refused { held, message } => (held, message),
            Grant::Whole => panic!("granted"),
        }
    }

    #[test]
    fn no_limit_grants_everything() {
        let c = computer("a", "t", 0, "1Ti", None);
        assert_eq!(grant(None, &c, None, [&c]), Grant::Whole);
    }

    #[test]
    fn new_computers_fit_in_creation_order() {
        let a = computer("a", "t", 0, "6Gi", Some("6Gi"));
        let b = computer("b", "t", 1, "3Gi", None);
        let c = computer("c", "t", 2, "2Gi", None);
        let d = computer("d", "t", 3, "1Gi", None);
        let other_ns = computer("x", "u", 0, "100Gi", Some("100Gi"));
        let all = [&a, &b, &c, &d, &other_ns];
        let limit = Some(10 * GI);
        // a holds 6; b (3) fits; c (2) would make 11; d (1) fits after b.
        assert_eq!(grant(limit, &b, None, all), Grant::Whole);
        let (held, why) = refused(grant(limit, &c, None, all));
        assert_eq!(held.0, "0");
        assert_eq!(
            why,
            "namespace t: 2Gi more would bring its computers' quotas to 11Gi, over the operator's limit of 10Gi per namespace (--namespace-storage-limit); 1Gi is free"
        );
        assert_eq!(grant(limit, &d, None, all), Grant::Whole);
        // A computer that holds its whole quota is always granted it.
        assert_eq!(grant(limit, &a, None, all), Grant::Whole);
    }

    #[test]
    fn growth_is_a_demand_and_a_refused_one_keeps_the_volume() {
        // a grew from 4Gi to 8Gi; b holds 4Gi: 12 > 10.
        let a = computer("a", "t", 0, "8Gi", Some("4Gi"));
        let b = computer("b", "t", 1, "4Gi", Some("4Gi"));
        let limit = Some(10 * GI);
        let (held, why) = refused(grant(limit, &a, None, [&a, &b]));
        assert_eq!(held.0, "4Gi");
        assert!(
            why.contains("4Gi more would bring its computers' quotas to 12Gi"),
            "{why}"
        );
        assert_eq!(with_size(&a, &held).spec.storage.size.0, "4Gi");
        // The volume's capacity counts over a stale status.
        let pv = PersistentVolume {
            spec: Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
                capacity: Some([("storage".to_string(), Quantity("8Gi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pv_capacity(&pv), 8 * GI);
        assert_eq!(grant(limit, &a, Some(&pv), [&a, &b]), Grant::Whole);
        // Within the limit, growth is granted.
        assert_eq!(grant(Some(12 * GI), &a, None, [&a, &b]), Grant::Whole);
    }

    #[test]
    fn two_computers_reconciled_at_once_cannot_both_take_the_last_room() {
        let a = computer("a", "t", 5, "6Gi", None);
        let b = computer("b", "t", 5, "6Gi", None);
        let limit = Some(10 * GI);
        // Same creation second: the name breaks the tie, the same way for both.
        assert_eq!(grant(limit, &a, None, [&a, &b]), Grant::Whole);
        assert!(matches!(
            grant(limit, &b, None, [&a, &b]),
            Grant::Refused { .. }
        ));
        // An earlier demand that does not fit takes nothing from later ones.
        let big = computer("big", "t", 0, "20Gi", None);
        assert!(matches!(
            grant(limit, &big, None, [&big, &a]),
            Grant::Refused { .. }
        ));
        assert_eq!(grant(limit, &a, None, [&big, &a]), Grant::Whole);
    }
}
