//! The runtime contract of Agent Computer, written once.
//!
//! Every runtime (the in-process shell and JavaScript runtimes, the
//! container runtime on a host or in a sandbox pod through the runner)
//! promises its callers the same things, and the node agent, the CLI and
//! the operator rely on them:
//!
//! - [`Runtime`]: the three runtimes and the one name each goes by
//!   (`shell`, `javascript`, `container`);
//! - [`exit`]: the exit statuses a runtime reports when it, not the
//!   program, ended a run (124 timeout, 125 could not start, 130
//!   cancelled, 141 output cap);
//! - [`OutputChunk`]: a piece of a run's output on stdout or stderr, in
//!   the order the program produced it;
//! - [`SANDBOX_UID`] / [`SANDBOX_GID`] / [`SANDBOX_USER`]: the user programs
//!   run as and whose files they create, and its one name, in every runtime
//!   and in the cluster's sandbox pods;
//! - [`human_bytes`] / [`human_quantity`]: how a byte count is shown to
//!   people, in a runtime's messages and in every other crate's.
//!
//! The crate has no dependencies, so that the static runner binary can use
//! it too.

mod bytes;
pub mod exit;
mod output;
mod runtime;
mod sandbox;

/// The longest run any runtime allows (the API's `timeout_ms` cap, the
/// CLI's `exec --timeout`): one hour.
pub const MAX_EXEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

pub use bytes::{human_bytes, human_quantity};
pub use exit::{EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_START_FAILED, EXIT_TIMEOUT, Stopped};
pub use output::OutputChunk;
pub use runtime::{Runtime, UnknownRuntime};
pub use sandbox::{SANDBOX_GID, SANDBOX_UID, SANDBOX_USER};
