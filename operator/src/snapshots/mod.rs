//! The reconciler of ComputerSnapshot (docs/snapshots.md, "In a cluster").
//!
//! A snapshot is taken once: the operator finds the computer
//! `spec.computer` of the snapshot's namespace, reads its token from its
//! credential Secret, and asks the node agent serving it (its
//! `status.endpoint`) for the snapshot `cs-<uid of the ComputerSnapshot>`
//! ([`agentcomputer_crds::snapshot_handle`]), then writes what the agent
//! answered into the status (`readyToUse`, `time`, `size`, ...). Until
//! then the `Ready` condition says why not; the reasons are
//! [`agentcomputer_crds::snapshot_reasons`].
//!
//! With `deletionPolicy: Delete` (the default) the snapshot gets an
//! ownerReference to its computer, so Kubernetes' garbage collector
//! deletes it with the computer; `Retain` gives it none. Deleting a
//! ComputerSnapshot runs the finalizer `agentcomputer.dev/snapshot`: the
//! agent deletes the snapshot (and the log only it pinned) while its
//! computer is there; once the computer is gone there is nobody to ask,
//! and its record stays in the backup store with the computer's log.

mod agent;
mod status;

use std::sync::Arc;
use std::time::Duration;

use agentcomputer_crds::{
    AgentComputer, ComputerSnapshot, SnapshotDeletionPolicy, snapshot_handle, snapshot_reasons,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

pub use agent::AgentCall;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::{FIELD_MANAGER, resources};

/// Finalizer of every ComputerSnapshot.
pub const SNAPSHOT_FINALIZER: &str = "agentcomputer.dev/snapshot";

/// How soon a snapshot waiting for its computer (or an agent that
/// failed it) is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// How soon a snapshot whose computer does not exist is looked at again.
const NOT_FOUND_RETRY: Duration = Duration::from_secs(30);

/// Runs the ComputerSnapshot controller until `shutdown` completes. It
/// also watches AgentComputers, so a snapshot waiting for its computer
/// goes on as soon as the computer is served.
pub async fn run(
    client: kube::Client,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let snapshots = Api::<ComputerSnapshot>::all(client.clone());
    let controller = Controller::new(snapshots, watcher::Config::default().any_semantic());
    let store = controller.store();
    controller
        .watches(
            Api::<AgentComputer>::all(client),
            watcher::Config::default().any_semantic(),
            move |computer| {
                let ns = computer.namespace();
                let name = computer.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|s| s.namespace() == ns && s.spec.computer == name)
                    .map(|s| kube::runtime::reflector::ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::warn!(error = %e, "snapshot controller error");
            }
        })
        .await;
}

