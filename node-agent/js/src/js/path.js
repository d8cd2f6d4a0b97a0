// node:path, POSIX flavour (the only one a computer has).
function assertPath(p, name = 'path') {
  if (typeof p !== 'string') {
    const e = new TypeError(`The "${name}" argument must be of type string. Received ${p === null ? 'null' : typeof p}`);
    e.code = 'ERR_INVALID_ARG_TYPE';
    throw e;
  }
}

/** Resolves `.` and `..` in the segments of `p` (no leading slash kept). */
function squash(p, allowAboveRoot) {
  const out = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (out.length && out[out.length - 1] !== '..') out.pop();
      else if (allowAboveRoot) out.push('..');
    } else out.push(seg);
  }
  return out.join('/');
}

export const sep = '/';
export const delimiter = ':';

export function isAbsolute(p) { assertPath(p); return p.startsWith('/'); }

export function normalize(p) {
  assertPath(p);
  if (p === '') return '.';
  const abs = p.startsWith('/');
  const trailing = p.endsWith('/');
  let s = squash(p, !abs);
  if (s === '' && !abs) s = '.';
  if (s !== '' && trailing) s += '/';
  return abs ? '/' + s : s;
}

export function join(...parts) {
  for (const p of parts) assertPath(p);
  const joined = parts.filter((p) => p !== '').join('/');
  return joined === '' ? '.' : normalize(joined);
}

export function resolve(...parts) {
  let resolved = '';
  for (let i = parts.length - 1; i >= -1 && !resolved.startsWith('/'); i--) {
    const p = i >= 0 ? parts[i] : globalThis.process.cwd();
    assertPath(p);
    if (p === '') continue;
    resolved = resolved ? p + '/' + resolved : p;
  }
  const s = squash(resolved, false);
  return '/' + s;
}

export function relative(from, to) {
  assertPath(from, 'from'); assertPath(to, 'to');
  if (from === to) return '';
  const a = resolve(from).split('/').filter(Boolean);
  const b = resolve(to).split('/').filter(Boolean);
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return [...Array(a.length - i).fill('..'), ...b.slice(i)].join('/');
}

export function dirname(p) {
  assertPath(p);
  if (p === '') return '.';
  let end = p.length;
  while (end > 1 && p[end - 1] === '/') end--;
  const i = p.lastIndexOf('/', end - 1);
  if (i < 0) return '.';
  if (i === 0) return '/';
  let j = i;
  while (j > 1 && p[j - 1] === '/') j--;
  return p.slice(0, j);
}

export function basename(p, ext) {
  assertPath(p);
  let end = p.length;
  while (end > 0 && p[end - 1] === '/') end--;
  if (end === 0) return '';
  const base = p.slice(p.lastIndexOf('/', end - 1) + 1, end);
  if (ext !== undefined && ext !== base && base.endsWith(ext)) return base.slice(0, base.length - ext.length);
  return base;
}

export function extname(p) {
  const base = basename(p);
  const i = base.lastIndexOf('.');
  if (i <= 0 || base === '..') return '';
  return base.slice(i);
}

export function parse(p) {
  assertPath(p);
  const root = p.startsWith('/') ? '/' : '';
  if (p === '' || /^\/+$/.test(p)) return { root, dir: root, base: '', ext: '', name: '' };
  const base = basename(p);
  const ext = extname(p);
  let dir = dirname(p);
  if (dir === '.' && !p.startsWith('.') && !p.includes('/')) dir = '';
  return { root, dir, base, ext, name: ext ? base.slice(0, base.length - ext.length) : base };
}

export function format(o) {
  const dir = o.dir || o.root || '';
  const base = o.base || (o.name || '') + (o.ext ? (o.ext.startsWith('.') ? '' : '.') + o.ext : '');
  if (!dir) return base;
  return dir === o.root ? dir + base : dir + '/' + base;
}

export function toNamespacedPath(p) { return p; }

export function matchesGlob(p, pattern) {
  const re = new RegExp('^' + pattern.split('**').map((part) => part.split('*').map((s) => s.replace(/[.+^${}()|[\]\\?]/g, (c) => (c === '?' ? '[^/]' : '\\' + c))).join('[^/]*')).join('.*') + '$');
  return re.test(p);
}

const path = { sep, delimiter, isAbsolute, normalize, join, resolve, relative, dirname, basename, extname, parse, format, toNamespacedPath, matchesGlob };
path.posix = path;
path.win32 = path;
export default path;
export { path as posix, path as win32 };
