// node:util (the parts scripts commonly use)
import native from 'ac:native';
const { inspect, format, formatWithOptions } = native.require('ac:inspect');
const { TextEncoder, TextDecoder } = native.require('ac:encoding');

export { inspect, format, formatWithOptions, TextEncoder, TextDecoder };

export function promisify(fn) {
  if (typeof fn !== 'function') throw new TypeError('The "original" argument must be of type function');
  if (fn[promisify.custom]) return fn[promisify.custom];
  return function (...args) {
    return new Promise((resolve, reject) => {
      fn.call(this, ...args, (err, ...values) => (err ? reject(err) : resolve(values.length > 1 ? values : values[0])));
    });
  };
}
promisify.custom = Symbol.for('nodejs.util.promisify.custom');

export function callbackify(fn) {
  return function (...args) {
    const cb = args.pop();
    fn.apply(this, args).then((v) => cb(null, v), (e) => cb(e));
  };
}

export function deprecate(fn) { return fn; }
export function inherits(ctor, superCtor) {
  Object.setPrototypeOf(ctor.prototype, superCtor.prototype);
  Object.setPrototypeOf(ctor, superCtor);
  ctor.super_ = superCtor;
}
export function isDeepStrictEqual(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (a instanceof Date) return a.getTime() === b.getTime();
  if (a instanceof Map || a instanceof Set) {
    if (a.size !== b.size) return false;
    if (a instanceof Set) { for (const v of a) if (!b.has(v)) return false; return true; }
    for (const [k, v] of a) if (!b.has(k) || !isDeepStrictEqual(v, b.get(k))) return false;
    return true;
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && isDeepStrictEqual(a[k], b[k]));
}
export const types = {
  isPromise: (v) => v instanceof Promise,
  isDate: (v) => v instanceof Date,
  isRegExp: (v) => v instanceof RegExp,
  isMap: (v) => v instanceof Map,
  isSet: (v) => v instanceof Set,
  isTypedArray: (v) => ArrayBuffer.isView(v) && !(v instanceof DataView),
  isUint8Array: (v) => v instanceof Uint8Array,
  isArrayBuffer: (v) => v instanceof ArrayBuffer,
  isNativeError: (v) => v instanceof Error,
  isAsyncFunction: (v) => typeof v === 'function' && v.constructor && v.constructor.name === 'AsyncFunction',
};
export const isArray = Array.isArray;
export default { inspect, format, formatWithOptions, promisify, callbackify, deprecate, inherits, isDeepStrictEqual, types, isArray, TextEncoder, TextDecoder };
