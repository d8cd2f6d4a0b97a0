//! The built-in modules written in JavaScript (`src/js/`), compiled to
//! QuickJS bytecode once per process and loaded from it by every exec, so a
//! fresh runtime does not parse them again.

use std::collections::HashMap;
use std::sync::OnceLock;

use std::cell::RefCell;
use std::rc::Rc;

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::{Declared, WriteOptions};
use rquickjs::{Context, Ctx, Error, Module, Result, Runtime};

use crate::natives::NativeModule;

/// `(module name, source)` of every built-in module.
const SOURCES: &[(&str, &str)] = &[
    ("ac:bootstrap", include_str!("js/bootstrap.js")),
    ("ac:inspect", include_str!("js/inspect.js")),
    ("ac:buffer", include_str!("js/buffer.js")),
    ("ac:encoding", include_str!("js/encoding.js")),
    ("ac:url", include_str!("js/url.js")),
    ("ac:timers", include_str!("js/timers.js")),
    ("ac:events", include_str!("js/events.js")),
    ("ac:process", include_str!("js/process.js")),
    ("ac:clone", include_str!("js/clone.js")),
    ("ac:fetch", include_str!("js/fetch.js")),
    ("ac:fs", include_str!("js/fs.js")),
    ("ac:path", include_str!("js/path.js")),
    ("node:fs", include_str!("js/node_fs.js")),
    ("node:fs/promises", include_str!("js/node_fs_promises.js")),
    ("node:path", include_str!("js/node_path.js")),
    ("node:buffer", include_str!("js/node_buffer.js")),
    ("node:url", include_str!("js/node_url.js")),
    ("node:process", include_str!("js/node_process.js")),
    ("node:timers", include_str!("js/node_timers.js")),
    (
        "node:timers/promises",
        include_str!("js/node_timers_promises.js"),
    ),
    ("node:events", include_str!("js/node_events.js")),
    ("node:util", include_str!("js/node_util.js")),
    ("node:crypto", include_str!("js/node_crypto.js")),
    ("node:os", include_str!("js/node_os.js")),
    ("node:module", include_str!("js/node_module.js")),
    ("ac:git", include_str!("js/git.js")),
];

/// The canonical name of a built-in specifier (`fs` -> `node:fs`). The
/// runtime's own modules, which are not Node's, have a bare name only
/// (`git`, never `node:git`).
pub(crate) fn builtin_name(spec: &str) -> Option<&'static str> {
    if spec == "git" {
        return Some("ac:git");
    }
    let bare = spec.strip_prefix("node:").unwrap_or(spec);
    Some(match bare {
        "fs" => "node:fs",
        "fs/promises" => "node:fs/promises",
        "path" | "path/posix" => "node:path",
        "buffer" => "node:buffer",
        "url" => "node:url",
        "process" => "node:process",
        "timers" => "node:timers",
        "timers/promises" => "node:timers/promises",
        "events" => "node:events",
        "util" => "node:util",
        "crypto" => "node:crypto",
        "os" => "node:os",
        "module" => "node:module",
        _ => return None,
    })
}

/// Whether `name` is a built-in module (`ac:native` is made in Rust).
pub(crate) fn exists(name: &str) -> bool {
    name == "ac:native" || SOURCES.iter().any(|(n, _)| *n == name)
}

/// The bytecode of every built-in module, compiled on first use.
pub(crate) fn bytecode() -> &'static HashMap<&'static str, Vec<u8>> {
    static CODE: OnceLock<HashMap<&'static str, Vec<u8>>> = OnceLock::new();
    CODE.get_or_init(|| compile_all().expect("built-in modules compile"))
}

type Compiled = Rc<RefCell<HashMap<&'static str, Vec<u8>>>>;

fn source_of(name: &str) -> Option<(&'static str, &'static str)> {
    SOURCES.iter().find(|(n, _)| *n == name).copied()
}

