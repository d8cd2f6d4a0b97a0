//! Commands and hooks the runtime installs on bashkit's builder, replacing
//! or correcting bashkit's own where they differ from bash and coreutils.
//! One file per command.

mod caller;
mod curl;
mod curl_write_out;
mod date_time_of_day;
mod df;
mod enable;
mod environment;
mod git;
pub(crate) mod http;
mod ln;
mod ls;
mod ls_format;
mod mapfile;
mod printf_format;
mod realpath;
mod shell_stdin;
mod sleep;
mod stat;
mod stream;
mod test_cmd;
mod test_expr;
mod timeout;
mod truncate;
mod truncate_size;
mod uname;
mod wget;
mod workspace;

pub(crate) use environment::set_startup_variables;
pub(crate) use workspace::reason as error_reason;

/// The names [`install`] and [`http::install`] register: the runtime's own
/// commands, in place of bashkit's of the same name or beside them.
pub(crate) const OWN_COMMANDS: &[&str] = &[
    "cat",
    "wc",
    "head",
    "tail",
    "tee",
    "base64",
    "seq",
    "yes",
    "xxd",
    "tac",
    "rev",
    "tar",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "sleep",
    "truncate",
    "ln",
    "link",
    "ls",
    "stat",
    "test",
    "[",
    "timeout",
    "curl",
    "wget",
    "git",
    "caller",
    "mapfile",
    "readarray",
    "enable",
];

use crate::budget::ExecBudget;
use crate::engine_fs::EngineFs;
use bashkit::BashBuilder;

/// Installs this module's commands and hooks, and the exported login
/// environment of bashkit's user `sandbox` with home directory `home`, on
/// `builder`; `engine_fs` is the computer behind `/workspace`, `budget` the
/// exec's memory budget and stop flag, `scratch_file_bytes` the largest
/// file of the scratch tree, `fallback` what runs bashkit's own `tar` for
/// the forms the runtime's leaves.
pub(crate) fn install(
    builder: BashBuilder,
    engine_fs: &EngineFs,
    budget: &ExecBudget,
    home: &str,
    scratch_file_bytes: u64,
    fallback: crate::whole_input::Shared,
    network: &http::Network,
) -> BashBuilder {
    let engine = engine_fs.engine();
    let env = stream::Env {
        engine: engine_fs.clone(),
        budget: budget.clone(),
    };
    let truncate = truncate::Truncate {
        env: env.clone(),
        scratch_file_bytes,
    };
    let builder = stream::install(builder, &env, fallback)
        .command("sleep", sleep::Sleep(env.clone()))
        .command("truncate", truncate)
        .command(
            "git",
            git::Git(env.clone(), std::sync::Arc::new(network.clone())),
        );
    let user = agentcomputer_runtime_contract::SANDBOX_USER;
    environment::export_login(builder, user, home)
        .username(user)
        .hostname(uname::HOSTNAME)
        .builtin("df", Box::new(df::Df::new(engine.clone())))
        .builtin("uname", Box::new(uname::Uname))
        .builtin("ln", Box::new(ln::Ln::new(engine.clone())))
        .builtin("link", Box::new(ln::Link::new(engine.clone())))
        .builtin("ls", Box::new(ls::Ls::new(engine.clone())))
        .builtin("stat", Box::new(stat::Stat::new(engine.clone())))
        .builtin("test", Box::new(test_cmd::Test::new(engine.clone(), false)))
        .builtin("[", Box::new(test_cmd::Test::new(engine.clone(), true)))
        .builtin("timeout", Box::new(timeout::Timeout))
        .builtin("caller", Box::new(caller::Caller))
        .builtin("mapfile", Box::new(mapfile::Mapfile("mapfile")))
        .builtin("readarray", Box::new(mapfile::Mapfile("readarray")))
        .builtin("enable", Box::new(enable::Enable))
        .before_tool(Box::new(printf_format::hook))
        .before_tool(Box::new(date_time_of_day::hook))
        .before_tool(Box::new(shell_stdin::hook))
}
