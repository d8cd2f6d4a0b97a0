// setTimeout & co. Rust keeps the schedule (ac:native timer*), this module
// keeps the callbacks and runs them when the event loop fires an id.
import native from 'ac:native';

const callbacks = new Map();

export class Timeout {
  #id; #ms; #repeat;
  constructor(id, ms, repeat) { this.#id = id; this.#ms = ms; this.#repeat = repeat; }
  ref() { native.timerRef(this.#id, true); return this; }
  unref() { native.timerRef(this.#id, false); return this; }
  hasRef() { return native.timerHasRef(this.#id); }
  refresh() { native.timerRefresh(this.#id, this.#ms); return this; }
  close() { clear(this); return this; }
  [Symbol.toPrimitive]() { return this.#id; }
  [Symbol.dispose]() { clear(this); }
  get _idleTimeout() { return this.#ms; }
  get _repeat() { return this.#repeat ? this.#ms : null; }
}

function schedule(cb, ms, args, repeat) {
  if (typeof cb !== 'function') {
    const e = new TypeError('The "callback" argument must be of type function. Received ' + typeof cb);
    e.code = 'ERR_INVALID_ARG_TYPE';
    throw e;
  }
  ms = Number(ms);
  if (!(ms >= 1 && ms <= 2147483647)) ms = 1;
  const id = native.timerAdd(ms, repeat);
  callbacks.set(id, { cb, args, repeat });
  return new Timeout(id, ms, repeat);
}

function clear(t) {
  if (t === undefined || t === null) return;
  const id = typeof t === 'object' ? t[Symbol.toPrimitive]() : Number(t);
  callbacks.delete(id);
  native.timerClear(id);
}

export function setTimeout(cb, ms, ...args) { return schedule(cb, ms, args, false); }
export function setInterval(cb, ms, ...args) { return schedule(cb, ms, args, true); }
export function setImmediate(cb, ...args) { return schedule(cb, 0, args, false); }
export { clear as clearTimeout, clear as clearInterval, clear as clearImmediate };

native.setTimerHook((id) => {
  const t = callbacks.get(id);
  if (!t) return;
  if (!t.repeat) callbacks.delete(id);
  t.cb(...t.args);
});
