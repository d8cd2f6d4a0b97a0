//! The object store every computer of this agent is backed up to, and what
//! the agent keeps there besides each computer's log.
//!
//! Layout under the URL's prefix (docs/backup.md, "In the node agent"):
//! - `computers/<id>/log/<position>`: the computer's log, written by its
//!   shipper ([`agentcomputer_backup::Shipper`]); `<id>` is the random id
//!   the computer got when it was made (its uid in a cluster), so a
//!   computer deleted and made again under the same name never shares a log.
//! - `computers/<id>/computer.json`: its settings (quota, egress, runtimes),
//!   written when it is made or changed, so that a restore brings them back.
//! - `names/<name>`: the index by name (`names/<namespace>/<name>` in a
//!   cluster), holding the id; created with `If-None-Match: *`, so two
//!   agents cannot both make a computer of one name in one bucket.
//! - `computers/<id>/snapshots/<snapshot>.json` and `snapshots/<snapshot>`:
//!   the computer's snapshots (named positions of its log) and the index
//!   that keeps their names unique (docs/snapshots.md).

mod target;
mod url;

pub use target::{
    BackupError, BackupTarget, DEFAULT_RETENTION, SnapshotRecord, is_valid_snapshot_name,
};
pub use url::BackupUrl;

/// Opens the store `url` names and proves it answers (one listing), so a
/// wrong endpoint, key or bucket stops the agent at start with the
/// store's message, and a bucket name the store likely refused to make
/// gets a hint ([`BackupUrl::naming_hint`]).
pub async fn open_checked(url: &BackupUrl) -> anyhow::Result<BackupTarget> {
    let target = BackupTarget::open(url).map_err(anyhow::Error::msg)?;
    if let Err(e) = target.probe().await {
        let hint = url
            .naming_hint()
            .map(|h| format!("; {h}"))
            .unwrap_or_default();
        anyhow::bail!("cannot use the backup store (--backup {url}): {e}{hint}");
    }
    Ok(target)
}
