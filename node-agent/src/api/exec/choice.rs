//! RUNTIME_AUTO: which runtime a script goes to, and what happens when the
//! container it was sent to does not exist.

use agentcomputer_runtime_contract::Runtime;
use agentcomputer_shell::auto::{self, Decision, Route};
use tonic::Status;

use super::INLINE_PARSE_BYTES;

/// The runtime of an exec, and for RUNTIME_AUTO the decision that chose it.
pub(super) struct Choice {
    pub(super) runtime: Runtime,
    pub(super) auto: Option<Decision>,
}

impl Choice {
    /// RUNTIME_AUTO's fallback when its script was sent to the container
    /// and the computer has none (`why`): a script naming a command the
    /// shell runtime lacks is refused naming it (FAILED_PRECONDITION); one
    /// whose commands could only not be named runs in the shell runtime.
    /// Errors for any other request: FAILED_PRECONDITION with `why`.
    pub(super) fn without_container(&mut self, why: String) -> Result<(), Status> {
        let Some(decision) = self.auto.as_mut() else {
            return Err(Status::failed_precondition(why));
        };
        if let Some(name) = &decision.missing {
            return Err(Status::failed_precondition(format!(
                "runtime auto: {name}: command not found in the shell runtime, and this computer \
                 has no container runtime to run it ({why}); nothing was run"
            )));
        }
        decision.reason = format!(
            "{}, but this computer has no container runtime ({why})",
            decision.reason
        );
        decision.route = Route::Shell;
        self.runtime = Runtime::Shell;
        Ok(())
    }
}

pub(super) fn runtime_of(route: Route) -> Runtime {
    match route {
        Route::Shell => Runtime::Shell,
        Route::Container => Runtime::Container,
    }
}

/// RUNTIME_AUTO's decision for `script` ([`agentcomputer_shell::auto`]);
/// a long script is parsed on the blocking pool.
pub(super) async fn decide(script: &str) -> Decision {
    if script.len() <= INLINE_PARSE_BYTES {
        return auto::decide(script);
    }
    let script = script.to_string();
    match tokio::task::spawn_blocking(move || auto::decide(&script)).await {
        Ok(decision) => decision,
        Err(e) => Decision {
            route: Route::Container,
            reason: format!("the script could not be read before it ran ({e})"),
            missing: None,
        },
    }
}
