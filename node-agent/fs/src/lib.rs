//! The filesystem engine: a whole POSIX filesystem stored in one SQLite file.
//!
//! CONTRACT SKETCH (to be implemented): the public surface below is what the
//! shell runtime, the gRPC API and the FUSE server build on.
//!
//! * [`Fs`] is cheap to clone (an `Arc` inside) and `Send + Sync`; every method
//!   takes `&self` and may be called from many threads at once.
//! * Inode-level calls (`lookup`, `getattr`, `read`, `write`, ...) mirror the
//!   FUSE low-level protocol so the FUSE layer is a thin adapter.
//! * Path-level helpers (`resolve`, `stat_path`, ...) resolve a byte path
//!   inside the computer: absolute paths start at the root inode, `..` at the
//!   root stays at the root, so no path can leave the computer.
//! * Every error is an [`Error`] that carries a POSIX errno.

mod error;
mod types;

pub use error::{Error, Result};
pub use types::*;
