// util.inspect and util.format: the text console.log prints. The layout
// follows Node's documented defaults (depth 2, 100 array items, lines
// broken past 80 columns, `nodejs.util.inspect.custom` hooks).
import native from 'ac:native';

export const custom = Symbol.for('nodejs.util.inspect.custom');
const defaults = { depth: 2, colors: false, maxArrayLength: 100, maxStringLength: 10000, breakLength: 80, compact: 3, sorted: false, showHidden: false, getters: false };
const identRe = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const TypedArrayProto = Object.getPrototypeOf(Uint8Array.prototype);
const typedArrayTag = Object.getOwnPropertyDescriptor(TypedArrayProto, Symbol.toStringTag).get;
const AsyncFunction = (async function () {}).constructor;
const GeneratorFunction = (function* () {}).constructor;
const AsyncGeneratorFunction = (async function* () {}).constructor;

function quote(s) {
  let q = "'";
  if (s.includes("'")) q = !s.includes('"') ? '"' : !s.includes('`') && !s.includes('${') ? '`' : "'";
  let out = '';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === q || ch === '\\') out += '\\' + ch;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (ch === '\v') out += '\\v';
    else if (c < 0x20 || c === 0x7f) out += '\\x' + c.toString(16).padStart(2, '0').toUpperCase();
    else out += ch;
  }
  return q + out + q;
}

function formatKey(k) {
  if (typeof k === 'symbol') return '[' + k.toString() + ']';
  return identRe.test(k) ? k : quote(k);
}

function formatNumber(n) {
  return Object.is(n, -0) ? '-0' : String(n);
}

function fnDescription(fn) {
  let src = '';
  try { src = Function.prototype.toString.call(fn); } catch { /* native */ }
  if (src.startsWith('class ') || src.startsWith('class{')) {
    const ext = Object.getPrototypeOf(fn);
    return '[class ' + (fn.name || '(anonymous)') + (ext && ext.name ? ' extends ' + ext.name : '') + ']';
  }
  let kind = 'Function';
  if (fn instanceof AsyncGeneratorFunction) kind = 'AsyncGeneratorFunction';
  else if (fn instanceof AsyncFunction) kind = 'AsyncFunction';
  else if (fn instanceof GeneratorFunction) kind = 'GeneratorFunction';
  return '[' + kind + (fn.name ? ': ' + fn.name : ' (anonymous)') + ']';
}

function constructorName(obj) {
  let proto = Object.getPrototypeOf(obj);
  if (proto === null) return null;
  while (proto) {
    const d = Object.getOwnPropertyDescriptor(proto, 'constructor');
    if (d && typeof d.value === 'function' && d.value.name) return d.value.name;
    proto = Object.getPrototypeOf(proto);
  }
  return '';
}

function isError(v) {
  return v instanceof Error || Object.prototype.toString.call(v) === '[object Error]';
}

/** The text of an error as Node prints it: its stack, then extra fields. */
function formatErrorValue(err, ctx, level) {
  let text;
  const stack = err.stack;
  const head = errorHead(err);
  if (typeof stack === 'string' && stack.length) {
    text = stack.startsWith(head) || /^\w*(Error|Exception)\b/.test(stack) ? stack : head + '\n' + stack;
  } else {
    text = '[' + head + ']';
  }
  text = text.replace(/\n+$/, '');
  const keys = Object.keys(err).filter((k) => k !== 'stack' && k !== 'message');
  const extra = keys.map((k) => formatKey(k) + ': ' + formatValue(err[k], ctx, level + 1));
  if ('cause' in err && !keys.includes('cause')) extra.push('[cause]: ' + formatValue(err.cause, ctx, level + 1));
  if (extra.length) {
    const pad = '  '.repeat(level + 1);
    text += ' {\n' + extra.map((e) => pad + e).join(',\n') + '\n' + '  '.repeat(level) + '}';
  }
  if (level > 0) text = text.split('\n').join('\n' + '  '.repeat(level));
  return text;
}

function errorHead(err) {
  let name = 'Error';
  let message = '';
  try { name = err.name === undefined ? 'Error' : String(err.name); } catch { /* getter threw */ }
  try { message = err.message === undefined ? '' : String(err.message); } catch { /* getter threw */ }
  return message ? name + ': ' + message : name;
}

