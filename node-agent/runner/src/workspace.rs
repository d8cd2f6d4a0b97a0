//! Watching the workspace mount: the sandbox's `/workspace` is a FUSE mount
//! served by the node agent. While the agent is away, calls on it wait in
//! the kernel (the mounter keeps the connection for the next agent); when
//! no agent comes back within the mounter's grace period the connection is
//! ended for good, and every call on the mount fails with `ENOTCONN` (or
//! `ECONNABORTED` for one that was waiting). A pod's containers bind that
//! dead mount and cannot get it back in place: only a new pod gets a new
//! one. So the runner checks the workspace's root with `statfs(2)` every
//! [`CHECK_INTERVAL`] on a thread of its own (the call may block for as
//! long as the agent is away: that is waiting, not lost) and reports the
//! first `ENOTCONN` or `ECONNABORTED`; any other error is logged once and
//! the checks go on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;

use crate::log;

/// Time between two checks of the workspace root.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Whether `e` means the workspace's FUSE connection has ended for good
/// (fs/fuse/dev.c: `ENOTCONN` once the connection is aborted,
/// `ECONNABORTED` for a request that was waiting when it was).
pub(crate) fn is_lost(e: Errno) -> bool {
    matches!(e, Errno::ENOTCONN | Errno::ECONNABORTED)
}

/// The message the runner ends with when the workspace mount is lost.
pub(crate) fn lost_message(workspace: &Path, e: Errno) -> String {
    format!(
        "workspace mount lost: statfs {}: {e}; the node agent did not come back within \
         the mounter's grace period, and the pod must be recreated to get its files back",
        workspace.display(),
    )
}

/// Starts the checking thread; the receiver gets the message when the
/// mount is lost (and nothing while it lives). Errors: the thread cannot
/// be started.
pub(crate) fn watch(workspace: PathBuf) -> std::io::Result<tokio::sync::oneshot::Receiver<String>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("workspace-watch".into())
        .spawn(move || {
            let mut reported = None;
            loop {
                match nix::sys::statfs::statfs(&workspace) {
                    Ok(_) => reported = None,
                    Err(e) if is_lost(e) => {
                        let _ = tx.send(lost_message(&workspace, e));
                        return;
                    }
                    Err(e) => {
                        if reported != Some(e) {
                            log!("statfs {}: {e}; checking again", workspace.display());
                            reported = Some(e);
                        }
                    }
                }
                if tx.is_closed() {
                    return;
                }
                std::thread::sleep(CHECK_INTERVAL);
            }
        })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_ended_connection_counts_as_lost() {
        assert!(is_lost(Errno::ENOTCONN));
        assert!(is_lost(Errno::ECONNABORTED));
        for e in [Errno::EIO, Errno::EINTR, Errno::ENOENT, Errno::EACCES] {
            assert!(!is_lost(e), "{e}");
        }
        let m = lost_message(Path::new("/workspace"), Errno::ENOTCONN);
        assert!(
            m.starts_with("workspace mount lost: statfs /workspace: "),
            "{m}"
        );
    }
}
