//! The one answer of the shell runtime for a command it does not have.
//!
//! bashkit words its `command not found` three ways (plain, with a hint
//! that package managers or compilers are "not available in the sandbox",
//! with "Did you mean" suggestions), none of which says where the command
//! does exist. Every name that no builtin, function or script answers
//! reaches bashkit's last-chance resolver before that message; this
//! module's resolver answers each one the same way, as bash does (exit 127)
//! plus the runtimes that run real binaries:
//!
//! ```text
//! bash: python3: command not found (the shell runtime runs built-in commands only; --runtime container or --runtime auto runs real binaries)
//! ```
//!
//! A name with a `/` is a file run by its path and never reaches the
//! resolver: bash's `No such file or directory` stays.

use bashkit::{Builtin, BuiltinContext, CommandResolver, ExecResult, async_trait};
use std::sync::Arc;

/// bash's status for a command it cannot find.
pub const EXIT_NOT_FOUND: i32 = 127;

/// The stderr line (without its newline) for a command `name` the shell
/// runtime does not have.
pub fn not_found_message(name: &str) -> String {
    format!(
        "bash: {name}: command not found (the shell runtime runs built-in commands only; \
         --runtime container or --runtime auto runs real binaries)"
    )
}

/// Answers every name no other dispatch route found.
pub(crate) struct NotFound;

impl CommandResolver for NotFound {
    fn resolve(&self, name: &str) -> Option<Arc<dyn Builtin>> {
        Some(Arc::new(Missing(name.to_string())))
    }
}

/// One missing command, answered.
struct Missing(String);

#[async_trait]
impl Builtin for Missing {
    async fn execute(&self, _ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        Ok(ExecResult::err(
            format!("{}\n", not_found_message(&self.0)),
            EXIT_NOT_FOUND,
        ))
    }
}
