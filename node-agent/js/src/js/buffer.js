// Buffer: Node's Uint8Array subclass, with the encodings utf8, hex,
// base64, base64url, latin1/binary, ascii and utf16le/ucs2.
import native from 'ac:native';

const ENCODINGS = ['utf8', 'hex', 'base64', 'base64url', 'latin1', 'ascii', 'utf16le'];

export function normalizeEncoding(enc) {
  if (enc === undefined || enc === null) return 'utf8';
  const e = String(enc).toLowerCase();
  switch (e) {
    case 'utf8': case 'utf-8': return 'utf8';
    case 'hex': return 'hex';
    case 'base64': return 'base64';
    case 'base64url': return 'base64url';
    case 'latin1': case 'binary': return 'latin1';
    case 'ascii': return 'ascii';
    case 'utf16le': case 'utf-16le': case 'ucs2': case 'ucs-2': return 'utf16le';
    default: return undefined;
  }
}

function checkEncoding(enc) {
  const e = normalizeEncoding(enc);
  if (e === undefined) {
    const err = new TypeError(`Unknown encoding: ${enc}`);
    err.code = 'ERR_UNKNOWN_ENCODING';
    throw err;
  }
  return e;
}

/** Bytes of `str` in encoding `enc`, as a plain Uint8Array. */
export function encode(str, enc) {
  switch (checkEncoding(enc)) {
    case 'utf8': return native.utf8Encode(str);
    case 'hex': return native.hexDecode(str);
    case 'base64': case 'base64url': return native.base64Decode(str);
    case 'latin1': case 'ascii': {
      const out = new Uint8Array(str.length);
      for (let i = 0; i < str.length; i++) out[i] = str.charCodeAt(i) & 0xff;
      return out;
    }
    case 'utf16le': {
      const out = new Uint8Array(str.length * 2);
      for (let i = 0; i < str.length; i++) { const c = str.charCodeAt(i); out[2 * i] = c & 0xff; out[2 * i + 1] = c >> 8; }
      return out;
    }
  }
}

/** Text of `bytes` (a Uint8Array) in encoding `enc`. */
export function decode(bytes, enc) {
  switch (checkEncoding(enc)) {
    case 'utf8': return native.utf8Decode(bytes);
    case 'hex': return native.hexEncode(bytes);
    case 'base64': return native.base64Encode(bytes);
    case 'base64url': return native.base64Encode(bytes, true);
    case 'latin1': case 'ascii': {
      const mask = normalizeEncoding(enc) === 'ascii' ? 0x7f : 0xff;
      let s = '';
      for (let i = 0; i < bytes.length; i += 4096) s += String.fromCharCode.apply(null, Array.from(bytes.subarray(i, i + 4096), (b) => b & mask));
      return s;
    }
    case 'utf16le': {
      let s = '';
      for (let i = 0; i + 1 < bytes.length; i += 2) s += String.fromCharCode(bytes[i] | (bytes[i + 1] << 8));
      return s;
    }
  }
}

function rangeError(msg) {
  const e = new RangeError(msg);
  e.code = 'ERR_OUT_OF_RANGE';
  return e;
}

function toBuffer(u8) {
  return Object.setPrototypeOf(u8, Buffer.prototype);
}

