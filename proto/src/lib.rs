//! The gRPC API of the Agent Computer node agent, package `agentcomputer.v1`.
//!
//! The messages and the `AgentComputer` service are generated at build time
//! from `agentcomputer/v1/agentcomputer.proto`; that file documents every call,
//! field and error convention. Use [`v1::agent_computer_client::AgentComputerClient`]
//! to call a node agent and [`v1::agent_computer_server::AgentComputerServer`]
//! to serve the API; [`v1::sandbox_runner_client::SandboxRunnerClient`] is how a
//! sandbox pod attaches to its node agent (`SandboxRunner.Attach`).

/// Version 1 of the API (`agentcomputer.v1`).
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("agentcomputer.v1");
}

pub mod codec;

/// The metadata key carrying the errno name (such as `ENOENT`) of a failed call.
pub const ERRNO_METADATA_KEY: &str = "errno";

/// Largest message the node agent accepts or sends, in bytes (4 MiB, tonic's
/// default decoding limit).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Preferred size of one data chunk in Read and Write streams (1 MiB).
pub const CHUNK_BYTES: usize = 1024 * 1024;
