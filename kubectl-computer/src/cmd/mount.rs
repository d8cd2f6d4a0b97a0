//! `mount`, `unmount`: host FUSE mounts made by a local node agent.

use std::path::Path;

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::{CliError, Result};

/// `dir` as an absolute path, taken from this process's working directory
/// (the node agent has its own). Not resolved further: the agent checks it.
fn absolute(dir: &Path) -> Result<String> {
    let abs =
        std::path::absolute(dir).map_err(|e| CliError::new(format!("{}: {e}", dir.display())))?;
    abs.into_os_string()
        .into_string()
        .map_err(|p| CliError::new(format!("{}: not valid UTF-8", p.display())))
}

pub async fn mount(client: &mut Client, name: String, dir: &Path, nonempty: bool) -> Result<()> {
    let host_path = absolute(dir)?;
    client
        .mount(pb::MountRequest {
            computer: name.clone(),
            host_path: host_path.clone(),
            nonempty,
        })
        .await?;
    outln!("computer {name} mounted at {host_path}");
    Ok(())
}

pub async fn unmount(client: &mut Client, name: String, dir: &Path) -> Result<()> {
    let host_path = absolute(dir)?;
    client
        .unmount(pb::UnmountRequest {
            computer: name.clone(),
            host_path: host_path.clone(),
        })
        .await?;
    outln!("computer {name} unmounted from {host_path}");
    Ok(())
}
