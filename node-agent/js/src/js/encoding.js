// TextEncoder / TextDecoder (WHATWG Encoding): UTF-8 always, plus
// utf-16le and latin1 for TextDecoder.
import native from 'ac:native';
const { decode: decodeBytes } = native.require('ac:buffer');

function bytesOf(input) {
  if (input === undefined) return new Uint8Array(0);
  if (input instanceof Uint8Array) return input;
  if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  if (input instanceof ArrayBuffer) return new Uint8Array(input);
  throw new TypeError('The "input" argument must be an instance of ArrayBuffer or ArrayBufferView');
}

export class TextEncoder {
  get encoding() { return 'utf-8'; }
  encode(input = '') { return native.utf8Encode(String(input)); }
  encodeInto(src, dest) {
    const bytes = native.utf8Encode(String(src));
    let n = Math.min(bytes.length, dest.length);
    // Never split a character: back up to a lead byte.
    if (n < bytes.length) while (n > 0 && (bytes[n] & 0xc0) === 0x80) n--;
    dest.set(bytes.subarray(0, n));
    const read = native.utf8Decode(bytes.subarray(0, n)).length;
    return { read, written: n };
  }
}

const LABELS = {
  'utf-8': 'utf-8', utf8: 'utf-8', 'unicode-1-1-utf-8': 'utf-8',
  'utf-16le': 'utf-16le', 'utf-16': 'utf-16le', ucs2: 'utf-16le',
  latin1: 'windows-1252', 'iso-8859-1': 'windows-1252', 'windows-1252': 'windows-1252', ascii: 'windows-1252', 'us-ascii': 'windows-1252',
};

/** Length of an incomplete UTF-8 sequence at the end of `b` (0 if none). */
function incompleteTail(b) {
  for (let back = 1; back <= 3 && back <= b.length; back++) {
    const c = b[b.length - back];
    if ((c & 0xc0) === 0x80) continue;
    const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

export class TextDecoder {
  #enc; #fatal; #ignoreBOM; #pending = null; #bomSeen = false;
  constructor(label = 'utf-8', options = {}) {
    const enc = LABELS[String(label).trim().toLowerCase()];
    if (!enc) { const e = new RangeError(`The "${label}" encoding is not supported`); e.code = 'ERR_ENCODING_NOT_SUPPORTED'; throw e; }
    this.#enc = enc;
    this.#fatal = !!options.fatal;
    this.#ignoreBOM = !!options.ignoreBOM;
  }
  get encoding() { return this.#enc; }
  get fatal() { return this.#fatal; }
  get ignoreBOM() { return this.#ignoreBOM; }
  decode(input, options = {}) {
    let b = bytesOf(input);
    if (this.#pending) { const m = new Uint8Array(this.#pending.length + b.length); m.set(this.#pending); m.set(b, this.#pending.length); b = m; this.#pending = null; }
    const stream = !!options.stream;
    if (this.#enc !== 'utf-8') {
      if (stream && this.#enc === 'utf-16le' && b.length % 2) { this.#pending = b.slice(b.length - 1); b = b.subarray(0, b.length - 1); }
      let s = decodeBytes(b, this.#enc === 'utf-16le' ? 'utf16le' : 'latin1');
      if (!this.#ignoreBOM && !this.#bomSeen && s.charCodeAt(0) === 0xfeff) s = s.slice(1);
      this.#bomSeen = stream;
      return s;
    }
    if (stream) {
      const tail = incompleteTail(b);
      if (tail) { this.#pending = b.slice(b.length - tail); b = b.subarray(0, b.length - tail); }
    }
    let s;
    try { s = native.utf8Decode(b, this.#fatal); } catch (e) { const err = new TypeError(e.message); err.code = 'ERR_ENCODING_INVALID_ENCODED_DATA'; throw err; }
    if (!this.#ignoreBOM && !this.#bomSeen && s.charCodeAt(0) === 0xfeff) s = s.slice(1);
    this.#bomSeen = stream && s.length > 0 ? true : stream ? this.#bomSeen : false;
    return s;
  }
}
