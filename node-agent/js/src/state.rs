//! Everything one exec's natives share, owned by the exec thread.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::{Ctx, Function, JsLifetime, Object, Persistent, Value};

use crate::event_loop::Timers;
use crate::fetch::Fetcher;
use crate::fsops::FsOps;
use crate::loader::Graph;
use crate::output::OutputSink;
use crate::stop::Stopper;

/// A rejected promise nobody handled (yet), with its reason.
pub(crate) type Rejection = (Persistent<Value<'static>>, Persistent<Value<'static>>);

pub(crate) struct ExecState {
    pub ops: FsOps,
    pub out: OutputSink,
    pub stop: Arc<Stopper>,
    pub timers: RefCell<Timers>,
    pub env: Vec<(String, String)>,
    pub argv: Vec<String>,
    /// What is left of standard input: the first reader takes it all,
    /// as from a pipe, so a later reader sees what the first left (nothing).
    pub stdin: RefCell<Vec<u8>>,
    pub fetcher: Arc<dyn Fetcher>,
    pub graph: RefCell<Graph>,
    /// The module name of the exec's source (`/workspace/[eval]`).
    pub main_name: String,
    pub memory_limit: usize,
    pub stack_limit: usize,
    /// Rejections seen by the tracker and not handled so far.
    pub rejections: RefCell<Vec<Rejection>>,
    /// The JS function that runs timer `id`'s callback.
    pub timer_hook: RefCell<Option<Persistent<Function<'static>>>>,
    /// Namespaces of the built-in modules loaded so far (`native.require`).
    pub internals: RefCell<HashMap<String, Persistent<Object<'static>>>>,
    /// Built-ins being evaluated right now (to refuse require cycles).
    pub loading: RefCell<HashSet<String>>,
}

impl ExecState {
    /// Drops every JS value the state holds. Must run before the runtime
    /// is freed (QuickJS frees the heap and a later drop would touch it).
    pub(crate) fn clear_js(&self) {
        self.rejections.borrow_mut().clear();
        self.timer_hook.borrow_mut().take();
        self.internals.borrow_mut().clear();
        self.ops.close_all();
    }

    /// Records a rejection (`handled == false`) or forgets one that got a
    /// handler later.
    pub(crate) fn track_rejection<'js>(
        &self,
        ctx: &Ctx<'js>,
        promise: Value<'js>,
        reason: Value<'js>,
        handled: bool,
    ) {
        let mut list = self.rejections.borrow_mut();
        if handled {
            list.retain(|(p, _)| {
                p.clone()
                    .restore(ctx)
                    .map(|p| p != promise)
                    .unwrap_or(false)
            });
        } else {
            list.push((
                Persistent::save(ctx, promise),
                Persistent::save(ctx, reason),
            ));
        }
    }

    /// Forgets `promise` (the caller reports its rejection itself).
    pub(crate) fn forget_rejection<'js>(&self, ctx: &Ctx<'js>, promise: &Value<'js>) {
        self.rejections.borrow_mut().retain(|(p, _)| {
            p.clone()
                .restore(ctx)
                .map(|p| &p != promise)
                .unwrap_or(false)
        });
    }

    /// The reason of the first unhandled rejection, if any.
    pub(crate) fn take_unhandled<'js>(&self, ctx: &Ctx<'js>) -> Option<Value<'js>> {
        let mut list = self.rejections.borrow_mut();
        if list.is_empty() {
            return None;
        }
        let (_, reason) = list.remove(0);
        list.clear();
        reason.restore(ctx).ok()
    }
}

/// The exec state, reachable from any `Ctx` of the exec's runtime (for
/// native modules, whose hooks get no closure).
#[derive(Clone)]
pub(crate) struct StateRef(pub Rc<ExecState>);

// SAFETY: `StateRef` holds no value tied to a `'js` lifetime: JS values
// inside are `Persistent<'static>` and are cleared before the runtime goes.
unsafe impl<'js> JsLifetime<'js> for StateRef {
    type Changed<'to> = StateRef;
}

/// The exec state of `ctx`'s runtime.
pub(crate) fn state_of(ctx: &Ctx<'_>) -> Rc<ExecState> {
    ctx.userdata::<StateRef>()
        .map(|s| s.0.clone())
        .expect("exec state is installed before any code runs")
}