export class Buffer extends Uint8Array {
  static from(value, encOrOffset, length) {
    if (typeof value === 'string') return toBuffer(encode(value, encOrOffset));
    if (value instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && value instanceof SharedArrayBuffer)) {
      const off = encOrOffset === undefined ? 0 : Number(encOrOffset);
      const len = length === undefined ? value.byteLength - off : Number(length);
      if (off > value.byteLength) throw rangeError('"offset" is outside of buffer bounds');
      return new Buffer(value, off, len);
    }
    if (ArrayBuffer.isView(value)) {
      const src = new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
      if (value instanceof Uint8Array) return toBuffer(new Uint8Array(src));
      // Other typed arrays copy element values (truncated to bytes), as Node does.
      return toBuffer(Uint8Array.from(value, (x) => Number(x) & 0xff));
    }
    if (value && typeof value === 'object') {
      if (value.type === 'Buffer' && Array.isArray(value.data)) return toBuffer(Uint8Array.from(value.data));
      if (typeof value.length === 'number' || Array.isArray(value)) return toBuffer(Uint8Array.from(value));
      const prim = value[Symbol.toPrimitive] ? value[Symbol.toPrimitive]('string') : value.valueOf();
      if (prim !== value && prim != null) return Buffer.from(prim, encOrOffset, length);
    }
    const e = new TypeError('The first argument must be of type string or an instance of Buffer, ArrayBuffer, or Array or an Array-like Object. Received ' + (value === null ? 'null' : typeof value));
    e.code = 'ERR_INVALID_ARG_TYPE';
    throw e;
  }
  static alloc(size, fill, enc) {
    if (typeof size !== 'number' || size < 0 || !Number.isFinite(size)) throw rangeError(`The argument 'size' is invalid. Received ${size}`);
    const b = new Buffer(size);
    if (fill !== undefined && fill !== 0) b.fill(fill, 0, b.length, enc);
    return b;
  }
  static allocUnsafe(size) { return Buffer.alloc(size); }
  static allocUnsafeSlow(size) { return Buffer.alloc(size); }
  static isBuffer(b) { return b instanceof Buffer; }
  static isEncoding(e) { return typeof e === 'string' && normalizeEncoding(e) !== undefined; }
  static byteLength(v, enc) {
    if (typeof v !== 'string') return v.byteLength;
    const e = normalizeEncoding(enc) || 'utf8';
    if (e === 'utf8') return native.utf8Length(v);
    return encode(v, e).length;
  }
  static concat(list, total) {
    if (total === undefined) total = list.reduce((n, b) => n + b.length, 0);
    const out = Buffer.alloc(total);
    let pos = 0;
    for (const b of list) {
      if (pos >= total) break;
      const src = b instanceof Uint8Array ? b : Buffer.from(b);
      const part = src.subarray(0, Math.min(src.length, total - pos));
      out.set(part, pos);
      pos += part.length;
    }
    return out;
  }
  static compare(a, b) { return a.compare(b); }

  toString(enc, start, end) {
    start = start === undefined ? 0 : Math.max(0, start | 0);
    end = end === undefined ? this.length : Math.min(this.length, end | 0);
    if (end <= start) return '';
    const view = start === 0 && end === this.length ? this : this.subarray(start, end);
    return decode(view, enc);
  }
  toJSON() { return { type: 'Buffer', data: Array.from(this) }; }
  toLocaleString(enc, s, e) { return this.toString(enc, s, e); }
  equals(other) {
    if (!(other instanceof Uint8Array)) throw new TypeError('The "otherBuffer" argument must be an instance of Buffer or Uint8Array');
    return this.compare(other) === 0;
  }
  compare(other, tStart = 0, tEnd = other.length, sStart = 0, sEnd = this.length) {
    const a = this.subarray(sStart, sEnd);
    const b = other.subarray(tStart, tEnd);
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
    return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
  }
  copy(target, tStart = 0, sStart = 0, sEnd = this.length) {
    const part = this.subarray(sStart, Math.min(sEnd, sStart + target.length - tStart));
    target.set(part, tStart);
    return part.length;
  }
  slice(start, end) { return this.subarray(start, end); }
  write(str, offset, length, enc) {
    if (typeof offset === 'string') { enc = offset; offset = 0; length = undefined; }
    else if (typeof length === 'string') { enc = length; length = undefined; }
    offset = offset === undefined ? 0 : offset >>> 0;
    const bytes = encode(str, enc);
    const n = Math.min(bytes.length, this.length - offset, length === undefined ? Infinity : length);
    this.set(bytes.subarray(0, n), offset);
    return n;
  }
  fill(value, offset = 0, end = this.length, enc) {
    if (typeof offset === 'string') { enc = offset; offset = 0; end = this.length; }
    if (typeof value === 'string') {
      const bytes = value.length === 1 && (enc === undefined || normalizeEncoding(enc) === 'utf8') && value.charCodeAt(0) < 128 ? [value.charCodeAt(0)] : encode(value, enc);
      if (bytes.length === 0) return Uint8Array.prototype.fill.call(this, 0, offset, end), this;
      for (let i = offset, j = 0; i < end; i++, j = (j + 1) % bytes.length) this[i] = bytes[j];
      return this;
    }
    if (value instanceof Uint8Array) {
      for (let i = offset, j = 0; i < end; i++, j = (j + 1) % value.length) this[i] = value[j];
      return this;
    }
    return Uint8Array.prototype.fill.call(this, typeof value === 'boolean' ? +value : value & 255, offset, end), this;
  }
  indexOf(value, byteOffset = 0, enc) {
    if (typeof byteOffset === 'string') { enc = byteOffset; byteOffset = 0; }
    if (byteOffset < 0) byteOffset = Math.max(0, this.length + byteOffset);
    if (typeof value === 'number') return Uint8Array.prototype.indexOf.call(this, value & 255, byteOffset);
    const needle = typeof value === 'string' ? encode(value, enc) : value;
    if (needle.length === 0) return Math.min(byteOffset, this.length);
    outer: for (let i = byteOffset; i <= this.length - needle.length; i++) {
      for (let j = 0; j < needle.length; j++) if (this[i + j] !== needle[j]) continue outer;
      return i;
    }
    return -1;
  }
  lastIndexOf(value, byteOffset = this.length, enc) {
    const needle = typeof value === 'number' ? [value & 255] : typeof value === 'string' ? encode(value, enc) : value;
    for (let i = Math.min(byteOffset, this.length - needle.length); i >= 0; i--) {
      let ok = true;
      for (let j = 0; j < needle.length; j++) if (this[i + j] !== needle[j]) { ok = false; break; }
      if (ok) return i;
    }
    return -1;
  }
  includes(value, byteOffset, enc) { return this.indexOf(value, byteOffset, enc) !== -1; }
  swap16() { for (let i = 0; i + 1 < this.length; i += 2) { const t = this[i]; this[i] = this[i + 1]; this[i + 1] = t; } return this; }
  get parent() { return this.buffer; }
  get offset() { return this.byteOffset; }
}

