//! Snapshot records in the store, next to the log they name positions of:
//! `computers/<id>/snapshots/<snapshot>.json` holds the record, and
//! `snapshots/<snapshot>` (created with `If-None-Match: *`) the index
//! that keeps snapshot names unique among the computers of one store and
//! lets `create --from snapshot/NAME` find the computer. A computer
//! restored on another machine finds its snapshots where its log is.

use std::collections::BTreeMap;
use std::path::Path as FsPath;

use agentcomputer_backup::{LogObject, Restored};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use super::{BackupError, BackupTarget};

/// One snapshot: a named position of a computer's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The snapshot's name (unique among the store's snapshots).
    pub name: String,
    /// The computer's name when the snapshot was taken.
    pub computer: String,
    /// The computer's backup id (its log).
    pub id: String,
    /// The log position the snapshot names.
    pub position: u64,
    /// The position of the log's snapshot object a restore at `position`
    /// starts from.
    pub base: u64,
    /// When it was taken, ns since the epoch.
    pub created_unix_nanos: i64,
    /// The database's size at `position`, in bytes.
    pub database_bytes: u64,
    /// For a restore's undo snapshot: the base of the position the
    /// restore went back to. The log after the restore is built from it,
    /// so it stays while this record does (point-in-time restores within
    /// the retention window may land after the restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind_base: Option<u64>,
}

/// What the index says of a snapshot name.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexEntry {
    id: String,
    computer: String,
}

/// Whether `name` may name a snapshot: 1-63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit (a DNS-1123 label,
/// like a computer's name, so it can name a Kubernetes object later).
pub fn is_valid_snapshot_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

impl BackupTarget {
    fn snapshot_index_key(&self, snapshot: &str) -> Path {
        self.root.clone().join("snapshots").join(snapshot)
    }

    fn snapshot_dir(&self, id: &str) -> Path {
        self.computer_prefix(id).join("snapshots")
    }

    fn snapshot_key(&self, id: &str, snapshot: &str) -> Path {
        self.snapshot_dir(id).join(format!("{snapshot}.json"))
    }

    /// Stores `record`, claiming its name in the index first. Returns
    /// `Ok(false)` (nothing written) when the name is taken.
    pub async fn put_snapshot(&self, record: &SnapshotRecord) -> Result<bool, BackupError> {
        let entry = IndexEntry {
            id: record.id.clone(),
            computer: record.computer.clone(),
        };
        let claimed = self
            .store
            .put_opts(
                &self.snapshot_index_key(&record.name),
                PutPayload::from(serde_json::to_vec(&entry).expect("plain data encodes")),
                PutOptions::from(PutMode::Create),
            )
            .await;
        match claimed {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(false),
            Err(e) => return Err(self.store_err(e)),
        }
        let json = serde_json::to_vec_pretty(record).expect("plain data encodes");
        if let Err(e) = self
            .store
            .put(
                &self.snapshot_key(&record.id, &record.name),
                PutPayload::from(json),
            )
            .await
        {
            let _ = self
                .store
                .delete(&self.snapshot_index_key(&record.name))
                .await;
            return Err(self.store_err(e));
        }
        Ok(true)
    }