/// One ComputerSnapshot through the finalizer protocol.
pub async fn reconcile(s: Arc<ComputerSnapshot>, ctx: Arc<Context>) -> Result<Action> {
    let ns = s
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<ComputerSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, SNAPSHOT_FINALIZER, s, |ev| async {
        match ev {
            Finalizer::Apply(s) => take(&s, &ctx, &ns).await,
            Finalizer::Cleanup(s) => release(&s, &ctx, &ns).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Retry policy after a failed reconcile.
pub fn error_policy(s: Arc<ComputerSnapshot>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(snapshot = %s.name_any(), namespace = ?s.namespace(), error = %err, "snapshot reconcile failed");
    Action::requeue(RETRY)
}

/// The computer of `s`, when it exists and is the one `s` was taken of.
async fn computer_of(
    s: &ComputerSnapshot,
    ctx: &Context,
    ns: &str,
) -> Result<Option<AgentComputer>> {
    let computers: Api<AgentComputer> = Api::namespaced(ctx.client.clone(), ns);
    let found = computers.get_opt(&s.spec.computer).await?;
    let taken_of = s.status.as_ref().and_then(|st| st.computer_uid.as_deref());
    Ok(found.filter(|c| taken_of.is_none() || c.metadata.uid.as_deref() == taken_of))
}

/// Connects to the agent serving `c` with its token; `Err` words why it
/// cannot be reached yet (the ComputerNotReady message).
async fn agent_for(
    c: &AgentComputer,
    ctx: &Context,
    ns: &str,
) -> Result<std::result::Result<AgentCall, String>> {
    let st = c.status.clone().unwrap_or_default();
    let (Some(endpoint), Some(uid)) = (st.endpoint.as_deref(), c.metadata.uid.as_deref()) else {
        return Ok(Err(format!(
            "computer {} is not served by a node agent yet",
            c.name_any()
        )));
    };
    let secret_name = st
        .credential_secret
        .clone()
        .unwrap_or_else(|| resources::secret_name(c));
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let token = secrets
        .get_opt(&secret_name)
        .await?
        .and_then(|s| s.data)
        .and_then(|d| {
            d.get("token")
                .map(|t| String::from_utf8_lossy(&t.0).trim().to_string())
        });
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(Err(format!(
            "computer {} has no credential yet (Secret {secret_name})",
            c.name_any()
        )));
    };
    Ok(
        AgentCall::connect(endpoint, ctx.config.agent_tls.as_ref(), uid, &token)
            .await
            .map_err(|s| s.message().to_string()),
    )
}

/// Takes the snapshot once (see the module docs).
async fn take(s: &ComputerSnapshot, ctx: &Context, ns: &str) -> Result<Action> {
    let old = s.status.clone().unwrap_or_default();
    let Some(computer) = computer_of(s, ctx, ns).await? else {
        if let (Some(_), Some(uid)) = (&old.snapshot_handle, old.computer_uid.as_deref()) {
            // Taken, and its computer is gone since (deletionPolicy
            // Retain): the snapshot lives on with the computer's data,
            // which its volume keeps under reclaim policy Retain; under
            // Delete the node agent deleted its log, snapshots included.
            let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
            let volume = pvs.get_opt(&resources::pv_name_of(uid)).await?;
            let kept = volume.is_some_and(|pv| pv.metadata.deletion_timestamp.is_none());
            let why = if kept {
                format!(
                    "computer {} was deleted; its volume, and the log this snapshot is a position of, were kept (reclaimPolicy Retain)",
                    s.spec.computer
                )
            } else {
                format!(
                    "computer {} was deleted with its data, and with it the log this snapshot was a position of",
                    s.spec.computer
                )
            };
            let next = status::waiting(&old, snapshot_reasons::COMPUTER_DELETED, why, kept);
            status::write(ctx, s, ns, &old, next).await?;
            return Ok(Action::requeue(NOT_FOUND_RETRY));
        }
        let why = format!("computer {} not found in namespace {ns}", s.spec.computer);
        let next = status::waiting(&old, snapshot_reasons::COMPUTER_NOT_FOUND, why, false);
        status::write(ctx, s, ns, &old, next).await?;
        return Ok(Action::requeue(NOT_FOUND_RETRY));
    };
    own(s, &computer, ctx, ns).await?;
    if old.ready_to_use == Some(true) {
        return Ok(Action::await_change());
    }
    let mut call = match agent_for(&computer, ctx, ns).await? {
        Ok(call) => call,
        Err(why) => {
            let next = status::waiting(&old, snapshot_reasons::COMPUTER_NOT_READY, why, false);
            status::write(ctx, s, ns, &old, next).await?;
            return Ok(Action::requeue(RETRY));
        }
    };
    let handle = snapshot_handle(&s.uid().unwrap_or_default());
    let taken = match call.snapshot(&handle).await {
        // An earlier try was taken but its answer lost.
        Err(e) if e.code() == tonic::Code::AlreadyExists => match call.find(&handle).await {
            Ok(Some(info)) => Ok(info),
            Ok(None) => Err(e),
            Err(e) => Err(e),
        },
        other => other,
    };
    match taken {
        Ok(info) => {
            let node = computer.status.as_ref().and_then(|st| st.node.clone());
            let next = status::taken(&old, &info, &handle, &computer, node);
            status::write(ctx, s, ns, &old, next).await?;
            tracing::info!(snapshot = %s.name_any(), namespace = ns, computer = %s.spec.computer, position = info.position, "snapshot taken");
            Ok(Action::await_change())
        }
        Err(e) => {
            let reason = if e.code() == tonic::Code::FailedPrecondition
                && e.message().contains("no backup store")
            {
                snapshot_reasons::NO_BACKUP_STORE
            } else {
                snapshot_reasons::SNAPSHOT_FAILED
            };
            let why = format!("the node agent answered {:?}: {}", e.code(), e.message());
            let next = status::waiting(&old, reason, why, false);
            status::write(ctx, s, ns, &old, next).await?;
            Ok(Action::requeue(RETRY))
        }
    }
}

/// Gives `s` an ownerReference to its computer under deletionPolicy
/// Delete, and none under Retain (a policy changed later is followed).
async fn own(s: &ComputerSnapshot, c: &AgentComputer, ctx: &Context, ns: &str) -> Result<()> {
    let Some(owner) = c.controller_owner_ref(&()).map(|mut o| {
        o.controller = Some(false);
        o.block_owner_deletion = Some(false);
        o
    }) else {
        return Ok(());
    };
    let refs = s.metadata.owner_references.clone().unwrap_or_default();
    let has = refs.iter().any(|r| r.uid == owner.uid);
    let want = s.spec.deletion_policy == SnapshotDeletionPolicy::Delete;
    if has == want {
        return Ok(());
    }
    let next: Vec<OwnerReference> = if want {
        refs.into_iter().chain([owner]).collect()
    } else {
        refs.into_iter().filter(|r| r.uid != owner.uid).collect()
    };
    let api: Api<ComputerSnapshot> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"metadata": {
        "ownerReferences": next,
        "resourceVersion": s.resource_version(),
    }});
    api.patch(
        &s.name_any(),
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(())
}

/// The finalizer's cleanup: deletes the snapshot at the agent while its
/// computer is there to ask.
async fn release(s: &ComputerSnapshot, ctx: &Context, ns: &str) -> Result<Action> {
    let handle = s.status.as_ref().and_then(|st| st.snapshot_handle.clone());
    let Some(handle) = handle else {
        return Ok(Action::await_change());
    };
    let Some(computer) = computer_of(s, ctx, ns).await? else {
        return Ok(Action::await_change());
    };
    if computer.metadata.deletion_timestamp.is_some() {
        // Going: its node agent deletes its data, snapshots included.
        return Ok(Action::await_change());
    }
    let mut call = match agent_for(&computer, ctx, ns).await? {
        Ok(call) => call,
        Err(why) => return Err(Error::Agent(why)),
    };
    call.delete(&handle)
        .await
        .map_err(|e| Error::Agent(format!("{:?}: {}", e.code(), e.message())))?;
    tracing::info!(snapshot = %s.name_any(), namespace = ns, "snapshot deleted at its node agent");
    Ok(Action::await_change())
}

/// Takes snapshot `handle` of computer `from` (namespace `ns`) at its
/// node agent, for a computer made from it (a fork); one taken by an
/// earlier try counts. `Err` inside says why it could not be taken yet.
pub async fn take_for_copy(
    ctx: &Context,
    from: &AgentComputer,
    ns: &str,
    handle: &str,
) -> Result<std::result::Result<(), String>> {
    let mut call = match agent_for(from, ctx, ns).await? {
        Ok(call) => call,
        Err(why) => return Ok(Err(why)),
    };
    Ok(match call.snapshot(handle).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(e) => Err(format!(
            "its node agent did not take a snapshot to copy: {:?}: {}",
            e.code(),
            e.message()
        )),
    })
}

/// Deletes snapshot `handle` of computer `from` (namespace `ns`) at its
/// node agent; one already gone is no error. Errors: the agent cannot be
/// reached, or refuses.
pub async fn delete_for_copy(
    ctx: &Context,
    from: &AgentComputer,
    ns: &str,
    handle: &str,
) -> Result<()> {
    let mut call = agent_for(from, ctx, ns).await?.map_err(Error::Agent)?;
    call.delete(handle)
        .await
        .map_err(|e| Error::Agent(format!("{:?}: {}", e.code(), e.message())))
}
