//! Continuous backup of a computer's database to S3-compatible object storage.
//!
//! See docs/backup.md for the design: what is shipped, the object format,
//! fencing, and restore.

pub mod store;

pub use store::{S3Config, s3_store};
