//! Native functions the built-in JavaScript modules call: one object,
//! `import native from "ac:native"`, reachable only from built-in modules.

mod fs;
mod git;
mod sys;
mod web;

use std::rc::Rc;

use rquickjs::function::IntoJsFunc;
use rquickjs::module::{Declarations, Exports, ModuleDef};
use rquickjs::{ArrayBuffer, Constructor, Ctx, Exception, Object, Result, TypedArray, Value};

use crate::errno::SysError;
use crate::state::{ExecState, state_of};

/// Adds function `name` to `obj`.
pub(crate) fn set_fn<'js, P, F>(obj: &Object<'js>, name: &str, f: F) -> Result<()>
where
    F: IntoJsFunc<'js, P> + 'js,
{
    let func = rquickjs::Function::new(obj.ctx().clone(), f)?.with_name(name)?;
    obj.set(name, func)
}

/// Throws `err` as Node does: an `Error` with `errno` (negative), `code`,
/// `syscall`, `path` and `dest`.
pub(crate) fn throw_sys(ctx: &Ctx<'_>, err: SysError) -> rquickjs::Error {
    let made = (|| -> Result<Value<'_>> {
        let ctor: Constructor = ctx.globals().get("Error")?;
        let e: Object = ctor.construct((err.message(),))?;
        e.set("errno", -(err.errno as i32))?;
        e.set("code", err.code())?;
        e.set("syscall", err.syscall)?;
        if let Some(p) = &err.path {
            e.set("path", p.as_str())?;
        }
        if let Some(d) = &err.dest {
            e.set("dest", d.as_str())?;
        }
        Ok(e.into_value())
    })();
    match made {
        Ok(v) => ctx.throw(v),
        Err(e) => e,
    }
}

/// Throws a `TypeError` with `message`.
pub(crate) fn type_error(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    Exception::throw_type(ctx, message)
}

/// Runs `f` on the bytes of a string (UTF-8), `Uint8Array` (also `Buffer`)
/// or `ArrayBuffer`, without copying typed arrays.
pub(crate) fn with_bytes<'js, T>(
    ctx: &Ctx<'js>,
    v: &Value<'js>,
    f: impl FnOnce(&[u8]) -> T,
) -> Result<T> {
    if let Some(s) = v.as_string() {
        let s = s.to_string()?;
        return Ok(f(s.as_bytes()));
    }
    if let Ok(ta) = TypedArray::<u8>::from_value(v.clone()) {
        // SAFETY: no JavaScript runs while `f` borrows the buffer.
        let bytes = unsafe { ta.as_bytes() }.unwrap_or(&[]);
        return Ok(f(bytes));
    }
    if let Some(ab) = ArrayBuffer::from_value(v.clone()) {
        // SAFETY: as above.
        let bytes = unsafe { ab.as_bytes() }.unwrap_or(&[]);
        return Ok(f(bytes));
    }
    Err(type_error(
        ctx,
        "expected a string, Buffer, Uint8Array or ArrayBuffer",
    ))
}

/// A new `Uint8Array` holding a copy of `bytes` in QuickJS's heap, so that
/// it counts against the exec's memory limit (a buffer handed over without
/// copying would live outside it).
pub(crate) fn u8_array<'js>(ctx: &Ctx<'js>, bytes: Vec<u8>) -> Result<Value<'js>> {
    Ok(TypedArray::<u8>::new_copy(ctx.clone(), bytes)?.into_value())
}

/// Builds the natives object of an exec.
fn build<'js>(ctx: &Ctx<'js>, st: Rc<ExecState>) -> Result<Object<'js>> {
    let obj = Object::new(ctx.clone())?;
    fs::install(&obj, &st)?;
    git::install(&obj, &st)?;
    sys::install(&obj, &st)?;
    web::install(&obj, &st)?;
    install_require(&obj, st)?;
    Ok(obj)
}

/// `native.require(name)`: the namespace of built-in module `name`, loaded
/// and evaluated on first use (synchronously: built-ins have no top-level
/// await), so globals like `Buffer` cost nothing until touched.
fn install_require<'js>(obj: &Object<'js>, st: Rc<ExecState>) -> Result<()> {
    set_fn(
        obj,
        "require",
        move |ctx: Ctx<'js>, name: String| -> Result<Object<'js>> {
            // `fs`, `node:fs`, ... name the same built-in.
            let name = match crate::internal::builtin_name(&name) {
                Some(b) => b.to_string(),
                None => name,
            };
            if let Some(ns) = st.internals.borrow().get(&name) {
                return ns.clone().restore(&ctx);
            }
            if !crate::internal::exists(&name) || name == "ac:native" {
                let msg = format!("Cannot find module '{name}'");
                let e = Exception::from_message(ctx.clone(), &msg)?;
                e.as_object().set("code", "MODULE_NOT_FOUND")?;
                return Err(e.throw());
            }
            if !st.loading.borrow_mut().insert(name.clone()) {
                return Err(type_error(
                    &ctx,
                    &format!("built-in module {name} requires itself"),
                ));
            }
            let loaded = (|| -> Result<Object<'js>> {
                let (module, promise) = crate::internal::load(&ctx, &name)?.eval()?;
                if promise.state() == rquickjs::promise::PromiseState::Rejected {
                    st.forget_rejection(&ctx, promise.as_value());
                    let _ = promise.result::<Value>();
                    return Err(rquickjs::Error::Exception);
                }
                module.namespace()
            })();
            st.loading.borrow_mut().remove(&name);
            let ns = loaded?;
            st.internals
                .borrow_mut()
                .insert(name, rquickjs::Persistent::save(&ctx, ns.clone()));
            Ok(ns)
        },
    )
}

/// The `ac:native` module.
pub(crate) struct NativeModule;

impl ModuleDef for NativeModule {
    fn declare(decl: &Declarations<'_>) -> Result<()> {
        decl.declare("default")?;
        Ok(())
    }

    fn evaluate<'js>(ctx: &Ctx<'js>, exports: &Exports<'js>) -> Result<()> {
        let st = state_of(ctx);
        exports.export("default", build(ctx, st)?)?;
        Ok(())
    }
}
