//! Forks and imports: a new computer made from a snapshot's position,
//! from another computer's state now, or from an archive
//! (docs/snapshots.md).

use agentcomputer_fs::Fs;
use tracing::info;

use crate::backup::{BackupError, is_valid_snapshot_name};
use crate::blocking::blocking;
use crate::computer::{self, Config, DB_FILE, Settings, Usage};

use super::backed_up::backup_err;
use super::snapshots::SnapshotSource;
use super::*;

impl Registry {
    /// Makes computer `new` from `source`: a snapshot's position, or
    /// another computer's state now (a fork). The new computer has the
    /// source's files, quota, egress policy and runtime settings, a log of
    /// its own, and changes independently. Errors: `AlreadyExists`,
    /// `SnapshotNotFound`, `NotFound` (the source computer),
    /// `NoSnapshots`, `InvalidName`, the store's.
    pub async fn create_from(
        &self,
        new: &str,
        source: &SnapshotSource,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(new)?;
        let started = Instant::now();
        let (id, position, mut settings) = match source {
            SnapshotSource::Snapshot(snap) => {
                let b = self.snapshot_store(new)?;
                let err = backup_err(new);
                let not_found = || RegistryError::SnapshotNotFound {
                    snapshot: snap.clone(),
                    computer: None,
                };
                if !is_valid_snapshot_name(snap) {
                    return Err(RegistryError::InvalidSnapshotName(snap.clone()));
                }
                let id = b
                    .target
                    .find_snapshot(snap)
                    .await
                    .map_err(&err)?
                    .ok_or_else(not_found)?;
                let record = b
                    .target
                    .snapshot(&id, snap)
                    .await
                    .map_err(&err)?
                    .ok_or_else(not_found)?;
                let settings = match self.settings_of_log(&record.computer, &id).await {
                    Ok(s) => s,
                    Err(e) => return Err(e),
                };
                (id, record.position, settings)
            }
            SnapshotSource::Computer(from) => {
                check_name(from)?;
                let b = self.snapshot_store(from)?;
                let lease = self.acquire(from).await?;
                let settings = lease.settings();
                let id = settings
                    .backup_id
                    .clone()
                    .ok_or_else(|| RegistryError::NoSnapshots(from.to_string()))?;
                let fs = lease.fs().clone();
                blocking(move || fs.flush())
                    .await
                    .map_err(|source| RegistryError::Engine {
                        name: from.to_string(),
                        source,
                    })?;
                let position = self.sync(from).await?.position;
                drop(lease);
                let _ = b;
                (id, position, settings)
            }
        };
        let b = self.snapshot_store(new)?;
        let _guard = self.inner.names.lock(new).await;
        let dir = self.dir_of(new);
        if dir.exists() || self.stored_only(new).await?.is_some() {
            return Err(RegistryError::AlreadyExists(new.to_string()));
        }
        let new_id = self
            .new_backup_id(new, None)
            .await?
            .expect("a backup store is configured");
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{new}-{:016x}", rand::random::<u64>()));
        let made: Result<Settings, RegistryError> = async {
            let io_err = |source| RegistryError::Io {
                name: new.to_string(),
                source,
            };
            {
                let tmp = tmp.clone();
                blocking(move || private::create_dir(&tmp))
                    .await
                    .map_err(io_err)?;
            }
            b.target
                .restore_at(&id, &tmp.join(DB_FILE), position)
                .await
                .map_err(backup_err(new))?;
            settings.name = new.to_string();
            settings.created_unix_nanos = computer::now_unix_nanos();
            settings.display_name = None;
            settings.backup_id = Some(new_id.clone());
            settings.backup_resume = None;
            let tmp = tmp.clone();
            let dir = dir.clone();
            let owned = new.to_string();
            blocking(move || place_computer(&owned, &tmp, &dir, settings)).await
        }
        .await;
        let settings = match made {
            Ok(s) => s,
            Err(e) => {
                let _ = blocking(move || std::fs::remove_dir_all(&tmp)).await;
                let _ = b.target.forget(new, &new_id).await;
                return Err(e);
            }
        };
        self.upload_settings(&settings).await;
        info!(
            computer = new,
            source = ?source,
            position,
            ms = started.elapsed().as_millis() as u64,
            "created computer from a snapshot"
        );
        let usage = settings.usage_at_close.unwrap_or_default();
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }

