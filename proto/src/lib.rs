//! The gRPC API of the Agent Computer node agent, package `agentcomputer.v1`.
//!
//! The messages and the `AgentComputer` service are generated at build time
//! from `agentcomputer/v1/agentcomputer.proto`; that file documents every call,
//! field and error convention, and [`apidoc`] renders those comments as the
//! API reference committed in `docs/api.md` (regenerate it with
//! `cargo run -p agentcomputer-proto --bin api-doc > docs/api.md`; the
//! crate's test `api_doc` fails while it is out of date). Use [`v1::agent_computer_client::AgentComputerClient`]
//! to call a node agent and [`v1::agent_computer_server::AgentComputerServer`]
//! to serve the API; [`v1::sandbox_runner_client::SandboxRunnerClient`] is how a
//! sandbox pod attaches to its node agent (`SandboxRunner.Attach`).

/// Version 1 of the API (`agentcomputer.v1`).
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("agentcomputer.v1");
}

pub mod apidoc;
pub mod codec;
mod runtime;

pub use runtime::Requested;

/// The encoded `google.protobuf.FileDescriptorSet` of
/// `agentcomputer/v1/agentcomputer.proto`, with source code info (its
/// comments), as `protox` compiled it at build time. [`apidoc`] renders the
/// API reference (`docs/api.md`) from it.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/agentcomputer_v1.fds.bin"));

/// The metadata key carrying the errno name (such as `ENOENT`) of a failed call.
pub const ERRNO_METADATA_KEY: &str = "errno";

/// gRPC metadata key of an `UNAVAILABLE` answer for a computer that was
/// handed over to another node: that node's name. The call did not run;
/// clients that find computers by their status make it again there
/// (docs/moves.md).
pub const MOVED_TO_METADATA_KEY: &str = "agentcomputer-moved-to";

/// Largest message the node agent accepts or sends, in bytes (4 MiB, tonic's
/// default decoding limit).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Preferred size of one data chunk in Read and Write streams (1 MiB).
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Revision of the `SandboxRunner.Attach` protocol this build speaks (sent
/// in `RunnerHello.protocol` by the runner). Raise it for a change an
/// older peer would misread (a new command an old runner would ignore, a
/// meaning changed), not for fields both sides may leave unset.
pub const RUNNER_PROTOCOL: u32 = 2;

/// Revisions: 1, runs with their whole stdin in `RunnerStart`; 2, adds
/// streamed stdin (`RunnerStart.stdin_stream`, `RunnerStdin`,
/// `RunnerStdinAck`), used only with runners that name revision 2.
///
/// Oldest attach protocol revision a node agent of this build serves. It
/// stays at or below the revision of the previous release, so that sandbox
/// pods started before an upgrade keep working with the upgraded agent.
pub const MIN_RUNNER_PROTOCOL: u32 = 1;

/// The revision a hello names: `protocol`, or 1 for 0 (runners built
/// before revisions were sent speak revision 1).
pub fn runner_protocol(hello: &v1::RunnerHello) -> u32 {
    hello.protocol.max(1)
}

/// Exit status of `agentcomputer-runner serve` when its node agent refuses
/// its protocol revision (FAILED_PRECONDITION); see the `SandboxRunner`
/// service. The operator knows it as
/// `agentcomputer_crds::RUNNER_EXIT_INCOMPATIBLE`.
pub const RUNNER_EXIT_INCOMPATIBLE: u8 = 3;

/// Exit status of `agentcomputer-runner serve` when the sandbox's workspace
/// mount has ended for good (`statfs` of its root fails with `ENOTCONN` or
/// `ECONNABORTED`: the node agent did not come back within the mounter's
/// grace period). The runner writes "workspace mount lost: ..." to its
/// termination message; the operator, which knows the status as
/// `agentcomputer_crds::RUNNER_EXIT_WORKSPACE_LOST`, replaces the pod.
pub const RUNNER_EXIT_WORKSPACE_LOST: u8 = 4;
