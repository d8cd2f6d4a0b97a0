//! The node agent calls the tools make, written once for the tools and the
//! CLI's commands alike: [`files`] (listing, reading, writing, creating and
//! removing), [`search`] (glob and grep requests), [`exec`] (the run
//! request and its size check), [`publish`] (credentials, directory and
//! remote checks of a publish).

pub mod exec;
pub mod files;
pub mod publish;
pub mod search;
