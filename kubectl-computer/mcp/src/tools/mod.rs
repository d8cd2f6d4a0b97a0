//! The MCP tools: `read`, `write`, `edit`, `ls`, `find`, `grep`, `delete`,
//! `exec`, `share`, `snapshot`, `restore` and `publish` on one computer, each with a description and a JSON Schema of
//! its arguments (generated from the parameter types below, whose doc
//! comments become the property descriptions).
//!
//! Every failure is a tool error (`isError: true`), never a protocol error:
//! its text leads with the errno name the node agent gave (`ENOENT: no such
//! file or directory: notes.md`), names the path, and `structuredContent`
//! carries `{error, errno, path}`. Argument mistakes found here are EINVAL.
//!
//! One idea a file: [`params`] (the arguments and their schemas),
//! [`router`] (the server: tool descriptions, the tool list, dispatch),
//! [`files`] (the file tools and `share`), [`run`] (`exec`),
//! [`checkpoints`] (`snapshot`, `restore`), [`publish`] and [`result`]
//! (how results and failures are reported).

mod checkpoints;
mod files;
mod params;
mod publish;
pub mod reference;
mod result;
mod router;
mod run;

pub use router::Tools;
