//! Module resolution and loading.
//!
//! * `./x.js`, `../x.js`, `/workspace/x.js`, `file:///workspace/x.js` load
//!   from the computer's files: relative to the importing module (the main
//!   module sits in the working directory). A specifier without an
//!   extension also tries `.js`, `.mjs`, `.json`, then `/index.js` and
//!   `/index.mjs`.
//! * `*.json` (or `with { type: "json" }`) is a JSON module whose default
//!   export is the parsed value.
//! * `node:fs`, `fs`, `node:path`, ... are the built-ins, and `git` (bare
//!   name only: it is this runtime's, not Node's).
//! * Limits: [`MAX_MODULES`] modules, [`MAX_MODULE_DEPTH`] import levels,
//!   [`MAX_MODULE_BYTES`] per source file.

use std::collections::HashMap;
use std::rc::Rc;

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Constructor, Ctx, Error, Module, Object, Result};

use agentcomputer_fs::FileKind;

use crate::internal;
use crate::natives::NativeModule;
use crate::state::ExecState;
use crate::vfs::normalize;

/// Most modules one exec may load (its own files and JSON, not built-ins).
pub const MAX_MODULES: usize = 2048;
/// Deepest chain of imports from the main module.
pub const MAX_MODULE_DEPTH: usize = 128;
/// Largest module source, in bytes.
pub const MAX_MODULE_BYTES: u64 = 16 * 1024 * 1024;

/// Extensions tried, in order, for a specifier that names no file.
const EXTENSIONS: [&str; 3] = [".js", ".mjs", ".json"];
const INDEXES: [&str; 2] = ["/index.js", "/index.mjs"];

/// What the exec has loaded: each module's import depth.
#[derive(Default)]
pub(crate) struct Graph {
    depth: HashMap<String, usize>,
}

impl Graph {
    pub(crate) fn add_main(&mut self, name: &str) {
        self.depth.insert(name.to_string(), 0);
    }
}

fn is_internal(name: &str) -> bool {
    name.starts_with("ac:") || name.starts_with("node:")
}

/// Throws `Error [code]: message` with `code` set, as Node's loader errors.
fn throw_code(ctx: &Ctx<'_>, code: &str, message: String) -> Error {
    let made = (|| -> Result<Object<'_>> {
        let ctor: Constructor = ctx.globals().get("Error")?;
        let e: Object = ctor.construct((message,))?;
        e.set("code", code)?;
        Ok(e)
    })();
    match made {
        Ok(e) => ctx.throw(e.into_value()),
        Err(e) => e,
    }
}

pub(crate) struct ModuleResolver(pub Rc<ExecState>);

impl ModuleResolver {
    fn is_file(&self, path: &str) -> bool {
        matches!(self.0.ops.vfs.resolve(path, true), Ok(n) if n.attr.kind == FileKind::RegularFile)
    }

    fn find_file(&self, path: &str) -> Option<String> {
        if self.is_file(path) {
            return Some(path.to_string());
        }
        let trimmed = path.trim_end_matches('/');
        EXTENSIONS
            .iter()
            .chain(INDEXES.iter())
            .map(|ext| format!("{trimmed}{ext}"))
            .find(|p| self.is_file(p))
    }
}

impl Resolver for ModuleResolver {
    fn resolve<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> Result<String> {
        if let Some(b) = internal::builtin_name(name) {
            return Ok(b.to_string());
        }
        if name.starts_with("ac:") {
            if is_internal(base) && internal::exists(name) {
                return Ok(name.to_string());
            }
            return Err(throw_code(
                ctx,
                "ERR_MODULE_NOT_FOUND",
                format!("Cannot find module '{name}' imported from {base}"),
            ));
        }
        let spec = name.strip_prefix("file://").unwrap_or(name);
        let is_path = spec.starts_with('/')
            || spec.starts_with("./")
            || spec.starts_with("../")
            || spec == "."
            || spec == "..";
        if !is_path {
            let hint = if name.starts_with("node:") {
                format!("No such built-in module: {name}")
            } else {
                format!(
                    "Cannot find package '{name}' imported from {base}: only relative and absolute \
                     paths, node: built-ins and git can be imported"
                )
            };
            return Err(throw_code(ctx, "ERR_MODULE_NOT_FOUND", hint));
        }
        let joined = if spec.starts_with('/') {
            spec.to_string()
        } else {
            let dir = base.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
            format!("{dir}/{spec}")
        };
        let wanted = normalize(&joined);
        let Some(found) = self.find_file(&wanted) else {
            return Err(throw_code(
                ctx,
                "ERR_MODULE_NOT_FOUND",
                format!("Cannot find module '{wanted}' imported from {base}"),
            ));
        };
        let mut graph = self.0.graph.borrow_mut();
        if !graph.depth.contains_key(&found) {
            let depth = graph.depth.get(base).copied().unwrap_or(0) + 1;
            if depth > MAX_MODULE_DEPTH {
                return Err(throw_code(
                    ctx,
                    "ERR_MODULE_GRAPH_LIMIT",
                    format!(
                        "module graph too deep: more than {MAX_MODULE_DEPTH} levels of imports at '{found}'"
                    ),
                ));
            }
            if graph.depth.len() > MAX_MODULES {
                return Err(throw_code(
                    ctx,
                    "ERR_MODULE_GRAPH_LIMIT",
                    format!("module graph too large: more than {MAX_MODULES} modules at '{found}'"),
                ));
            }
            graph.depth.insert(found.clone(), depth);
        }
        Ok(found)
    }
}

pub(crate) struct ModuleLoader(pub Rc<ExecState>);

fn wants_json(attributes: &Option<ImportAttributes<'_>>) -> bool {
    attributes
        .as_ref()
        .and_then(|a| a.get_type().ok().flatten())
        .is_some_and(|t| t == "json")
}

impl Loader for ModuleLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        attributes: Option<ImportAttributes<'js>>,
    ) -> Result<Module<'js, Declared>> {
        if name == "ac:native" {
            return Module::declare_def::<NativeModule, _>(ctx.clone(), name);
        }
        if is_internal(name) {
            return internal::load(ctx, name);
        }
        let st = &self.0;
        let node = st
            .ops
            .stat(name, true)
            .map_err(|e| throw_code(ctx, "ERR_MODULE_NOT_FOUND", e.message()))?;
        if node.attr.size > MAX_MODULE_BYTES {
            return Err(throw_code(
                ctx,
                "ERR_MODULE_TOO_LARGE",
                format!(
                    "module '{name}' is {} bytes; the limit is {MAX_MODULE_BYTES}",
                    node.attr.size
                ),
            ));
        }
        let bytes = st
            .ops
            .read_file(name, MAX_MODULE_BYTES)
            .map_err(|e| throw_code(ctx, "ERR_MODULE_NOT_FOUND", e.message()))?;
        let Ok(source) = String::from_utf8(bytes) else {
            return Err(throw_code(
                ctx,
                "ERR_INVALID_MODULE",
                format!("module '{name}' is not UTF-8 text"),
            ));
        };
        if name.ends_with(".json") || wants_json(&attributes) {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&source) {
                return Err(throw_code(
                    ctx,
                    "ERR_INVALID_JSON",
                    format!(
                        "{name}: invalid JSON at line {} column {}: {e}",
                        e.line(),
                        e.column()
                    ),
                ));
            }
            // Valid JSON is a valid JS expression (ES2019 made it a subset).
            let js = format!("export default (\n{source}\n);");
            return Module::declare(ctx.clone(), name, js);
        }
        Module::declare(ctx.clone(), name, source)
    }
}