function groupArray(entries, ctx, indentLen) {
  // Node prints long arrays of short items in aligned columns.
  let totalLength = 0;
  let maxLength = 0;
  const dataLen = entries.length;
  const lens = entries.map((e) => e.length);
  for (const l of lens) { totalLength += l + 2; if (l > maxLength) maxLength = l; }
  const actualMax = maxLength + 2;
  if (actualMax * 3 + indentLen >= ctx.breakLength || (totalLength / actualMax <= 5 && maxLength > 6)) return entries;
  const averageBias = Math.sqrt(actualMax - totalLength / entries.length);
  const biasedMax = Math.max(actualMax - 3 - averageBias, 1);
  const columns = Math.min(
    Math.round(Math.sqrt(2.5 * biasedMax * dataLen) / biasedMax),
    Math.floor((ctx.breakLength - indentLen) / actualMax),
    ctx.compact * 4,
    15,
  );
  if (columns <= 1) return entries;
  const widths = [];
  for (let i = 0; i < columns; i++) {
    let w = 0;
    for (let j = i; j < entries.length; j += columns) if (lens[j] > w) w = lens[j];
    widths.push(w + 2);
  }
  const out = [];
  for (let i = 0; i < dataLen; i += columns) {
    const max = Math.min(i + columns, dataLen);
    let line = '';
    let j = i;
    for (; j < max - 1; j++) {
      const cell = entries[j] + ', ';
      line += ctx.numeric ? cell.padStart(widths[j - i]) : cell.padEnd(widths[j - i]);
    }
    line += ctx.numeric ? entries[j].padStart(widths[j - i] - 2) : entries[j];
    out.push(line);
  }
  return out;
}

function reduce(start, entries, end, ctx, level, isArrayLike) {
  if (entries.length === 0) return (start ? start + ' ' : '') + end;
  const pad = '  '.repeat(level + 1);
  if (isArrayLike && entries.length > 6 && ctx.compact) entries = groupArray(entries, ctx, pad.length);
  const total = entries.reduce((n, e) => n + e.length, 0) + entries.length * 2;
  const single = entries.every((e) => !e.includes('\n'));
  if (single && ctx.compact && start.length + total + pad.length <= ctx.breakLength) {
    return (start ? start + ' ' : '') + end[0] + ' ' + entries.join(', ') + ' ' + end[1];
  }
  return (start ? start + ' ' : '') + end[0] + '\n' + pad + entries.join(',\n' + pad) + '\n' + '  '.repeat(level) + end[1];
}

function propEntries(obj, ctx, level, skip) {
  const out = [];
  const keys = ctx.showHidden ? Reflect.ownKeys(obj) : Object.keys(obj).concat(Object.getOwnPropertySymbols(obj).filter((s) => Object.prototype.propertyIsEnumerable.call(obj, s)));
  if (ctx.sorted) keys.sort();
  for (const k of keys) {
    if (skip && skip(k)) continue;
    const d = Object.getOwnPropertyDescriptor(obj, k);
    if (!d) continue;
    let v;
    if (d.get || d.set) v = d.get && d.set ? '[Getter/Setter]' : d.get ? '[Getter]' : '[Setter]';
    else v = formatValue(d.value, ctx, level + 1);
    out.push(formatKey(k) + ': ' + v);
  }
  return out;
}

function formatValue(v, ctx, level) {
  switch (typeof v) {
    case 'string': {
      if (level === 0 && ctx.topRaw) return v;
      let s = v;
      let more = '';
      if (s.length > ctx.maxStringLength) { more = `... ${s.length - ctx.maxStringLength} more character${s.length - ctx.maxStringLength > 1 ? 's' : ''}`; s = s.slice(0, ctx.maxStringLength); }
      return quote(s) + more;
    }
    case 'number': return formatNumber(v);
    case 'bigint': return v + 'n';
    case 'boolean': return String(v);
    case 'undefined': return 'undefined';
    case 'symbol': return v.toString();
  }
  if (v === null) return 'null';
  if (typeof v[custom] === 'function' && v[custom] !== inspect) {
    const r = v[custom](ctx.depth - level, { ...ctx, stylize: (s) => s }, inspect);
    return typeof r === 'string' ? r : formatValue(r, ctx, level);
  }
  if (ctx.seen.includes(v)) {
    let idx = ctx.circular.get(v);
    if (idx === undefined) { idx = ctx.circular.size + 1; ctx.circular.set(v, idx); }
    return '[Circular *' + idx + ']';
  }
  const out = formatObject(v, ctx, level);
  const idx = ctx.circular.get(v);
  return idx === undefined ? out : '<ref *' + idx + '> ' + out;
}

