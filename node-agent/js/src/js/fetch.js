// fetch (WHATWG Fetch, buffered): the request goes to the exec's egress hook,
// which denies everything unless the computer's policy allows it.
import native from 'ac:native';
const { toBuffer } = native.require('ac:buffer');

export class Headers {
  #map = new Map();
  constructor(init) {
    if (init instanceof Headers) for (const [k, v] of init) this.append(k, v);
    else if (Array.isArray(init)) for (const [k, v] of init) this.append(k, v);
    else if (init && typeof init === 'object') for (const k of Object.keys(init)) this.append(k, init[k]);
  }
  append(k, v) {
    k = String(k).toLowerCase(); v = String(v).trim();
    this.#map.set(k, this.#map.has(k) ? this.#map.get(k) + ', ' + v : v);
  }
  set(k, v) { this.#map.set(String(k).toLowerCase(), String(v).trim()); }
  get(k) { const v = this.#map.get(String(k).toLowerCase()); return v === undefined ? null : v; }
  has(k) { return this.#map.has(String(k).toLowerCase()); }
  delete(k) { this.#map.delete(String(k).toLowerCase()); }
  forEach(fn, thisArg) { for (const [k, v] of this) fn.call(thisArg, v, k, this); }
  *entries() { yield* [...this.#map.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)); }
  *keys() { for (const [k] of this.entries()) yield k; }
  *values() { for (const [, v] of this.entries()) yield v; }
  [Symbol.iterator]() { return this.entries(); }
}

function bodyBytes(body) {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return body;
  if (body instanceof URLSearchParams) return body.toString();
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  return String(body);
}

class Body {
  #bytes; #used = false;
  constructor(bytes) { this.#bytes = bytes || new Uint8Array(0); }
  get bodyUsed() { return this.#used; }
  #take() {
    if (this.#used) throw new TypeError('Body is unusable: Body has already been read');
    this.#used = true;
    return this.#bytes;
  }
  async arrayBuffer() { const b = this.#take(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
  async bytes() { return new Uint8Array(this.#take()); }
  async text() { return native.utf8Decode(this.#take()); }
  async json() { return JSON.parse(await this.text()); }
}

export class Response extends Body {
  constructor(body, init = {}) {
    const b = bodyBytes(body);
    super(typeof b === 'string' ? native.utf8Encode(b) : b);
    this.status = init.status === undefined ? 200 : init.status;
    this.statusText = init.statusText || '';
    this.headers = new Headers(init.headers);
    this.url = init.url || '';
    this.type = 'default';
    this.redirected = false;
  }
  get ok() { return this.status >= 200 && this.status < 300; }
  static json(data, init = {}) {
    const r = new Response(JSON.stringify(data), init);
    if (!r.headers.has('content-type')) r.headers.set('content-type', 'application/json');
    return r;
  }
}

export class Request {
  constructor(input, init = {}) {
    const base = input instanceof Request ? input : null;
    this.url = base ? base.url : new URL(String(input)).href;
    this.method = String(init.method || (base && base.method) || 'GET').toUpperCase();
    this.headers = new Headers(init.headers || (base && base.headers));
    this.body = init.body !== undefined ? init.body : base ? base.body : null;
    this.signal = init.signal || null;
  }
}

export async function fetch(input, init = {}) {
  const req = new Request(input, init);
  if (req.signal && req.signal.aborted) throw req.signal.reason || new DOMException('This operation was aborted', 'AbortError');
  const headers = [...req.headers];
  const body = bodyBytes(req.body);
  if (body !== undefined && typeof req.body === 'string' && !req.headers.has('content-type')) headers.push(['content-type', 'text/plain;charset=UTF-8']);
  let r;
  try {
    r = native.fetch(req.url, req.method, headers, body);
  } catch (e) {
    const err = new TypeError(e.message, { cause: e });
    err.code = e.code;
    throw err;
  }
  const [status, statusText, h, bytes, url] = r;
  return new Response(toBuffer(bytes), { status, statusText, headers: h, url: url || req.url });
}
