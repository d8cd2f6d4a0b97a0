//! The outbound network policy of a computer, and the HTTP client the
//! in-process runtimes use to obey it.
//!
//! * [`EgressConfig`] is the stored shape, the same JSON as the
//!   AgentComputer resource's `spec.egress`; [`Policy::new`] validates it.
//! * [`Policy::check`] decides one TCP destination (host name, IP, port):
//!   deny-all by default, cloud metadata refused unless `allowMetadata`,
//!   the node's own loopback reachable only through a loopback CIDR rule,
//!   the node's other addresses ([`node`]) only through a rule naming them,
//!   and control addresses ([`control`]: the kubelet, the API server, the
//!   agent's own ports, ...) through no rule at all.
//! * [`resolve()`] looks a name up once and keeps the allowed addresses;
//!   [`http::send`] connects to exactly those, so DNS rebinding between the
//!   check and the connection is not possible, and re-checks every
//!   redirect hop.
//!
//! Semantics and limits: `docs/egress.md`.

mod config;
pub mod control;
mod host;
pub mod http;
pub mod node;
mod policy;
mod resolve;

pub use config::{CidrConfig, EgressConfig, Mode, PortConfig, Protocol};
pub use policy::{Denial, DenyReason, MAX_PORTS, MAX_RULES, Policy, PolicyError, is_metadata};
pub use resolve::{ResolveError, Target, resolve};