function formatObject(v, ctx, level) {
  if (typeof v === 'function') {
    const base = fnDescription(v);
    const props = Object.keys(v);
    if (!props.length || level > ctx.depth) return base;
    ctx.seen.push(v);
    const e = propEntries(v, ctx, level);
    ctx.seen.pop();
    return reduce(base, e, '{}', ctx, level);
  }
  if (isError(v)) {
    ctx.seen.push(v);
    try { return formatErrorValue(v, ctx, level); } finally { ctx.seen.pop(); }
  }
  const ctor = constructorName(v);
  const prefix = (name, size) => {
    const c = ctor === null ? `[${name}: null prototype]` : ctor && ctor !== name ? `${ctor} [${name}]` : name;
    return size === undefined ? c : `${c}(${size})`;
  };
  if (v instanceof Date) return isNaN(v) ? 'Invalid Date' : v.toISOString();
  if (v instanceof RegExp) return RegExp.prototype.toString.call(v);
  if (v instanceof Promise) {
    const [state, result] = native.promiseState(v);
    if (level > ctx.depth) return 'Promise { ... }';
    ctx.seen.push(v);
    const inner = state === 0 ? '<pending>' : (state === 2 ? '<rejected> ' : '') + formatValue(result, ctx, level + 1);
    ctx.seen.pop();
    return 'Promise { ' + inner + ' }';
  }
  if (v instanceof WeakMap || v instanceof WeakSet || (typeof WeakRef !== 'undefined' && v instanceof WeakRef)) {
    return prefix(v instanceof WeakMap ? 'WeakMap' : v instanceof WeakSet ? 'WeakSet' : 'WeakRef') + ' { <items unknown> }';
  }
  if (v instanceof Number || v instanceof String || v instanceof Boolean || v instanceof Symbol || v instanceof BigInt) {
    const prim = v.valueOf();
    const name = v instanceof Number ? 'Number' : v instanceof String ? 'String' : v instanceof Boolean ? 'Boolean' : v instanceof Symbol ? 'Symbol' : 'BigInt';
    return `[${name}: ${formatValue(prim, { ...ctx, topRaw: false }, level + 1)}]`;
  }
  const isArray = Array.isArray(v);
  const tag = ArrayBuffer.isView(v) && !(v instanceof DataView) ? typedArrayTag.call(v) : undefined;
  if (level > ctx.depth) {
    if (isArray) return '[Array]';
    return '[' + (ctor === null ? 'Object: null prototype' : ctor || 'Object') + ']';
  }
  ctx.seen.push(v);
  try {
    if (isArray) {
      const entries = [];
      const shown = Math.min(v.length, ctx.maxArrayLength);
      let holes = 0;
      for (let i = 0; i < shown; i++) {
        if (!Object.prototype.hasOwnProperty.call(v, i)) { holes++; continue; }
        if (holes) { entries.push(`<${holes} empty item${holes > 1 ? 's' : ''}>`); holes = 0; }
        entries.push(formatValue(v[i], ctx, level + 1));
      }
      if (holes) entries.push(`<${holes} empty item${holes > 1 ? 's' : ''}>`);
      if (v.length > shown) entries.push(`... ${v.length - shown} more item${v.length - shown > 1 ? 's' : ''}`);
      entries.push(...propEntries(v, ctx, level, (k) => typeof k === 'string' && String(k >>> 0) === k));
      const start = ctor === 'Array' ? '' : prefix('Array', v.length);
      return reduce(start, entries, '[]', { ...ctx, numeric: v.every((x) => typeof x === 'number' || typeof x === 'bigint') }, level, true);
    }
    if (tag) {
      if (typeof Buffer === 'function' && v instanceof Buffer) {
        const hex = Array.from(v.subarray(0, 50), (b) => b.toString(16).padStart(2, '0')).join(' ');
        return '<Buffer' + (hex ? ' ' + hex : '') + (v.length > 50 ? ` ... ${v.length - 50} more byte${v.length - 50 > 1 ? 's' : ''}` : '') + '>';
      }
      const shown = Math.min(v.length, ctx.maxArrayLength);
      const entries = [];
      for (let i = 0; i < shown; i++) entries.push(formatValue(v[i], ctx, level + 1));
      if (v.length > shown) entries.push(`... ${v.length - shown} more item${v.length - shown > 1 ? 's' : ''}`);
      return reduce(prefix(tag, v.length), entries, '[]', { ...ctx, numeric: true }, level, true);
    }
    if (v instanceof ArrayBuffer) {
      const bytes = new Uint8Array(v, 0, Math.min(v.byteLength, 50));
      const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');
      return prefix('ArrayBuffer') + ' { [Uint8Contents]: <' + hex + (v.byteLength > 50 ? ` ... ${v.byteLength - 50} more bytes` : '') + '>, byteLength: ' + v.byteLength + ' }';
    }
    if (v instanceof Map) {
      const entries = [];
      for (const [k, val] of v) entries.push(formatValue(k, ctx, level + 1) + ' => ' + formatValue(val, ctx, level + 1));
      entries.push(...propEntries(v, ctx, level));
      return reduce(prefix('Map', v.size), entries, '{}', ctx, level);
    }
    if (v instanceof Set) {
      const entries = [];
      for (const k of v) entries.push(formatValue(k, ctx, level + 1));
      entries.push(...propEntries(v, ctx, level));
      return reduce(prefix('Set', v.size), entries, '{}', ctx, level, true);
    }
    const entries = propEntries(v, ctx, level);
    const strTag = v[Symbol.toStringTag];
    let start = ctor === 'Object' ? '' : ctor === null ? '[Object: null prototype]' : ctor;
    if (typeof strTag === 'string' && strTag && strTag !== ctor) start = (start ? start + ' ' : 'Object ') + '[' + strTag + ']';
    return reduce(start, entries, '{}', ctx, level);
  } finally {
    ctx.seen.pop();
  }
}

