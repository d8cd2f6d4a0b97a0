//! The computers this node serves, as the AgentComputer watch last saw
//! them: who they are and the fingerprint of their credential.

use parking_lot::RwLock;
use std::collections::HashMap;

/// One computer placed on this node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// `metadata.uid`: the registry key and CSI volume handle.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// SHA-256 of the computer's token from `status.credentialHash`; `None`
    /// while none is published (or it is malformed): every call refused.
    pub credential: Option<[u8; 32]>,
    /// Its sandbox pod as the resource says, for container execs waiting
    /// for it (read here rather than from the API server per exec).
    pub sandbox: SandboxInfo,
}

/// A computer's sandbox as its AgentComputer says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxInfo {
    /// `spec.sandbox` is set and `spec.runtimes.container` is on: the
    /// operator makes a sandbox pod.
    pub configured: bool,
    /// The `SandboxReady` condition: (status True, reason, message); None
    /// before the operator wrote one.
    pub condition: Option<(bool, String, String)>,
}

impl Entry {
    /// `NAMESPACE/NAME`.
    pub fn shown(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Parses `status.credentialHash`: `sha256:` and 64 lowercase hex digits.
/// `None` for anything else.
pub fn parse_credential_hash(text: &str) -> Option<[u8; 32]> {
    let hex_digits = text.strip_prefix("sha256:")?;
    if hex_digits.len() != 64
        || !hex_digits
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_digits, &mut out).ok()?;
    Some(out)
}

/// The computers of this node by uid. Shared by the watch (writer), the
/// credential check and the reporters (readers).
#[derive(Debug, Default)]
pub struct Index {
    by_uid: RwLock<HashMap<String, Entry>>,
    /// Computers handed over to another node, with that node and when
    /// they left: their callers are told where they went for
    /// [`MOVED_KEPT`].
    moved: RwLock<HashMap<String, (Entry, String, std::time::Instant)>>,
    /// Woken each time an entry is added or changed.
    changed: tokio::sync::Notify,
}

/// How long a computer that moved away is remembered for its callers.
pub const MOVED_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

impl Index {
    /// Adds or replaces `entry`; returns whether anything changed.
    pub fn upsert(&self, entry: Entry) -> bool {
        self.moved.write().remove(&entry.uid);
        let mut map = self.by_uid.write();
        match map.get(&entry.uid) {
            Some(old) if *old == entry => false,
            _ => {
                map.insert(entry.uid.clone(), entry);
                drop(map);
                self.changed.notify_waiters();
                true
            }
        }
    }

    /// Waits until `done` holds, checking it again after each change of
    /// the index, for at most `limit`; returns whether it held.
    pub async fn wait_until(
        &self,
        mut done: impl FnMut() -> bool,
        limit: std::time::Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the check, so a change between the two is
            // not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done() {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done();
            }
        }
    }

    /// Whether `digest` is the credential fingerprint of a computer that
    /// moved away from this node (within [`MOVED_KEPT`]).
    pub fn departed(&self, digest: &[u8; 32]) -> bool {
        use subtle::ConstantTimeEq;
        let moved = self.moved.read();
        moved.values().any(|(e, _, at)| {
            at.elapsed() < MOVED_KEPT && e.credential.is_some_and(|p| bool::from(p.ct_eq(digest)))
        })
    }

    /// Forgets computer `uid`; returns whether it was known.
    pub fn remove(&self, uid: &str) -> bool {
        let mut map = self.by_uid.write();
        map.remove(uid).is_some()
    }

    /// Computer `uid` moved to `node`: it leaves the index, and
    /// [`Index::moved_to`] remembers where it went. Returns whether it was
    /// known.
    pub fn depart(&self, uid: &str, node: &str) -> bool {
        let Some(entry) = self.by_uid.write().remove(uid) else {
            return false;
        };
        let mut moved = self.moved.write();
        moved.retain(|_, (_, _, at)| at.elapsed() < MOVED_KEPT);
        moved.insert(
            uid.to_string(),
            (entry, node.to_string(), std::time::Instant::now()),
        );
        true
    }

    /// The computer that moved away (within [`MOVED_KEPT`]) whose
    /// credential fingerprint is `digest` and whose uid, `NS/NAME` or name
    /// is `requested`: its uid and the node it went to.
    pub fn moved_to(&self, digest: &[u8; 32], requested: &str) -> Option<(String, String)> {
        use subtle::ConstantTimeEq;
        let moved = self.moved.read();
        moved
            .values()
            .filter(|(_, _, at)| at.elapsed() < MOVED_KEPT)
            .find(|(e, _, _)| {
                e.credential.is_some_and(|p| bool::from(p.ct_eq(digest)))
                    && (e.uid == requested || e.shown() == requested || e.name == requested)
            })
            .map(|(e, node, _)| (e.uid.clone(), node.clone()))
    }

    /// Keeps only the computers whose uid `keep` accepts; returns how many
    /// were dropped.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) -> usize {
        let mut map = self.by_uid.write();
        let before = map.len();
        map.retain(|uid, _| keep(uid));
        before - map.len()
    }

    /// Computer `uid`, if known.
    pub fn get(&self, uid: &str) -> Option<Entry> {
        let map = self.by_uid.read();
        map.get(uid).cloned()
    }

    /// Every known computer, in no particular order.
    pub fn entries(&self) -> Vec<Entry> {
        let map = self.by_uid.read();
        map.values().cloned().collect()
    }

    /// Runs `f` over all entries under one read lock.
    pub fn with_entries<T>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &Entry>) -> T) -> T {
        let map = self.by_uid.read();
        f(&mut map.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uid: &str, ns: &str, name: &str) -> Entry {
        Entry {
            uid: uid.into(),
            namespace: ns.into(),
            name: name.into(),
            credential: None,
            sandbox: Default::default(),
        }
    }

    #[test]
    fn upsert_tells_a_change_and_retain_counts_removals() {
        let index = Index::default();
        assert!(index.upsert(entry("u1", "a", "demo")));
        assert!(!index.upsert(entry("u1", "a", "demo")));
        assert!(index.upsert(entry("u1", "a", "renamed")));
        index.upsert(entry("u2", "b", "demo"));
        assert_eq!(index.get("u1").unwrap().name, "renamed");
        assert_eq!(index.retain(|uid| uid != "u2"), 1);
        assert!(index.get("u2").is_none());
        assert_eq!(index.entries().len(), 1);
    }

    #[test]
    fn credential_hash_form() {
        let hex64 = "ab".repeat(32);
        assert_eq!(
            parse_credential_hash(&format!("sha256:{hex64}")),
            Some([0xab; 32])
        );
        for bad in [
            hex64.clone(),
            format!("sha256:{}", "AB".repeat(32)),
            format!("sha256:{}", &hex64[..62]),
            format!("sha1:{hex64}"),
            "sha256:".into(),
        ] {
            assert_eq!(parse_credential_hash(&bad), None, "{bad}");
        }
    }
}