fn compile_one<'js>(
    ctx: &Ctx<'js>,
    name: &'static str,
    source: &str,
    out: &Compiled,
) -> Result<Module<'js, Declared>> {
    let module = Module::declare(ctx.clone(), name, source).map_err(|e| {
        let detail = ctx.catch();
        let msg = detail
            .as_object()
            .and_then(|o| o.get::<_, String>("message").ok())
            .unwrap_or_else(|| e.to_string());
        Error::new_loading_message(name, msg)
    })?;
    let options = WriteOptions {
        strip_source: true,
        ..WriteOptions::default()
    };
    out.borrow_mut().insert(name, module.write(options)?);
    Ok(module)
}

/// Resolves and compiles the built-ins among themselves; QuickJS loads a
/// module's imports while compiling it.
struct CompileLoader(Compiled);

impl Resolver for CompileLoader {
    fn resolve<'js>(
        &mut self,
        _: &Ctx<'js>,
        _: &str,
        name: &str,
        _: Option<ImportAttributes<'js>>,
    ) -> Result<String> {
        Ok(builtin_name(name).unwrap_or(name).to_string())
    }
}

impl Loader for CompileLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _: Option<ImportAttributes<'js>>,
    ) -> Result<Module<'js, Declared>> {
        if name == "ac:native" {
            return Module::declare_def::<NativeModule, _>(ctx.clone(), name);
        }
        let (name, source) = source_of(name)
            .ok_or_else(|| Error::new_loading_message(name, "no such built-in module"))?;
        compile_one(ctx, name, source, &self.0)
    }
}

fn compile_all() -> Result<HashMap<&'static str, Vec<u8>>> {
    let rt = Runtime::new()?;
    let out: Compiled = Default::default();
    rt.set_loader(CompileLoader(out.clone()), CompileLoader(out.clone()));
    let ctx = Context::full(&rt)?;
    ctx.with(|ctx| {
        for (name, source) in SOURCES {
            if !out.borrow().contains_key(name) {
                compile_one(&ctx, name, source, &out)?;
            }
        }
        Ok::<_, Error>(())
    })?;
    let map = out.borrow().clone();
    Ok(map)
}

/// Declares built-in module `name` in `ctx` from its bytecode.
pub(crate) fn load<'js>(ctx: &Ctx<'js>, name: &str) -> Result<Module<'js, Declared>> {
    let code = bytecode()
        .get(name)
        .ok_or_else(|| Error::new_loading_message(name, "no such built-in module"))?;
    // SAFETY: the bytes were written by `Module::write` of this same QuickJS
    // build, and live for the whole process (QuickJS may keep pointers into
    // them: they are read as ROM data).
    unsafe { Module::load(ctx.clone(), code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_compiles() {
        let code = bytecode();
        assert_eq!(code.len(), SOURCES.len());
        for (name, _) in SOURCES {
            assert!(!code[name].is_empty(), "{name}");
        }
    }

    #[test]
    fn os_user_info_is_the_sandbox_user_of_every_runtime() {
        let (_, os) = SOURCES.iter().find(|(n, _)| *n == "node:os").unwrap();
        let user = agentcomputer_runtime_contract::SANDBOX_USER;
        let (uid, gid) = (
            agentcomputer_runtime_contract::SANDBOX_UID,
            agentcomputer_runtime_contract::SANDBOX_GID,
        );
        assert!(
            os.contains(&format!("uid: {uid}, gid: {gid}, username: '{user}'")),
            "node:os userInfo() names another user than {user} ({uid}:{gid})"
        );
    }

    #[test]
    fn builtin_names() {
        assert_eq!(builtin_name("fs"), Some("node:fs"));
        assert_eq!(builtin_name("node:fs/promises"), Some("node:fs/promises"));
        assert_eq!(builtin_name("node:path/posix"), Some("node:path"));
        assert_eq!(builtin_name("lodash"), None);
        assert_eq!(builtin_name("git"), Some("ac:git"));
        assert_eq!(builtin_name("node:git"), None);
        for n in ["node:fs", "node:path", "node:os", "node:crypto"] {
            assert!(exists(n));
        }
    }
}
