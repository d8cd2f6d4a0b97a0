//! Creating, changing, deleting and listing computers, and opening one's
//! engine from its directory.

use std::io;
use std::path::{Path, PathBuf};

use agentcomputer_egress::EgressConfig;
use agentcomputer_fs::{Fs, Limits, OpenOptions, Owner, ROOT_INO, SetAttr};
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::computer::{self, Config, DB_FILE, SETTINGS_FILE, Settings, Usage};
use crate::private;

use super::*;

impl Registry {
    /// Creates computer `name` with `limits` and egress policy `egress`
    /// (validated by the caller). The directory is built under a
    /// temporary name and renamed into place, so a crash never leaves a
    /// half-made computer. Errors: `InvalidName`, `AlreadyExists`, `Io`,
    /// `Engine`.
    pub async fn create(
        &self,
        name: &str,
        limits: Limits,
        egress: EgressConfig,
    ) -> Result<ComputerInfo, RegistryError> {
        let config = Config {
            limits,
            egress,
            ..Config::default()
        };
        self.create_with(name, config, Owner::ROOT).await
    }

    /// Creates computer `name` with all of `config` (see
    /// [`Registry::create`]), its root directory owned by `root` (uid and
    /// gid as the FUSE mounts show them; [`Owner::ROOT`] in local mode, the
    /// sandbox user in a cluster, so that it can write at the volume's
    /// root). Errors: as [`Registry::create`].
    pub async fn create_with(
        &self,
        name: &str,
        config: Config,
        root: Owner,
    ) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        let limits = config.limits;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if dir.exists() {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        // A name the backup store holds is taken too (restored on first use).
        if self.stored_only(name).await?.is_some() {
            return Err(RegistryError::AlreadyExists(name.to_string()));
        }
        let backup_id = self
            .new_backup_id(name, config.display_name.as_deref())
            .await?;
        let tmp = self
            .inner
            .computers_dir
            .join(format!(".creating-{name}-{:016x}", rand::random::<u64>()));
        let owned = name.to_string();
        let settings = blocking(move || {
            let result = build_computer(&owned, &tmp, &dir, config, root, backup_id);
            if result.is_err() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            result
        })
        .await?;
        self.upload_settings(&settings).await;
        info!(
            computer = name,
            max_bytes = limits.max_bytes,
            "created computer"
        );
        let usage = settings.usage_at_close.unwrap_or(Usage {
            used_bytes: 0,
            used_inodes: 1,
            disk_bytes: 0,
        });
        Ok(ComputerInfo {
            settings,
            usage,
            open: false,
        })
    }