    /// The settings of the computer whose log is `id`: its directory's
    /// when it is here, else those stored beside the log.
    pub(super) async fn settings_of_log(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Settings, RegistryError> {
        if let Ok(s) = Settings::load(&self.dir_of(name))
            && s.backup_id.as_deref() == Some(id)
        {
            return Ok(s);
        }
        let b = self.snapshot_store(name)?;
        let json = b.target.load_settings(id).await.map_err(backup_err(name))?;
        serde_json::from_slice(&json).map_err(|e| RegistryError::Backup {
            name: name.to_string(),
            source: BackupError::Unreadable {
                key: b
                    .target
                    .computer_prefix(id)
                    .join("computer.json")
                    .to_string(),
                reason: e.to_string(),
            },
        })
    }

    /// A path in the agent's private scratch space for a database being
    /// uploaded ([`Registry::import`]).
    pub fn import_path(&self, name: &str) -> PathBuf {
        self.inner
            .scratch_dir
            .join(format!("import-{name}-{:016x}.db", rand::random::<u64>()))
    }

    /// Makes computer `name` from the database file `file` (a copy made
    /// by Backup, uploaded into [`Registry::import_path`]), which is
    /// checked first (`PRAGMA integrity_check` and the engine's check) and
    /// moved, never copied. `limits` replaces the quota the file holds
    /// when given; the egress policy is `egress`. The file is removed on
    /// any error. Errors: `BadImport`, `AlreadyExists`, `InvalidName`,
    /// `Io`, the store's (registering the name).
    pub async fn import(
        &self,
        name: &str,
        file: PathBuf,
        limits: Option<agentcomputer_fs::Limits>,
        egress: agentcomputer_egress::EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        let result = self.import_inner(name, &file, limits, egress).await;
        let _ = std::fs::remove_file(&file);
        result
    }

    pub(super) async fn import_inner(
        &self,
        name: &str,
        file: &std::path::Path,
        limits: Option<agentcomputer_fs::Limits>,
        egress: agentcomputer_egress::EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        {
            let file = file.to_path_buf();
            blocking(move || agentcomputer_backup::check_database(&file))
                .await
                .map_err(|e| RegistryError::BadImport {
                    name: name.to_string(),
                    reason: format!("the file is not a sound computer database: {e}"),
                })?;
        }
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if dir.exists() || self.stored_only(name).await?.is_some() {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        let backup_id = self.new_backup_id(name, None).await?;
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{name}-{:016x}", rand::random::<u64>()));
        let made = {
            let tmp = tmp.clone();
            let file = file.to_path_buf();
            let owned = name.to_string();
            let backup_id = backup_id.clone();
            blocking(move || {
                let io_err = |source| RegistryError::Io {
                    name: owned.clone(),
                    source,
                };
                private::create_dir(&tmp).map_err(io_err)?;
                std::fs::rename(&file, tmp.join(DB_FILE)).map_err(io_err)?;
                let own_limits = Fs::open(&tmp.join(DB_FILE))
                    .map_err(|source| RegistryError::Engine {
                        name: owned.clone(),
                        source,
                    })?
                    .limits();
                let mut settings = Settings {
                    name: owned.clone(),
                    created_unix_nanos: computer::now_unix_nanos(),
                    max_bytes: 0,
                    max_inodes: 0,
                    usage_at_close: None,
                    egress: Default::default(),
                    runtimes: Default::default(),
                    exec: Default::default(),
                    display_name: None,
                    backup_id,
                    backup_resume: None,
                    retention_secs: None,
                };
                settings.apply(Config {
                    limits: limits.unwrap_or(own_limits),
                    egress,
                    ..Config::default()
                });
                place_computer(&owned, &tmp, &dir, settings)
            })
            .await
        };
        let settings = match made {
            Ok(s) => s,
            Err(e) => {
                let _ = blocking(move || std::fs::remove_dir_all(&tmp)).await;
                if let (Some(b), Some(id)) = (self.inner.backup.get(), backup_id) {
                    let _ = b.target.forget(name, &id).await;
                }
                return Err(e);
            }
        };
        self.upload_settings(&settings).await;
        info!(
            computer = name,
            "created computer from an imported database"
        );
        let usage = settings.usage_at_close.unwrap_or_default();
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }
}

/// Finishes a computer whose database is at `tmp/fs.db`: applies the
/// settings' quota to the database, records its usage, writes the
/// settings and renames `tmp` to `dir` (durably).
fn place_computer(
    name: &str,
    tmp: &std::path::Path,
    dir: &std::path::Path,
    mut settings: Settings,
) -> Result<Settings, RegistryError> {
    let engine_err = |source| RegistryError::Engine {
        name: name.to_string(),
        source,
    };
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    let db = tmp.join(DB_FILE);
    {
        let fs = Fs::open(&db).map_err(engine_err)?;
        if fs.limits() != settings.limits() {
            fs.set_limits(settings.limits()).map_err(engine_err)?;
        }
        let st = fs.statfs().map_err(engine_err)?;
        drop(fs);
        settings.usage_at_close = Some(Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes: db_file_bytes(&db),
        });
    }
    settings.save(tmp).map_err(io_err)?;
    std::fs::rename(tmp, dir).map_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::AlreadyExists | io::ErrorKind::DirectoryNotEmpty
        ) {
            RegistryError::AlreadyExists(name.to_string())
        } else {
            io_err(e)
        }
    })?;
    std::fs::File::open(dir.parent().unwrap_or(dir))
        .and_then(|d| d.sync_all())
        .map_err(io_err)?;
    Ok(settings)
}
