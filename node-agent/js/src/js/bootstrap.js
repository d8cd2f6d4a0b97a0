// Installs the globals of an exec before its module runs.
import native from 'ac:native';

// Everything but the console is loaded on first use: a fresh runtime per
// exec pays only for what the code touches.
const req = (name) => native.require(name);
const format = (...a) => req('ac:inspect').format(...a);
const inspect = (v, o) => req('ac:inspect').inspect(v, o);
export const formatError = (e) => req('ac:inspect').formatError(e);

const g = globalThis;
function define(name, value) {
  Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
}
function lazy(name, module, key = name) {
  Object.defineProperty(g, name, {
    get() { const v = req(module)[key]; define(name, v); return v; },
    set(v) { define(name, v); },
    configurable: true,
    enumerable: false,
  });
}

// Node-style stacks: "Name: message" then the frames.
Error.prepareStackTrace = (err, frames) => {
  let head;
  try { head = String(err); } catch { head = 'Error'; }
  if (!frames.length) return head;
  return head + '\n' + frames.map((f) => {
    const fn = f.getFunctionName();
    const where = `${f.getFileName()}:${f.getLineNumber()}:${f.getColumnNumber()}`;
    return fn && fn !== '<anonymous>' ? `    at ${fn} (${where})` : `    at ${where}`;
  }).join('\n');
};

const counts = new Map();
const timersByLabel = new Map();
let indent = '';
function out(fd, args) {
  let text = format(...args);
  if (indent) text = indent + text.split('\n').join('\n' + indent);
  native.writeOut(fd, text + '\n');
}
const console = {
  log: (...a) => out(1, a),
  info: (...a) => out(1, a),
  debug: (...a) => out(1, a),
  warn: (...a) => out(2, a),
  error: (...a) => out(2, a),
  trace: (...a) => out(2, ['Trace' + (a.length ? ': ' + format(...a) : '') + '\n' + (new Error().stack || '').split('\n').slice(2).join('\n')]),
  dir: (v, opts) => out(1, [inspect(v, opts)]),
  dirxml: (...a) => out(1, a),
  table: (data) => out(1, [data]),
  assert: (cond, ...a) => { if (!cond) out(2, ['Assertion failed' + (a.length ? ': ' + format(...a) : '')]); },
  count: (label = 'default') => { const n = (counts.get(label) || 0) + 1; counts.set(label, n); out(1, [`${label}: ${n}`]); },
  countReset: (label = 'default') => { counts.delete(label); },
  group: (...a) => { if (a.length) out(1, a); indent += '  '; },
  groupCollapsed: (...a) => { if (a.length) out(1, a); indent += '  '; },
  groupEnd: () => { indent = indent.slice(2); },
  time: (label = 'default') => { timersByLabel.set(label, performance.now()); },
  timeLog: (label = 'default', ...a) => { const t = timersByLabel.get(label); if (t !== undefined) out(1, [`${label}: ${(performance.now() - t).toFixed(3)}ms`, ...a]); },
  timeEnd: (label = 'default') => { const t = timersByLabel.get(label); if (t !== undefined) { timersByLabel.delete(label); out(1, [`${label}: ${(performance.now() - t).toFixed(3)}ms`]); } },
};

define('console', console);
lazy('process', 'ac:process');
lazy('Buffer', 'ac:buffer');
lazy('TextEncoder', 'ac:encoding');
lazy('TextDecoder', 'ac:encoding');
lazy('URL', 'ac:url');
lazy('URLSearchParams', 'ac:url');
for (const t of ['setTimeout', 'setInterval', 'setImmediate', 'clearTimeout', 'clearInterval', 'clearImmediate']) lazy(t, 'ac:timers');
lazy('structuredClone', 'ac:clone');
for (const f of ['fetch', 'Headers', 'Request', 'Response']) lazy(f, 'ac:fetch');
define('global', g);
// CommonJS-style access to the built-ins (`require('fs')`); files are
// imported with `import`.
define('require', function require(name) {
  if (typeof name !== 'string') throw new TypeError('The "id" argument must be of type string');
  if (name.startsWith('.') || name.startsWith('/') || name.startsWith('file:')) {
    const e = new Error(`require('${name}'): files are loaded with import in this runtime`);
    e.code = 'ERR_REQUIRE_ESM';
    throw e;
  }
  const ns = req(name.startsWith('node:') ? name : 'node:' + name);
  return ns.default !== undefined ? ns.default : ns;
});
define('crypto', {
  getRandomValues(arr) {
    if (!ArrayBuffer.isView(arr) || arr instanceof Float32Array || arr instanceof Float64Array || arr instanceof DataView) {
      throw new DOMException('The data argument must be an integer-type TypedArray', 'TypeMismatchError');
    }
    if (arr.byteLength > 65536) throw new DOMException(`The ArrayBufferView's byte length (${arr.byteLength}) exceeds the number of bytes of entropy available via this API (65536)`, 'QuotaExceededError');
    native.randomFill(new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength));
    return arr;
  },
  randomUUID: () => native.randomUUID(),
});

