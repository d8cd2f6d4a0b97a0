//! Commands and hooks the runtime installs on bashkit's builder, replacing
//! or correcting bashkit's own where they differ from bash and coreutils.
//! One file per command.

mod curl;
mod curl_write_out;
pub(crate) mod http;
mod ln;
mod ls;
mod ls_format;
mod printf_format;
mod stat;
mod wget;
mod workspace;

use agentcomputer_fs::Fs;
use bashkit::BashBuilder;

/// Installs this module's commands and hooks on `builder`; `engine` is the
/// computer behind `/workspace`.
pub(crate) fn install(builder: BashBuilder, engine: &Fs) -> BashBuilder {
    builder
        .builtin("ln", Box::new(ln::Ln::new(engine.clone())))
        .builtin("link", Box::new(ln::Link::new(engine.clone())))
        .builtin("ls", Box::new(ls::Ls::new(engine.clone())))
        .builtin("stat", Box::new(stat::Stat::new(engine.clone())))
        .before_tool(Box::new(printf_format::hook))
}
