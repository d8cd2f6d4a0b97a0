//! The Agent Computer operator: reconciles every `AgentComputer`
//! (agentcomputer.dev/v1alpha1) into the objects that make it real.
//!
//! For each computer it
//! - places it on a node that runs a ready node agent ([`placement`]),
//! - creates its credential Secret, its PersistentVolume (CSI driver
//!   `agentcomputer.dev`, pre-bound) and PersistentVolumeClaim, the
//!   NetworkPolicy of its sandbox, and the sandbox Pod when the container
//!   runtime is enabled ([`resources`]), all by server-side apply,
//! - reports phase, node, endpoint and conditions in its status,
//! - releases or keeps the volume when the computer is deleted (finalizer).
//!
//! The same crate ships the share-link gateway ([`share_gateway`]), which
//! routes share links from outside the cluster to the node agents.
//!
//! Two replicas can run: only the holder of a coordination.k8s.io Lease
//! reconciles ([`leader`]).

pub mod conditions;
pub mod context;
pub mod controller;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod namespace_storage;
pub mod placement;
pub mod reconciled;
pub mod relocation;
pub mod resources;
pub mod share_gateway;
pub mod snapshots;
pub mod spec_check;
pub mod status;
pub mod steps;
pub mod triggers;
pub mod writes;

pub use context::{Config, Context};
pub use error::{Error, Result};

/// Completes at the first SIGTERM (the kubelet stopping the pod) or SIGINT,
/// for the operator's and the share gateway's graceful shutdown. Panics if
/// the signal handlers cannot be installed (at start-up only).
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("shutting down");
}

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "agentcomputer-operator";
/// Finalizer the operator puts on every AgentComputer, so that it can release
/// or keep the volume before the computer goes away.
pub const FINALIZER: &str = "agentcomputer.dev/volume";
/// `app.kubernetes.io/managed-by` value of every object the operator makes.
pub const MANAGED_BY: &str = "agentcomputer-operator";
