//! Process-level natives: output streams, `process.*`, timers, exit.

use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rquickjs::{Ctx, Exception, Function, Object, Persistent, Result, Value, qjs};

use super::{set_fn, throw_sys, type_error, u8_array, with_bytes};
use crate::errno::SysError;
use crate::output::Stream;
use crate::state::ExecState;
use crate::stop::StopReason;

/// The origin of `process.hrtime`: when this process first ran JavaScript.
fn hr_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

trait OrUndefined<'js> {
    fn unwrap_or_default_value(self, ctx: &Ctx<'js>) -> Value<'js>;
}

impl<'js> OrUndefined<'js> for Option<Value<'js>> {
    fn unwrap_or_default_value(self, ctx: &Ctx<'js>) -> Value<'js> {
        self.unwrap_or_else(|| Value::new_undefined(ctx.clone()))
    }
}

/// Throws an error JavaScript cannot catch: the exec is ending.
pub(super) fn throw_uncatchable(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    let err = match Exception::from_message(ctx.clone(), message) {
        Ok(e) => e.into_value(),
        Err(e) => return e,
    };
    // SAFETY: `err` is a live object of this context; QuickJS takes a
    // reference for the flag and the throw.
    unsafe {
        let raw = err.as_raw();
        qjs::JS_SetUncatchableError(ctx.as_raw().as_ptr(), raw);
    }
    ctx.throw(err)
}

pub(super) fn install<'js>(obj: &Object<'js>, st: &Rc<ExecState>) -> Result<()> {
    let s = st.clone();
    // writeOut(fd, data): 1 = stdout, 2 = stderr. Throws (uncatchably)
    // once the output cap is reached.
    set_fn(
        obj,
        "writeOut",
        move |ctx: Ctx<'js>, fd: i32, data: Value<'js>| -> Result<bool> {
            let stream = if fd == 2 {
                Stream::Stderr
            } else {
                Stream::Stdout
            };
            let ok = with_bytes(&ctx, &data, |b| s.out.write(stream, b))?;
            if !ok {
                return Err(throw_uncatchable(&ctx, "output limit reached"));
            }
            Ok(true)
        },
    )?;
    let s = st.clone();
    set_fn(obj, "exit", move |ctx: Ctx<'js>, code: i32| -> Result<()> {
        s.stop.stop(StopReason::Exit(code));
        Err(throw_uncatchable(&ctx, "process.exit"))
    })?;
    let s = st.clone();
    set_fn(obj, "cwd", move || s.ops.vfs.cwd().clone())?;
    let s = st.clone();
    set_fn(obj, "chdir", move |ctx: Ctx<'js>, path: String| {
        s.ops
            .vfs
            .chdir(&path)
            .map_err(|e| throw_sys(&ctx, SysError::new(e, "chdir", &path)))
    })?;
    let s = st.clone();
    set_fn(obj, "env", move |ctx: Ctx<'js>| -> Result<Object<'js>> {
        let env = Object::new(ctx)?;
        for (k, v) in &s.env {
            env.set(k.as_str(), v.as_str())?;
        }
        Ok(env)
    })?;
    let s = st.clone();
    set_fn(obj, "argv", move || -> Vec<String> {
        let mut argv = vec!["node".to_string(), s.main_name.clone()];
        argv.extend(s.argv.iter().cloned());
        argv
    })?;
    let s = st.clone();
    set_fn(obj, "stdin", move |ctx: Ctx<'js>| {
        // Consumed once, as a pipe is; never copied on the Rust side.
        u8_array(&ctx, std::mem::take(&mut *s.stdin.borrow_mut()))
    })?;
    set_fn(obj, "hrtime", move || -> Vec<f64> {
        let d = hr_origin().elapsed();
        vec![d.as_secs() as f64, d.subsec_nanos() as f64]
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "memoryUsage",
        move |ctx: Ctx<'js>| -> Result<Vec<f64>> {
            let _ = &s;
            // SAFETY: the runtime is locked while natives run.
            let usage = unsafe {
                let mut u = std::mem::MaybeUninit::<qjs::JSMemoryUsage>::zeroed();
                qjs::JS_ComputeMemoryUsage(
                    qjs::JS_GetRuntime(ctx.as_raw().as_ptr()),
                    u.as_mut_ptr(),
                );
                u.assume_init()
            };
            Ok(vec![
                usage.malloc_size as f64,
                usage.memory_used_size as f64,
            ])
        },
    )?;
    let s = st.clone();
    set_fn(obj, "limits", move || -> Vec<f64> {
        vec![
            s.memory_limit as f64,
            s.stack_limit as f64,
            s.stop.timeout.as_secs_f64(),
        ]
    })?;

    // promiseState(p) -> [0 pending | 1 fulfilled | 2 rejected, value]
    set_fn(
        obj,
        "promiseState",
        |ctx: Ctx<'js>, p: rquickjs::Promise<'js>| -> Result<Vec<Value<'js>>> {
            use rquickjs::promise::PromiseState;
            let (state, value) = match p.state() {
                PromiseState::Pending => (0, Value::new_undefined(ctx.clone())),
                PromiseState::Resolved => (
                    1,
                    p.result::<Value>()
                        .and_then(|r| r.ok())
                        .unwrap_or_default_value(&ctx),
                ),
                PromiseState::Rejected => {
                    let _ = p.result::<Value>();
                    (2, ctx.catch())
                }
            };
            Ok(vec![Value::new_int(ctx, state), value])
        },
    )?;

    // Timers: the JS side keeps the callbacks, Rust keeps the schedule.
    let s = st.clone();
    set_fn(
        obj,
        "timerAdd",
        move |ctx: Ctx<'js>, ms: f64, repeat: bool| -> Result<u32> {
            let delay = if ms.is_finite() && ms > 0.0 {
                Duration::from_secs_f64(ms.min(2_147_483_647.0) / 1e3)
            } else {
                Duration::ZERO
            };
            s.timers
                .borrow_mut()
                .add(delay, repeat)
                .ok_or_else(|| type_error(&ctx, "too many pending timers"))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "timerClear", move |id: u32| {
        s.timers.borrow_mut().clear(id)
    })?;
    let s = st.clone();
    set_fn(obj, "timerRef", move |id: u32, on: bool| {
        s.timers.borrow_mut().set_ref(id, on)
    })?;
    let s = st.clone();
    set_fn(obj, "timerHasRef", move |id: u32| {
        s.timers.borrow().has_ref(id)
    })?;
    let s = st.clone();
    set_fn(obj, "timerRefresh", move |id: u32, ms: f64| {
        let delay = Duration::from_secs_f64(ms.clamp(0.0, 2_147_483_647.0) / 1e3);
        s.timers.borrow_mut().refresh(id, delay)
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "setTimerHook",
        move |ctx: Ctx<'js>, f: Function<'js>| {
            *s.timer_hook.borrow_mut() = Some(Persistent::save(&ctx, f));
        },
    )?;
    let _ = st;
    Ok(())
}
