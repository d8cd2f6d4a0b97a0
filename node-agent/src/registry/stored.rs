//! A computer as the backup store keeps it, for an agent that has no
//! directory for it (made on another node, or this node's disk was lost):
//! where the store keeps it, restoring it into a new directory, describing
//! and listing it without restoring, replacing a copy older than the
//! store's log, and removing it from the store when it is deleted.

use std::time::Instant;

use tracing::{info, warn};

use crate::backup::BackupError;
use crate::blocking::blocking;
use crate::computer::{DB_FILE, SETTINGS_FILE, Settings};
use crate::private;

use super::backed_up::{BackupIds, backup_err};
use super::*;

impl Registry {
    /// The id the store keeps computer `name` under, if it has it: by the
    /// index (local mode), or its own name when that is the id (a
    /// cluster's uid; its settings object says whether it is there).
    pub(super) async fn stored_id(&self, name: &str) -> Result<Option<String>, RegistryError> {
        let Some(b) = self.inner.backup.get() else {
            return Ok(None);
        };
        match b.ids {
            BackupIds::Random => b.target.lookup(name).await.map_err(backup_err(name)),
            BackupIds::DirectoryName => match b.target.load_settings(name).await {
                Ok(_) => Ok(Some(name.to_string())),
                Err(BackupError::Unreadable { .. }) => Ok(None),
                Err(e) => Err(backup_err(name)(e)),
            },
        }
    }

    /// Restores computer `name` from the store into a new directory, if the
    /// store has it (called under the computer's lock, when it has no
    /// directory here). Errors: `NotFound` when the store has no such
    /// computer; `Backup` naming a damaged or missing object; `Io`.
    pub(super) async fn restore_from_backup(&self, name: &str) -> Result<(), RegistryError> {
        let Some(b) = self.inner.backup.get() else {
            return Err(RegistryError::NotFound(name.to_string()));
        };
        let err = backup_err(name);
        let Some(id) = self.stored_id(name).await? else {
            return Err(RegistryError::NotFound(name.to_string()));
        };
        let started = Instant::now();
        let json = b.target.load_settings(&id).await.map_err(&err)?;
        let mut settings: Settings =
            serde_json::from_slice(&json).map_err(|e| RegistryError::Backup {
                name: name.to_string(),
                source: BackupError::Unreadable {
                    key: b
                        .target
                        .computer_prefix(&id)
                        .join("computer.json")
                        .to_string(),
                    reason: e.to_string(),
                },
            })?;
        settings.name = name.to_string();
        settings.backup_id = Some(id.clone());
        settings.usage_at_close = None;
        // Another node's close: it says nothing of the file made here
        // (whose checks opened it, so it may differ from the log's head).
        settings.backup_resume = None;
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{name}-{:016x}", rand::random::<u64>()));
        let io_err = |source| RegistryError::Io {
            name: name.to_string(),
            source,
        };
        {
            let tmp = tmp.clone();
            blocking(move || private::create_dir(&tmp))
                .await
                .map_err(io_err)?;
        }
        let restored = b.target.restore(&id, &tmp.join(DB_FILE)).await;
        let dir = self.dir_of(name);
        let placed = match restored {
            Ok(r) => {
                let tmp = tmp.clone();
                let exact_at = r.exact.then_some((r.position, r.digest));
                blocking(move || {
                    // A file the checks left as the log made it continues
                    // the log (no new snapshot) and can be caught up later.
                    settings.backup_resume = exact_at.and_then(|(position, digest)| {
                        let at = agentcomputer_backup::Position {
                            position,
                            digest,
                            ..Default::default()
                        };
                        super::backed_up::resume_record(&tmp.join(DB_FILE), at)
                    });
                    settings.save(&tmp)?;
                    std::fs::rename(&tmp, &dir)?;
                    // The rename is durable before the computer serves.
                    std::fs::File::open(dir.parent().unwrap_or(&dir))?.sync_all()
                })
                .await
                .map(|()| r)
                .map_err(io_err)
            }
            Err(e) => Err(err(e)),
        };
        match placed {
            Ok(r) => {
                info!(
                    computer = name,
                    id = %id,
                    position = r.position,
                    snapshot = r.snapshot,
                    bytes = u64::from(r.db_pages) * u64::from(r.page_size),
                    ms = started.elapsed().as_millis() as u64,
                    "restored computer from the backup store"
                );
                Ok(())
            }
            Err(e) => {
                let _ = blocking(move || std::fs::remove_dir_all(&tmp)).await;
                Err(e)
            }
        }
    }

    /// Removes this node's copy of computer `name` (older than its backup
    /// log), so the next open restores it. Called under the computer's
    /// lock with its engine closed.
    pub(super) async fn discard_local_copy(&self, name: &str) -> Result<(), RegistryError> {
        let dir = self.dir_of(name);
        let trash = self
            .inner
            .computers_dir
            .join(format!(".deleting-{name}-{:016x}", rand::random::<u64>()));
        blocking(move || {
            std::fs::rename(&dir, &trash)?;
            std::fs::remove_dir_all(&trash)
        })
        .await
        .map_err(|source| RegistryError::Io {
            name: name.to_string(),
            source,
        })
    }

    /// Whether the store has computer `name` while this agent has no
    /// directory for it; its stored settings if so (usage as of its last
    /// close anywhere).
    pub(super) async fn stored_only(&self, name: &str) -> Result<Option<Settings>, RegistryError> {
        let Some(b) = self.inner.backup.get() else {
            return Ok(None);
        };
        if self.dir_of(name).join(SETTINGS_FILE).exists() {
            return Ok(None);
        }
        let err = backup_err(name);
        let Some(id) = self.stored_id(name).await? else {
            return Ok(None);
        };
        let json = b.target.load_settings(&id).await.map_err(&err)?;
        let mut settings: Settings = serde_json::from_slice(&json).map_err(|e| {
            err(BackupError::Unreadable {
                key: format!("{}/computer.json", b.target.computer_prefix(&id)),
                reason: e.to_string(),
            })
        })?;
        settings.name = name.to_string();
        settings.backup_id = Some(id);
        Ok(Some(settings))
    }

    /// Names the store's index has that this agent has no directory for
    /// (local mode, where index names are computer names).
    pub(super) async fn stored_only_names(&self) -> Vec<String> {
        let Some(b) = self.inner.backup.get() else {
            return Vec::new();
        };
        if b.ids != BackupIds::Random {
            return Vec::new();
        }
        match b.target.names().await {
            Ok(names) => names
                .into_iter()
                .filter(|n| {
                    crate::computer::is_valid_name(n)
                        && !self.dir_of(n).join(SETTINGS_FILE).exists()
                })
                .collect(),
            Err(e) => {
                warn!(error = %e, "cannot list the backup store's computers");
                Vec::new()
            }
        }
    }

    /// Removes a deleted computer's backup (its log, settings and index entry).
    pub(super) async fn forget_backup(
        &self,
        name: &str,
        settings: &Settings,
    ) -> Result<(), RegistryError> {
        let (Some(b), Some(id)) = (self.inner.backup.get(), settings.backup_id.as_deref()) else {
            return Ok(());
        };
        b.target
            .forget(&self.index_name(name, Some(settings)), id)
            .await
            .map_err(backup_err(name))
    }
}
