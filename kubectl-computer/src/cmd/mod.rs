//! One module per group of subcommands.

pub mod computers;
pub mod exec;
pub mod files;
pub mod mount;
pub mod search;
