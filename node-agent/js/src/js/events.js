// EventEmitter (node:events), the subset scripts use.
export class EventEmitter {
  #events = new Map();
  #max = 10;
  static defaultMaxListeners = 10;
  #add(name, fn, prepend, once) {
    if (typeof fn !== 'function') throw new TypeError('The "listener" argument must be of type function');
    if (this.#events.has('newListener') && name !== 'newListener') this.emit('newListener', name, fn);
    const list = this.#events.get(name) || [];
    const entry = { fn, once };
    if (prepend) list.unshift(entry); else list.push(entry);
    this.#events.set(name, list);
    return this;
  }
  on(name, fn) { return this.#add(name, fn, false, false); }
  addListener(name, fn) { return this.on(name, fn); }
  prependListener(name, fn) { return this.#add(name, fn, true, false); }
  once(name, fn) { return this.#add(name, fn, false, true); }
  prependOnceListener(name, fn) { return this.#add(name, fn, true, true); }
  off(name, fn) {
    const list = this.#events.get(name);
    if (!list) return this;
    const i = list.findIndex((e) => e.fn === fn || e.fn.listener === fn);
    if (i >= 0) list.splice(i, 1);
    if (!list.length) this.#events.delete(name);
    return this;
  }
  removeListener(name, fn) { return this.off(name, fn); }
  removeAllListeners(name) { if (name === undefined) this.#events.clear(); else this.#events.delete(name); return this; }
  emit(name, ...args) {
    const list = this.#events.get(name);
    if (!list || !list.length) {
      if (name === 'error') throw args[0] instanceof Error ? args[0] : new Error('Unhandled error. (' + String(args[0]) + ')');
      return false;
    }
    for (const e of [...list]) {
      if (e.once) this.off(name, e.fn);
      e.fn.apply(this, args);
    }
    return true;
  }
  listeners(name) { return (this.#events.get(name) || []).map((e) => e.fn); }
  rawListeners(name) { return this.listeners(name); }
  listenerCount(name) { return (this.#events.get(name) || []).length; }
  eventNames() { return [...this.#events.keys()]; }
  setMaxListeners(n) { this.#max = n; return this; }
  getMaxListeners() { return this.#max; }
}

/** events.once(emitter, name): a promise of the next event's arguments. */
export function once(emitter, name) {
  return new Promise((resolve, reject) => {
    const onError = (err) => { emitter.off(name, onEvent); reject(err); };
    const onEvent = (...args) => { if (name !== 'error') emitter.off('error', onError); resolve(args); };
    emitter.once(name, onEvent);
    if (name !== 'error') emitter.once('error', onError);
  });
}
