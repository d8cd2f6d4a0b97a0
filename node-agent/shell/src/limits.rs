//! Resource limits of one shell exec, chosen for real agent scripts.
//!
//! bashkit's defaults suit untrusted one-liners (10 000 commands, 10 000
//! iterations per loop, 10 MB of variables). Agent scripts routinely loop
//! over every line of a file or every file of a repository, so the counting
//! budgets here are high enough that the wall-clock timeout is what stops a
//! runaway script, while the memory-shaped limits still bound one exec's
//! footprint on a node shared by many computers.

use bashkit::{ExecutionLimits, FsLimits, MemoryLimits, SessionLimits};
use std::time::Duration;

/// Timeout used when a request gives `Duration::ZERO`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Output cap (stdout and stderr together, bytes) used when a request gives 0.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

/// Memory budget of one exec (bytes) in [`ShellLimits::default`]: 256 MiB.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 * 1024 * 1024;

/// Response body cap of `curl` and `wget` (bytes) in [`ShellLimits::default`].
pub const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// Limits of one exec beyond what [`crate::ExecRequest`] carries.
#[derive(Debug, Clone)]
pub struct ShellLimits {
    /// Commands run by one exec (bashkit default 10 000).
    pub max_commands: usize,
    /// Iterations of any single loop (bashkit default 10 000).
    pub max_loop_iterations: usize,
    /// Iterations of all loops together (bashkit default 1 000 000).
    pub max_total_loop_iterations: usize,
    /// Nested function calls. bashkit caps this at 16 whatever is asked,
    /// to protect its recursive evaluator's native stack.
    pub max_function_depth: usize,
    /// Bytes held by all shell variables (bashkit default 10 MB).
    pub max_variable_bytes: usize,
    /// Entries of all arrays (bashkit default 100 000).
    pub max_array_entries: usize,
    /// The exec's memory budget, bytes: file contents, pipe buffers and
    /// command output held at once (bashkit's live intermediate bytes), the
    /// largest file a command that needs its whole input (`sort`, `sed`,
    /// `jq`) may read, and the largest FIFO buffer. Checked before the
    /// allocation: a whole-file read of a larger file (by its logical size:
    /// a sparse file counts its holes) fails with `EFBIG` and a message
    /// naming this limit. The project's streaming commands (`cat`, `wc`,
    /// `head`, `tail`, `tee`, `base64`, `md5sum`, `sha*sum`, `cp`) hold
    /// only bounded buffers and handle inputs of any size.
    pub memory_bytes: u64,
    /// Bytes all commands of one exec may read in total (bashkit default
    /// 100 MB).
    pub max_input_bytes: u64,
    /// Size of the per-exec scratch tree (`/tmp`, `$HOME`), bytes.
    pub scratch_bytes: u64,
    /// Files in the scratch tree.
    pub scratch_files: u64,
    /// Largest response body `curl` or `wget` accepts, bytes; past it they
    /// fail (curl exit 63). `curl --max-filesize` may lower it.
    pub max_download_bytes: u64,
}

impl Default for ShellLimits {
    fn default() -> Self {
        Self {
            max_commands: 10_000_000,
            max_loop_iterations: 10_000_000,
            max_total_loop_iterations: 50_000_000,
            max_function_depth: 16,
            max_variable_bytes: 64 * 1024 * 1024,
            max_array_entries: 1_000_000,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_input_bytes: 16 * 1024 * 1024 * 1024,
            scratch_bytes: 64 * 1024 * 1024,
            scratch_files: 10_000,
            max_download_bytes: DEFAULT_MAX_DOWNLOAD_BYTES,
        }
    }
}

impl ShellLimits {
    /// bashkit execution limits for one exec with `timeout` and a combined
    /// output cap of `max_output_bytes`.
    pub(crate) fn execution(&self, timeout: Duration, max_output_bytes: u64) -> ExecutionLimits {
        // Each stream may carry the whole cap; the runtime enforces the
        // combined cap itself and needs to see the first byte past it.
        let per_stream = usize::try_from(max_output_bytes.saturating_add(1)).unwrap_or(usize::MAX);
        ExecutionLimits::new()
            .max_commands(self.max_commands)
            .max_loop_iterations(self.max_loop_iterations)
            .max_total_loop_iterations(self.max_total_loop_iterations)
            .max_function_depth(self.max_function_depth)
            .max_live_intermediate_bytes(self.memory_bytes)
            .max_aggregate_input_bytes(self.max_input_bytes)
            // The timeout and the byte budgets bound work; a unit budget
            // would only stop long but legitimate scans early.
            .max_work_units(u64::MAX / 2)
            .max_stdout_bytes(per_stream)
            .max_stderr_bytes(per_stream)
            .timeout(timeout)
    }

    /// bashkit memory limits for shell variables and functions.
    pub(crate) fn memory(&self) -> MemoryLimits {
        MemoryLimits::new()
            .max_total_variable_bytes(self.max_variable_bytes.min(self.memory_bytes as usize))
            .max_array_entries(self.max_array_entries)
            .max_variable_count(100_000)
    }

    /// bashkit session limits. A session is one exec here, so they repeat
    /// the per-exec command budget (bashkit's default stops at 100 000).
    pub(crate) fn session(&self) -> SessionLimits {
        SessionLimits::new().max_total_commands(self.max_commands as u64)
    }

    /// Limits of the in-memory scratch tree.
    pub(crate) fn scratch(&self) -> FsLimits {
        FsLimits::new()
            .max_total_bytes(self.scratch_bytes)
            .max_file_size(self.scratch_bytes)
            .max_file_count(self.scratch_files)
    }
}
