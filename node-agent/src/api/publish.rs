//! Publish: commit a directory of a computer and push it to a git remote
//! (docs/git.md, "Publishing"). The git steps are `agentcomputer-git`'s;
//! the remote is reached through the computer's egress policy; the
//! credentials live in this call's memory only.

use std::time::{Duration, Instant};

use agentcomputer_git::publish::{Credentials, Publish, PublishError, publish as run_publish};
use agentcomputer_git::{Files, Invocation};
use agentcomputer_proto::v1 as pb;
use tonic::Status;

use super::git_transport::PolicyTransport;
use crate::blocking::blocking;
use crate::registry::Registry;

/// The most one file or object a publish holds whole, bytes: the shell's
/// default exec budget, so what an exec can commit can be published.
const PUBLISH_MAX_WHOLE: u64 = agentcomputer_shell::DEFAULT_MEMORY_BYTES;

/// The longest one publish may take, pushing included.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn publish(
    registry: &Registry,
    req: pb::PublishRequest,
) -> Result<pb::PublishResponse, Status> {
    if req.dir.is_empty() || !req.dir.starts_with('/') {
        return Err(Status::invalid_argument(format!(
            "dir {:?}: an absolute directory of the computer is needed (/proj)",
            req.dir
        )));
    }
    agentcomputer_git::publish::check_remote(&req.remote).map_err(to_status)?;
    let lease = registry.acquire(&req.computer).await?;
    let policy = super::exec::policy_of(&lease, &lease.settings().egress);
    let credentials =
        (!req.username.is_empty() || !req.password.is_empty()).then_some(Credentials {
            username: req.username,
            password: req.password,
        });
    let what = Publish {
        dir: req.dir,
        remote: req.remote,
        branch: (!req.branch.is_empty()).then_some(req.branch),
        message: (!req.message.is_empty()).then_some(req.message),
        credentials,
    };
    let deadline = Instant::now() + PUBLISH_TIMEOUT;
    let done = blocking(move || {
        let transport = PolicyTransport::new(policy, deadline);
        let env = |_: &str| None;
        let stop = || Instant::now() >= deadline;
        let user = agentcomputer_runtime_contract::SANDBOX_USER;
        let inv = Invocation {
            files: Files::new(lease.fs().clone(), agentcomputer_shell::SHELL_OWNER)
                .with_max_whole(PUBLISH_MAX_WHOLE),
            cwd: b"/".to_vec(),
            shown_root: String::new(),
            env: &env,
            stop: &stop,
            fallback_name: user.to_string(),
            fallback_email: format!("{user}@computer"),
            transport: Some(&transport),
        };
        run_publish(&inv, &what)
    })
    .await
    .map_err(to_status)?;
    Ok(pb::PublishResponse {
        commit: done.commit,
        committed: done.committed,
        branch: done.branch,
        output: done.output,
    })
}

fn to_status(e: PublishError) -> Status {
    match e {
        PublishError::Invalid(m) => Status::invalid_argument(m),
        PublishError::Nothing(m) => Status::failed_precondition(m),
        PublishError::Denied(m) => Status::permission_denied(m),
        PublishError::Rejected(m) => Status::aborted(m),
        // With an errno, so clients tell the remote that cannot be reached
        // from a connection to the agent that failed (which has none), as
        // for an unreachable backup store.
        PublishError::Failed(m) => crate::errors::with_errno(
            tonic::Code::Unavailable,
            m,
            crate::errors::error_name(nix::errno::Errno::EIO),
        ),
    }
}
