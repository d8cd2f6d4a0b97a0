//! The sandbox user.

/// The sandbox user's name as a string literal, for `concat!` (an
/// `/etc/passwd` written at compile time); elsewhere use [`SANDBOX_USER`].
#[macro_export]
macro_rules! sandbox_user {
    () => {
        "sandbox"
    };
}

/// The name of the sandbox user ([`SANDBOX_UID`]) in every runtime:
/// `whoami`, `id` and `$USER` in the shell runtime, `os.userInfo()` in the
/// JavaScript runtime, `/etc/passwd` and `$USER` of the container runtime,
/// and the user of the cluster's sandbox image.
pub const SANDBOX_USER: &str = sandbox_user!();

/// uid programs run as, in every runtime: the owner of files the shell and
/// JavaScript runtimes create, the user the local container sandbox drops
/// to, and the cluster's sandbox pods' `runAsUser` (so also the owner the
/// node agent serves their files as: the PV's `agentcomputer.dev/uid`).
pub const SANDBOX_UID: u32 = 1000;
/// gid of the sandbox user (the pods' `runAsGroup` and `fsGroup`, the PV's
/// `agentcomputer.dev/gid`).
pub const SANDBOX_GID: u32 = 1000;