// Fixed-width number access (readUInt8 ... writeDoubleBE) through DataView.
function view(b) { return new DataView(b.buffer, b.byteOffset, b.byteLength); }
function check(b, off, size) {
  if (off === undefined) off = 0;
  if (typeof off !== 'number' || off < 0 || off + size > b.length || off % 1 !== 0) throw rangeError(`The value of "offset" is out of range. It must be >= 0 and <= ${b.length - size}. Received ${off}`);
  return off;
}
const numeric = [
  ['UInt8', 1, 'getUint8', 'setUint8'], ['Int8', 1, 'getInt8', 'setInt8'],
  ['UInt16LE', 2, 'getUint16', 'setUint16', true], ['UInt16BE', 2, 'getUint16', 'setUint16', false],
  ['Int16LE', 2, 'getInt16', 'setInt16', true], ['Int16BE', 2, 'getInt16', 'setInt16', false],
  ['UInt32LE', 4, 'getUint32', 'setUint32', true], ['UInt32BE', 4, 'getUint32', 'setUint32', false],
  ['Int32LE', 4, 'getInt32', 'setInt32', true], ['Int32BE', 4, 'getInt32', 'setInt32', false],
  ['FloatLE', 4, 'getFloat32', 'setFloat32', true], ['FloatBE', 4, 'getFloat32', 'setFloat32', false],
  ['DoubleLE', 8, 'getFloat64', 'setFloat64', true], ['DoubleBE', 8, 'getFloat64', 'setFloat64', false],
  ['BigUInt64LE', 8, 'getBigUint64', 'setBigUint64', true], ['BigUInt64BE', 8, 'getBigUint64', 'setBigUint64', false],
  ['BigInt64LE', 8, 'getBigInt64', 'setBigInt64', true], ['BigInt64BE', 8, 'getBigInt64', 'setBigInt64', false],
];
for (const [name, size, get, set, le] of numeric) {
  const read = function (off) { off = check(this, off, size); return view(this)[get](off, le); };
  const write = function (value, off) { off = check(this, off, size); view(this)[set](off, value, le); return off + size; };
  Buffer.prototype['read' + name] = read;
  Buffer.prototype['write' + name] = write;
  if (name.includes('UInt')) {
    Buffer.prototype['read' + name.replace('UInt', 'Uint')] = read;
    Buffer.prototype['write' + name.replace('UInt', 'Uint')] = write;
  }
}

export const constants = { MAX_LENGTH: 2 ** 32, MAX_STRING_LENGTH: 2 ** 30 - 1 };
export const kMaxLength = constants.MAX_LENGTH;
export { ENCODINGS as encodings, toBuffer };
