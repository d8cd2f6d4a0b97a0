//! One module per group of subcommands.

pub mod archive;
pub mod backup;
pub mod backup_store;
pub mod computers;
pub mod egress;
pub mod exec;
pub mod files;
pub mod mount;
pub mod publish;
pub mod search;
pub mod share;
pub mod snapshots;
pub mod tar_stream;
pub mod trees;