function context(opts, topRaw) {
  const ctx = { ...defaults, ...(opts || {}), seen: [], circular: new Map(), topRaw };
  if (ctx.depth === null) ctx.depth = Infinity;
  if (ctx.maxArrayLength === null) ctx.maxArrayLength = Infinity;
  if (ctx.maxStringLength === null) ctx.maxStringLength = Infinity;
  if (ctx.compact === false) ctx.compact = 0;
  return ctx;
}

/** util.inspect(value[, options]) */
export function inspect(value, opts) {
  if (typeof opts !== 'object' || opts === null) opts = arguments.length > 2 ? { depth: arguments[2] } : {};
  return formatValue(value, context(opts, false), 0);
}
inspect.custom = custom;
inspect.defaultOptions = defaults;

/** util.format(fmt, ...args): printf-like with %s %d %i %f %j %o %O %c %%. */
export function format(...args) {
  return formatWithOptions({}, ...args);
}

export function formatWithOptions(opts, ...args) {
  let out = '';
  let i = 0;
  if (typeof args[0] === 'string') {
    const f = args[0];
    i = 1;
    let last = 0;
    for (let p = 0; p < f.length - 1; p++) {
      if (f[p] !== '%') continue;
      const c = f[p + 1];
      let rep;
      if (c === '%') { out += f.slice(last, p) + '%'; last = p + 2; p++; continue; }
      if (i >= args.length || !'sdifjoOc'.includes(c)) continue;
      const a = args[i];
      switch (c) {
        case 's': rep = typeof a === 'string' ? a : typeof a === 'bigint' ? a + 'n' : typeof a === 'object' && a !== null ? inspect(a, { ...opts, depth: 1 }) : String(a); break;
        case 'd': rep = typeof a === 'bigint' ? a + 'n' : typeof a === 'symbol' ? 'NaN' : formatNumber(Number(a)); break;
        case 'i': rep = typeof a === 'bigint' ? a + 'n' : typeof a === 'symbol' ? 'NaN' : formatNumber(parseInt(a)); break;
        case 'f': rep = typeof a === 'symbol' ? 'NaN' : formatNumber(parseFloat(a)); break;
        case 'j': try { rep = JSON.stringify(a); } catch { rep = '[Circular]'; } break;
        case 'o': rep = inspect(a, { ...opts, showHidden: true, depth: 4 }); break;
        case 'O': rep = inspect(a, opts); break;
        case 'c': rep = ''; break;
      }
      out += f.slice(last, p) + rep;
      last = p + 2;
      p++;
      i++;
    }
    out += f.slice(last);
  }
  for (; i < args.length; i++) {
    const a = args[i];
    if (out.length || i > 0) out += ' ';
    out += typeof a === 'string' ? a : inspect(a, opts);
  }
  return out;
}

/** The report of an uncaught exception (stderr). */
export function formatError(err) {
  if (isError(err)) return inspect(err);
  return 'Uncaught ' + inspect(err);
}
