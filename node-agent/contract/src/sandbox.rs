//! The sandbox user.

/// uid programs run as, in every runtime: the owner of files the shell and
/// JavaScript runtimes create, the user the local container sandbox drops
/// to, and the cluster's sandbox pods' `runAsUser` (so also the owner the
/// node agent serves their files as: the PV's `agentcomputer.dev/uid`).
pub const SANDBOX_UID: u32 = 1000;
/// gid of the sandbox user (the pods' `runAsGroup` and `fsGroup`, the PV's
/// `agentcomputer.dev/gid`).
pub const SANDBOX_GID: u32 = 1000;