    /// Which computer (backup id) holds snapshot `snapshot`, if any.
    pub async fn find_snapshot(&self, snapshot: &str) -> Result<Option<String>, BackupError> {
        let key = self.snapshot_index_key(snapshot);
        match self.store.get(&key).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(|e| self.store_err(e))?;
                let entry: IndexEntry =
                    serde_json::from_slice(&bytes).map_err(|e| BackupError::Unreadable {
                        key: key.to_string(),
                        reason: e.to_string(),
                    })?;
                Ok(Some(entry.id))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Computer `id`'s snapshot `snapshot`, if it has one of that name.
    pub async fn snapshot(
        &self,
        id: &str,
        snapshot: &str,
    ) -> Result<Option<SnapshotRecord>, BackupError> {
        let key = self.snapshot_key(id, snapshot);
        match self.store.get(&key).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(|e| self.store_err(e))?;
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| BackupError::Unreadable {
                        key: key.to_string(),
                        reason: e.to_string(),
                    })
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Computer `id`'s snapshots, oldest position first.
    pub async fn snapshots(&self, id: &str) -> Result<Vec<SnapshotRecord>, BackupError> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.snapshot_dir(id)))
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        let mut records = Vec::with_capacity(metas.len());
        for m in metas {
            let got = self
                .store
                .get(&m.location)
                .await
                .map_err(|e| self.store_err(e))?;
            let bytes = got.bytes().await.map_err(|e| self.store_err(e))?;
            let record: SnapshotRecord =
                serde_json::from_slice(&bytes).map_err(|e| BackupError::Unreadable {
                    key: m.location.to_string(),
                    reason: e.to_string(),
                })?;
            records.push(record);
        }
        records.sort_by(|a, b| (a.position, &a.name).cmp(&(b.position, &b.name)));
        Ok(records)
    }

    /// Removes computer `id`'s snapshot record and its index entry.
    pub async fn remove_snapshot(&self, id: &str, snapshot: &str) -> Result<(), BackupError> {
        for key in [
            self.snapshot_key(id, snapshot),
            self.snapshot_index_key(snapshot),
        ] {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.store_err(e)),
            }
        }
        Ok(())
    }

    /// Every object of computer `id`'s log, by position.
    pub async fn log_objects(&self, id: &str) -> Result<Vec<LogObject>, BackupError> {
        Ok(agentcomputer_backup::log_objects(&self.store, &self.computer_prefix(id)).await?)
    }

    /// The snapshot object a restore of computer `id` at `at` starts from
    /// (see [`agentcomputer_backup::base_of`]).
    pub async fn base_of(
        &self,
        id: &str,
        at: u64,
        known: &BTreeMap<u64, u64>,
    ) -> Result<u64, BackupError> {
        Ok(
            agentcomputer_backup::base_of(&self.store, &self.computer_prefix(id), at, known)
                .await?,
        )
    }

    /// The database size the object at `position` of computer `id`'s log
    /// leaves, in bytes (from its header).
    pub async fn database_bytes_at(&self, id: &str, position: u64) -> Result<u64, BackupError> {
        let key = agentcomputer_backup::object::key(&self.computer_prefix(id), position);
        let bytes = self
            .store
            .get_range(&key, 0..agentcomputer_backup::object::HEADER_BYTES as u64)
            .await
            .map_err(|e| self.store_err(e))?;
        let h = agentcomputer_backup::object::decode_header(&bytes).map_err(|reason| {
            BackupError::Log(agentcomputer_backup::Error::Corrupt {
                key: key.to_string(),
                reason,
            })
        })?;
        Ok(u64::from(h.db_pages) * u64::from(h.page_size))
    }

    /// Deletes computer `id`'s log objects below `keep_from`; returns the
    /// objects and bytes released.
    pub async fn prune_below(&self, id: &str, keep_from: u64) -> Result<(u64, u64), BackupError> {
        Ok(
            agentcomputer_backup::prune_below(&self.store, &self.computer_prefix(id), keep_from)
                .await?,
        )
    }

    /// The latest position of computer `id`'s log made at or before
    /// `at_ms` (see [`agentcomputer_backup::position_at_time`]).
    pub async fn position_at_time(&self, id: &str, at_ms: u64) -> Result<Option<u64>, BackupError> {
        Ok(
            agentcomputer_backup::position_at_time(&self.store, &self.computer_prefix(id), at_ms)
                .await?,
        )
    }

    /// Restores computer `id` as its log was at `position` into the new
    /// file `dest`, checked (see [`agentcomputer_backup::restore_at`]).
    pub async fn restore_at(
        &self,
        id: &str,
        dest: &FsPath,
        position: u64,
    ) -> Result<Restored, BackupError> {
        Ok(agentcomputer_backup::restore_at(
            &self.store,
            &self.computer_prefix(id),
            dest,
            Some(position),
        )
        .await?)
    }
}

impl BackupTarget {
    /// Makes the state of computer `id`'s log at its latest position
    /// `head` the state `to` (a [`BackupTarget::restore_at`] of an earlier
    /// position) again, with a rewind object at `head + 1` (see
    /// [`agentcomputer_backup::rewind`]). Returns the new position and its
    /// digest.
    pub async fn rewind(
        &self,
        id: &str,
        head: u64,
        to: &Restored,
    ) -> Result<(u64, [u8; 32]), BackupError> {
        Ok(agentcomputer_backup::rewind(&self.store, &self.computer_prefix(id), head, to).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_dns_labels() {
        for good in ["a", "before-restore-1700000000", "s1", &"x".repeat(63)] {
            assert!(is_valid_snapshot_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a/b", "a.b", "a b", &"x".repeat(64)] {
            assert!(!is_valid_snapshot_name(bad), "{bad}");
        }
    }
}
