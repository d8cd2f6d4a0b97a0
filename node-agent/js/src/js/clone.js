// structuredClone (HTML "structured clone"): plain data, Date, RegExp, Map,
// Set, ArrayBuffer and views, Error types, with cycles kept.
function dataCloneError(what) {
  return new DOMException(`${what} could not be cloned.`, 'DataCloneError');
}

export function structuredClone(value, options) {
  if (arguments.length === 0) throw new TypeError("The \"value\" argument must be specified");
  const seen = new Map();
  const clone = (v) => {
    if (typeof v === 'function') throw dataCloneError(String(v).slice(0, 40));
    if (typeof v === 'symbol') throw dataCloneError(v.toString());
    if (typeof v !== 'object' || v === null) return v;
    if (seen.has(v)) return seen.get(v);
    let out;
    if (v instanceof Date) out = new Date(v.getTime());
    else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
    else if (v instanceof ArrayBuffer) out = v.slice(0);
    else if (ArrayBuffer.isView(v)) {
      const buf = clone(v.buffer);
      out = v instanceof DataView ? new DataView(buf, v.byteOffset, v.byteLength) : new (Object.getPrototypeOf(Object.getPrototypeOf(v)) === Uint8Array.prototype ? Uint8Array : v.constructor)(buf, v.byteOffset, v.length);
    } else if (v instanceof Map) { out = new Map(); seen.set(v, out); for (const [k, x] of v) out.set(clone(k), clone(x)); return out; }
    else if (v instanceof Set) { out = new Set(); seen.set(v, out); for (const x of v) out.add(clone(x)); return out; }
    else if (v instanceof Error) {
      const Ctor = { EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError }[v.name] || Error;
      out = new Ctor(v.message);
      seen.set(v, out);
      if (typeof v.stack === 'string') out.stack = v.stack;
      if ('cause' in v) out.cause = clone(v.cause);
      return out;
    } else if (v instanceof Boolean || v instanceof Number || v instanceof String) out = Object(v.valueOf());
    else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet) throw dataCloneError(Object.prototype.toString.call(v));
    else if (Array.isArray(v)) {
      out = new Array(v.length);
      seen.set(v, out);
      for (const k of Object.keys(v)) out[k] = clone(v[k]);
      return out;
    } else {
      out = {};
      seen.set(v, out);
      for (const k of Object.keys(v)) out[k] = clone(v[k]);
      return out;
    }
    seen.set(v, out);
    return out;
  };
  return clone(value);
}
