//! Checks of an exec request's parts, and the policy its run gets.

use std::sync::Arc;

use agentcomputer_egress::{EgressConfig, Policy};
use nix::errno::Errno;
use tonic::Status;
use tracing::warn;

use super::INLINE_PARSE_BYTES;
use crate::blocking::blocking;
use crate::errors::errno_detail;

/// The computer's egress policy. A settings file edited into an invalid
/// policy denies everything rather than failing every exec.
pub(in crate::api) fn policy_of(
    lease: &crate::registry::Lease,
    egress: &EgressConfig,
) -> Arc<Policy> {
    match Policy::new(egress.clone()) {
        Ok(policy) => Arc::new(policy),
        Err(e) => {
            warn!(computer = lease.name(), error = %e, "invalid egress policy in settings; denying all egress");
            Arc::default()
        }
    }
}

/// Parses a JavaScript run's `input_json`: empty is `null`. Errors:
/// INVALID_ARGUMENT (`EINVAL`) naming serde_json's line and column.
pub(super) async fn parse_input(text: String) -> Result<serde_json::Value, Status> {
    if text.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    let inline = text.len() <= INLINE_PARSE_BYTES;
    let parse = move || {
        serde_json::from_str(&text).map_err(|e| {
            errno_detail(
                Errno::EINVAL,
                format_args!("input_json is not valid JSON: {e}"),
            )
        })
    };
    // A message may carry megabytes of JSON; keep such parses off the
    // async workers.
    if inline {
        parse()
    } else {
        blocking(parse).await
    }
}

/// Refuses environment entries no runtime can pass on the same way: a
/// name that is empty or holds `=` or NUL, or a value that holds NUL. An
/// environment is a list of `name=value` C strings (execve(2); POSIX.1-2017
/// XBD 8.1), so the container runtime could not carry them, and the other
/// runtimes would read them differently. Errors: `EINVAL` naming the entry.
pub(super) fn check_env(env: &std::collections::HashMap<String, String>) -> Result<(), Status> {
    for (name, value) in env {
        let why = if name.is_empty() {
            "an empty name"
        } else if name.contains('=') {
            "a name containing '='"
        } else if name.contains('\0') || value.contains('\0') {
            "a NUL byte"
        } else {
            continue;
        };
        return Err(errno_detail(
            Errno::EINVAL,
            format_args!(
                "env entry {name:?} has {why}; environment names and values are C strings (name=value)"
            ),
        ));
    }
    Ok(())
}
