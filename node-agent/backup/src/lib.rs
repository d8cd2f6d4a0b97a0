//! Continuous backup of a computer's database to S3-compatible object storage.
//!
//! [`Shipper::start`] ships every committed transaction of one database
//! (SQLite, WAL mode) as it commits; [`restore`] brings the latest state
//! back into a new file. See docs/backup.md for the design: what is
//! shipped, the object format, fencing, restore and measurements.

pub mod error;
pub mod object;
pub mod restore;
pub mod shipper;
pub mod store;
mod tail;
pub mod wal;
mod wal_index;

pub use error::{Error, Result};
pub use restore::{
    LogObject, Restored, base_of, catch_up, check_database, log_objects, position_at_time,
    prune_below, restore, restore_at, rewind,
};
pub use shipper::{Options, Position, Resume, Shipper, Wake};
pub use store::{S3Config, s3_store};
