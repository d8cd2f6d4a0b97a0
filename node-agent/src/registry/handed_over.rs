//! Serving a FUSE connection another process handed over, the one path
//! both modes take: in a cluster the mounter hands over each mount it
//! makes (`fuse_link`), and after an agent restart it, or locally the
//! descriptor holder (`holder`), hands back the live connections the
//! previous agent process served.
//!
//! A fresh connection is served by answering the kernel's `FUSE_INIT`
//! (`agentcomputer_fuse::serve_connection`). A live one is taken over with
//! the `FUSE_INIT` record its first server answered
//! (`agentcomputer_fuse::resume_connection`), over an engine that keeps
//! the files unlinked while open, which the connection's kernel may still
//! hold ([`Registry::acquire_live`]).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use agentcomputer_fuse::{ConnectionHandle, InitRecord, MountOptions};

use crate::blocking::blocking;
use crate::registry::{Lease, Registry, RegistryError};

/// How long taking a live connection over waits for a previous agent
/// process that still holds the computer's database (`EBUSY`) while it
/// exits.
const PREVIOUS_HOLDER_WAIT: Duration = Duration::from_secs(10);

/// Which connection was handed over.
#[derive(Debug, Clone, Copy)]
pub enum Handed<'a> {
    /// A mount just made, whose kernel waits for the answer to its
    /// `FUSE_INIT`.
    Fresh,
    /// A live connection an earlier server answered; `init` is its
    /// `FUSE_INIT` record as it travels (`agentcomputer_handover::init`).
    Live { init: &'a str },
}

/// Why a handed-over connection is not served.
#[derive(Debug, thiserror::Error)]
pub enum TakeOverError {
    /// The computer cannot be opened (gone, invalid name, engine error).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The `FUSE_INIT` record of a live connection is malformed.
    #[error("bad FUSE_INIT record: {0}")]
    Init(std::io::Error),
    /// The FUSE server could not start on the descriptor.
    #[error("serving the FUSE connection: {0}")]
    Serve(std::io::Error),
}

/// Serves connection `fd` of `computer` with `opts`, and returns the lease
/// it is served under and its handle (which the caller keeps with the
/// computer). Errors: see [`TakeOverError`].
pub async fn serve_handed_over(
    registry: &Registry,
    computer: &str,
    fd: OwnedFd,
    opts: MountOptions,
    handed: Handed<'_>,
) -> Result<(Lease, ConnectionHandle), TakeOverError> {
    let resume = match handed {
        Handed::Fresh => None,
        Handed::Live { init } => Some(
            agentcomputer_handover::init::decode(init)
                .and_then(InitRecord::from_bytes)
                .map_err(TakeOverError::Init)?,
        ),
    };
    let lease = match resume {
        None => registry.acquire(computer).await?,
        Some(_) => acquire_live(registry, computer).await?,
    };
    let fs = lease.fs().clone();
    let conn = blocking(move || match resume {
        Some(init) => agentcomputer_fuse::resume_connection(fs, fd, opts, init),
        None => agentcomputer_fuse::serve_connection(fs, fd, opts),
    })
    .await
    .map_err(TakeOverError::Serve)?;
    Ok((lease, conn))
}

/// [`Registry::acquire_live`], waiting up to [`PREVIOUS_HOLDER_WAIT`] for
/// a previous process that still holds the database (`EBUSY`).
async fn acquire_live(registry: &Registry, computer: &str) -> Result<Lease, RegistryError> {
    let deadline = Instant::now() + PREVIOUS_HOLDER_WAIT;
    loop {
        match registry.acquire_live(computer).await {
            Err(RegistryError::Engine { source, .. })
                if source.errno() == agentcomputer_fs::Errno::EBUSY
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}
