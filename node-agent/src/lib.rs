//! The Agent Computer node agent.
//!
//! It keeps a [`registry::Registry`] of computers (each one SQLite database
//! driven by the `agentcomputer-fs` engine), serves the `agentcomputer.v1`
//! gRPC API over them ([`api::Service`]) and runs code on them with the
//! in-process runtimes. [`local::serve`] is the whole agent in local mode,
//! [`cluster::serve`] the agent of one Kubernetes node; the `node-agent`
//! binary wraps them with command-line parsing and signals.

pub mod admission;
pub mod api;
mod auth;
pub mod backup;
mod blocking;
mod cgroup_memory;
pub mod cluster;
mod computer;
pub mod control_addresses;
pub mod data_lock;
pub mod descriptors;
mod errors;
pub mod gate;
mod layout;
pub mod local;
mod name_locks;
mod paths;
mod private;
pub mod registry;
pub mod share;
pub mod tls;

pub use local::{LocalConfig, serve};
