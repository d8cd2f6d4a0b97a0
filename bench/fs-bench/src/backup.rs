//! The `fuse+backup` target: a mount whose database a shipper copies to a
//! directory store as the node agent copies every computer's (the engine
//! leaves its checkpoints to the shipper, whose polls are rare because the
//! engine's change notifications wake it).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{MountHandle, MountOptions, mount};
use anyhow::{Context, Result};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

/// A mounted database and its shipper.
pub(crate) struct BackedUp {
    handle: MountHandle,
    shipper: Shipper,
}

/// Makes a database under `disk`, starts its shipper into the directory
/// `store` on `runtime`, and mounts it at `mnt`. Errors: the engine's,
/// the shipper's start, the mount's.
pub(crate) fn mount_backed_up(
    runtime: &tokio::runtime::Runtime,
    disk: &Path,
    store: &Path,
    mnt: &Path,
    limits: Limits,
    opts: MountOptions,
) -> Result<BackedUp> {
    let db = disk.join("fs-backup.db");
    let fs = Fs::create(&db, limits)?;
    fs.leave_checkpoints_to_backup()?;
    std::fs::create_dir_all(store)?;
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(store)?);
    let options = Options {
        poll_interval: Duration::from_secs(1),
        writer_hold: Some(fs.writer_hold()),
        ..Options::default()
    };
    let shipper = runtime
        .block_on(Shipper::start(
            &db,
            store,
            object_store::path::Path::from("fs-bench"),
            options,
        ))
        .context("starting the shipper")?;
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));
    let handle = mount(fs, mnt, opts)?;
    Ok(BackedUp { handle, shipper })
}

impl BackedUp {
    /// Unmounts, ships what is left and stops the shipper; says how far
    /// the log went.
    pub(crate) fn finish(self, runtime: &tokio::runtime::Runtime) -> Result<String> {
        self.handle.unmount()?;
        let at = runtime
            .block_on(self.shipper.stop())
            .context("stopping the shipper")?;
        Ok(format!("{at:?}"))
    }
}