    /// Replaces the owner's decisions about computer `name` with `config`:
    /// `computer.json` is rewritten, and an open engine gets the new quota
    /// at once (a grown quota admits the next write; no reopen). Running
    /// execs keep the limits they started with; later ones get the new.
    /// Returns whether anything changed. Errors: `InvalidName`, `NotFound`,
    /// `Io`, `Engine` (the quota could not be stored in the database; the
    /// settings are then unchanged).
    pub async fn update(&self, name: &str, config: Config) -> Result<bool, RegistryError> {
        check_name(name)?;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        let slot = self.inner.open.lock().get(name).cloned();
        let owned = name.to_string();
        let changed = blocking(move || {
            let io_err = |source| RegistryError::Io {
                name: owned.clone(),
                source,
            };
            let mut stored = match Settings::load(&dir) {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(RegistryError::NotFound(owned.clone()));
                }
                Err(e) => return Err(io_err(e)),
            };
            let mut wanted = stored.clone();
            wanted.apply(config);
            if wanted == stored {
                return Ok(None);
            }
            if let Some(slot) = &slot {
                if slot.fs.limits() != wanted.limits() {
                    slot.fs.set_limits(wanted.limits()).map_err(|source| {
                        RegistryError::Engine {
                            name: owned.clone(),
                            source,
                        }
                    })?;
                }
                // The open engine's record says "open" (usage unknown):
                // keep it so.
                wanted.usage_at_close = None;
            }
            stored = wanted;
            stored.save(&dir).map_err(io_err)?;
            if let Some(slot) = &slot {
                *slot.settings.lock() = stored.clone();
            }
            Ok(Some(stored))
        })
        .await?;
        match changed {
            Some(stored) => {
                self.upload_settings(&stored).await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Deletes computer `name` and all its files. Its running work is
    /// cancelled; leases still held keep using the (now unlinked) database
    /// until they end. Errors: `InvalidName`, `NotFound`, `Io`.
    pub async fn delete(&self, name: &str) -> Result<(), RegistryError> {
        check_name(name)?;
        let _guard = self.inner.names.lock(name).await;
        let dir = self.dir_of(name);
        if !dir.join(SETTINGS_FILE).exists() {
            // Perhaps only in the backup store (made on another node).
            return match self.stored_only(name).await? {
                Some(settings) => self.forget_backup(name, &settings).await,
                None => Err(RegistryError::NotFound(name.to_string())),
            };
        }
        let stored = Settings::load(&dir).ok();
        let removed = self.inner.open.lock().remove(name);
        if let Some(slot) = removed {
            slot.deleted
                .store(true, std::sync::atomic::Ordering::SeqCst);
            slot.cancel.cancel();
            let served = slot.connections.lock().len();
            if served > 0 {
                warn!(
                    computer = name,
                    connections = served,
                    "deleted computer still serves handed-over FUSE connections until the mounter unmounts them"
                );
            }
            let _table = self.inner.mount_table.lock().await;
            unmount_all(&slot, &self.inner).await;
            self.save_mounts().await;
        }
        let trash = self
            .inner
            .computers_dir
            .join(format!(".deleting-{name}-{:016x}", rand::random::<u64>()));
        let owned = name.to_string();
        blocking(move || {
            // Renaming first makes the delete atomic for readers of the
            // directory; the slow removal happens out of sight.
            std::fs::rename(&dir, &trash)?;
            std::fs::remove_dir_all(&trash)
        })
        .await
        .map_err(|source| RegistryError::Io {
            name: owned,
            source,
        })?;
        if let Some(settings) = &stored {
            self.forget_backup(name, settings).await?;
        }
        info!(computer = name, "deleted computer");
        Ok(())
    }

    /// Describes computer `name` without opening it when its usage is known.
    /// Looking does not count as use: it never delays hibernation.
    /// Errors: as [`Registry::acquire`].
    pub async fn get(&self, name: &str) -> Result<ComputerInfo, RegistryError> {
        check_name(name)?;
        if let Some(lease) = self.try_lease(name, false) {
            return live_info(lease).await;
        }
        let dir = self.dir_of(name);
        let settings = match Settings::load(&dir) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Only in the backup store: described from its stored
                // settings, restored when first used.
                return match self.stored_only(name).await? {
                    Some(settings) => Ok(ComputerInfo {
                        usage: settings.usage_at_close.unwrap_or_default(),
                        settings,
                        open: false,
                    }),
                    None => Err(RegistryError::NotFound(name.to_string())),
                };
            }
            Err(source) => {
                return Err(RegistryError::Io {
                    name: name.to_string(),
                    source,
                });
            }
        };
        match settings.usage_at_close {
            Some(usage) => Ok(ComputerInfo {
                settings,
                usage,
                open: false,
            }),
            // Not closed cleanly (crash): the engine knows the truth.
            None => live_info(self.acquire(name).await?).await,
        }
    }

    /// Describes all computers, sorted by name. Entries that are not valid
    /// computers (stray files, unreadable settings) are skipped with a warning.
    pub async fn list(&self) -> Result<Vec<ComputerInfo>, RegistryError> {
        let mut names = self.names().await?;
        names.extend(self.stored_only_names().await);
        names.sort();
        names.dedup();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.get(&name).await {
                Ok(info) => out.push(info),
                // Deleted while listing.
                Err(RegistryError::NotFound(_)) => {}
                Err(err) => warn!(computer = %name, error = %err, "skipping computer in list"),
            }
        }
        Ok(out)
    }

    /// The names of all computers, sorted, without opening or reading them.
    /// Errors: `Io` when the computers directory cannot be read.
    pub async fn names(&self) -> Result<Vec<String>, RegistryError> {
        let dir = self.inner.computers_dir.clone();
        let mut names = blocking(move || -> io::Result<Vec<String>> {
            let mut names = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if let Some(name) = entry.file_name().to_str()
                    && computer::is_valid_name(name)
                    && entry.path().join(SETTINGS_FILE).exists()
                {
                    names.push(name.to_string());
                }
            }
            Ok(names)
        })
        .await
        .map_err(|source| RegistryError::Io {
            name: String::new(),
            source,
        })?;
        names.sort();
        Ok(names)
    }
}

