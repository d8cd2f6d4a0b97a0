//! Tar archives of a computer's filesystem, over the engine.
//!
//! - [`Guard`] unpacks an archive from anyone under one directory: no
//!   absolute name, no `..`, nothing written through a symlink, hard links
//!   only to files the same archive made, no devices or FIFOs, names within
//!   `PATH_MAX`, at most [`METADATA_BUDGET`] bytes of headers per entry.
//!   Each file is written unnamed and linked in once its data is all there,
//!   so a failure leaves only whole entries behind.
//! - [`unpack_whole`] unpacks with a [`Guard`] all or nothing: into a
//!   hidden directory, merged into the target only once every entry is in.
//! - [`Packer`] writes a tree as GNU tar without following any symlink
//!   under it, with an iterative walk (any depth costs heap, not stack).
//! - [`list`] reads an archive's entries without unpacking them, under the
//!   same metadata budget.
//!
//! All three read and write `std::io` streams a step at a time: memory
//! stays bounded whatever the archive's size (a step of file data, one
//! entry's headers, and per entry a name for hard links and directories).
//! The node agent's Export and Import calls and the shell runtime's `tar`
//! use them.

mod error;
mod list;
mod metered;
mod names;
mod pack;
mod staged;
mod unpack;

pub use error::ArchiveError;
pub use list::{Listed, list};
pub use metered::METADATA_BUDGET;
pub use names::{MAX_NAME_BYTES, components};
pub use pack::Packer;
pub use staged::{STAGING_PREFIX, unpack_whole};
pub use unpack::{Guard, Unpacked};

/// Bytes of file data copied per step, either way (1 MiB).
pub const STEP_BYTES: usize = 1024 * 1024;
