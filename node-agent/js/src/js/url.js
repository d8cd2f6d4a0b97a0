// URL and URLSearchParams (WHATWG URL); parsing and setters are the `url`
// crate's, the classes are thin views over its serialization.
import native from 'ac:native';

const custom = Symbol.for('nodejs.util.inspect.custom');
// Indexes into the parts array native.urlParse returns.
const HREF = 0, ORIGIN = 1, PROTOCOL = 2, USERNAME = 3, PASSWORD = 4, HOST = 5, HOSTNAME = 6, PORT = 7, PATHNAME = 8, SEARCH = 9, HASH = 10;

function invalid(input) {
  const e = new TypeError('Invalid URL');
  e.code = 'ERR_INVALID_URL';
  e.input = input;
  return e;
}

export class URL {
  #p;
  #params = null;
  constructor(input, base) {
    input = String(input);
    const p = base === undefined ? native.urlParse(input) : native.urlParse(input, String(base));
    if (!p) throw invalid(input);
    this.#p = p;
  }
  static canParse(input, base) {
    return !!(base === undefined ? native.urlParse(String(input)) : native.urlParse(String(input), String(base)));
  }
  static parse(input, base) {
    try { return new URL(input, base); } catch { return null; }
  }
  #set(part, value) {
    this.#p = native.urlSet(this.#p[HREF], part, String(value));
    if (this.#params) this.#params._reset(this.#p[SEARCH]);
  }
  get href() { return this.#p[HREF]; }
  set href(v) { this.#set('href', v); }
  get origin() { return this.#p[ORIGIN]; }
  get protocol() { return this.#p[PROTOCOL]; }
  set protocol(v) { this.#set('protocol', v); }
  get username() { return this.#p[USERNAME]; }
  set username(v) { this.#set('username', v); }
  get password() { return this.#p[PASSWORD]; }
  set password(v) { this.#set('password', v); }
  get host() { return this.#p[HOST]; }
  set host(v) { this.#set('host', v); }
  get hostname() { return this.#p[HOSTNAME]; }
  set hostname(v) { this.#set('hostname', v); }
  get port() { return this.#p[PORT]; }
  set port(v) { this.#set('port', v); }
  get pathname() { return this.#p[PATHNAME]; }
  set pathname(v) { this.#set('pathname', v); }
  get search() { return this.#p[SEARCH]; }
  set search(v) { this.#set('search', v); }
  get hash() { return this.#p[HASH]; }
  set hash(v) { this.#set('hash', v); }
  get searchParams() {
    if (!this.#params) {
      this.#params = new URLSearchParams(this.#p[SEARCH]);
      this.#params._attach((q) => { this.#p = native.urlSet(this.#p[HREF], 'search', q); });
    }
    return this.#params;
  }
  toString() { return this.#p[HREF]; }
  toJSON() { return this.#p[HREF]; }
  [custom](depth, opts, inspect) {
    const o = {};
    for (const k of ['href', 'origin', 'protocol', 'username', 'password', 'host', 'hostname', 'port', 'pathname', 'search']) o[k] = this[k];
    o.searchParams = this.searchParams;
    o.hash = this.hash;
    return 'URL ' + inspect(o, opts);
  }
}

export class URLSearchParams {
  #list = [];
  #onChange = null;
  constructor(init = '') {
    if (init instanceof URLSearchParams) this.#list = [...init];
    else if (typeof init === 'object' && init !== null) {
      if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const p = [...pair];
          if (p.length !== 2) throw new TypeError('Each query pair must be an iterable [name, value] tuple');
          this.#list.push([String(p[0]), String(p[1])]);
        }
      } else {
        for (const k of Object.keys(init)) this.#list.push([k, String(init[k])]);
      }
    } else {
      let s = String(init);
      if (s.startsWith('?')) s = s.slice(1);
      this.#list = native.formParse(s);
    }
  }
  _attach(fn) { this.#onChange = fn; }
  _reset(search) { this.#list = native.formParse(search.startsWith('?') ? search.slice(1) : search); }
  #update() { if (this.#onChange) this.#onChange(this.#list.length ? this.toString() : ''); }
  get size() { return this.#list.length; }
  append(k, v) { this.#list.push([String(k), String(v)]); this.#update(); }
  delete(k, v) {
    k = String(k);
    this.#list = this.#list.filter(([a, b]) => a !== k || (v !== undefined && b !== String(v)));
    this.#update();
  }
  get(k) { k = String(k); const e = this.#list.find(([a]) => a === k); return e ? e[1] : null; }
  getAll(k) { k = String(k); return this.#list.filter(([a]) => a === k).map(([, b]) => b); }
  has(k, v) { k = String(k); return this.#list.some(([a, b]) => a === k && (v === undefined || b === String(v))); }
  set(k, v) {
    k = String(k); v = String(v);
    const i = this.#list.findIndex(([a]) => a === k);
    if (i < 0) this.#list.push([k, v]);
    else { this.#list[i] = [k, v]; this.#list = this.#list.filter(([a], j) => a !== k || j === i); }
    this.#update();
  }
  sort() { this.#list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); this.#update(); }
  forEach(fn, thisArg) { for (const [k, v] of this.#list) fn.call(thisArg, v, k, this); }
  keys() { return this.#list.map(([k]) => k)[Symbol.iterator](); }
  values() { return this.#list.map(([, v]) => v)[Symbol.iterator](); }
  entries() { return this.#list.map(([k, v]) => [k, v])[Symbol.iterator](); }
  [Symbol.iterator]() { return this.entries(); }
  toString() { return native.formSerialize(this.#list); }
  [custom](depth, opts, inspect) {
    if (!this.#list.length) return 'URLSearchParams {}';
    return 'URLSearchParams { ' + this.#list.map(([k, v]) => inspect(k) + ' => ' + inspect(v)).join(', ') + ' }';
  }
}

/** url.fileURLToPath: `file:///workspace/a` -> `/workspace/a`. */
export function fileURLToPath(u) {
  const url = typeof u === 'string' ? new URL(u) : u;
  if (url.protocol !== 'file:') { const e = new TypeError('The URL must be of scheme file'); e.code = 'ERR_INVALID_URL_SCHEME'; throw e; }
  return decodeURIComponent(url.pathname);
}

/** url.pathToFileURL: `/workspace/a b` -> `file:///workspace/a%20b`. */
export function pathToFileURL(p) {
  const abs = p.startsWith('/') ? p : globalThis.process.cwd() + '/' + p;
  return new URL('file://' + abs.split('/').map(encodeURIComponent).join('/'));
}