pub(super) fn check_name(name: &str) -> Result<(), RegistryError> {
    if computer::is_valid_name(name) {
        Ok(())
    } else {
        Err(RegistryError::InvalidName(name.to_string()))
    }
}

/// Makes a computer in `tmp` and renames it to `dir`.
pub(super) fn build_computer(
    name: &str,
    tmp: &Path,
    dir: &Path,
    config: Config,
    root: Owner,
    backup_id: Option<String>,
) -> Result<Settings, RegistryError> {
    let limits = config.limits;
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    private::create_dir(tmp).map_err(io_err)?;
    let fs = Fs::create(&tmp.join(DB_FILE), limits).map_err(|source| RegistryError::Engine {
        name: name.to_string(),
        source,
    })?;
    if root != Owner::ROOT {
        let owner = SetAttr {
            uid: Some(root.uid),
            gid: Some(root.gid),
            ..SetAttr::default()
        };
        fs.setattr(ROOT_INO, &owner)
            .map_err(|source| RegistryError::Engine {
                name: name.to_string(),
                source,
            })?;
    }
    let st = fs.statfs().map_err(|source| RegistryError::Engine {
        name: name.to_string(),
        source,
    })?;
    drop(fs);
    let disk_bytes = db_file_bytes(&tmp.join(DB_FILE));
    let mut settings = Settings {
        name: name.to_string(),
        created_unix_nanos: computer::now_unix_nanos(),
        max_bytes: limits.max_bytes,
        max_inodes: limits.max_inodes,
        usage_at_close: Some(Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes,
        }),
        egress: EgressConfig::default(),
        runtimes: Default::default(),
        exec: Default::default(),
        display_name: None,
        backup_id,
        backup_resume: None,
        retention_secs: None,
    };
    settings.apply(config);
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
    Ok(settings)
}

/// Opens a computer's engine, applies its settings' limits and marks the
/// settings "open" (usage unknown until closed cleanly).
pub(super) fn open_computer(
    name: &str,
    dir: &Path,
    options: OpenOptions,
) -> Result<(Fs, Settings), RegistryError> {
    let io_err = |source| RegistryError::Io {
        name: name.to_string(),
        source,
    };
    let engine_err = |source| RegistryError::Engine {
        name: name.to_string(),
        source,
    };
    let mut settings = match Settings::load(dir) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RegistryError::NotFound(name.to_string()));
        }
        Err(e) => return Err(io_err(e)),
    };
    let fs = Fs::open_with(&dir.join(DB_FILE), options).map_err(engine_err)?;
    if fs.limits() != settings.limits() {
        fs.set_limits(settings.limits()).map_err(engine_err)?;
    }
    settings.usage_at_close = None;
    settings.save(dir).map_err(io_err)?;
    Ok((fs, settings))
}

/// Makes `dir` an empty directory of mode 0700, removing what a crashed run
/// left in it.
pub(super) fn prepare_scratch(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.exists() {
        let mut left = 0usize;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            left += 1;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        if left > 0 {
            warn!(dir = %dir.display(), entries = left, "removed scratch space left by a previous run");
        }
    } else {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Host bytes of a closed computer's database (the file plus any WAL).
pub(super) fn db_file_bytes(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    [db.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

pub(super) async fn live_info(lease: Lease) -> Result<ComputerInfo, RegistryError> {
    let name = lease.name().to_string();
    let settings = lease.settings();
    let (st, disk) = blocking(move || {
        Ok::<_, agentcomputer_fs::Error>((lease.fs().statfs()?, lease.fs().disk_usage()?))
    })
    .await
    .map_err(|source| RegistryError::Engine { name, source })?;
    Ok(ComputerInfo {
        settings,
        usage: Usage {
            used_bytes: st.used_bytes,
            used_inodes: st.used_inodes,
            disk_bytes: disk.total(),
        },
        open: true,
    })
}
