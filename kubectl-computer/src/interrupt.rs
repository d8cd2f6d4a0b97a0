//! The end of a long-running command (`port-forward`, `mcp --listen`):
//! SIGINT (Ctrl-C), SIGTERM (`kill`, a supervisor) or SIGHUP (its
//! terminal closed), so that each ends by returning and its temporary
//! files are removed on the way out, whichever way it was asked to stop.

use tokio::signal::unix::{SignalKind, signal};

/// Returns at the first SIGINT, SIGTERM or SIGHUP. A signal whose handler
/// cannot be installed is not waited for.
pub async fn interrupted() {
    let wait = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = wait(SignalKind::interrupt()) => {}
        () = wait(SignalKind::terminate()) => {}
        () = wait(SignalKind::hangup()) => {}
    }
}
