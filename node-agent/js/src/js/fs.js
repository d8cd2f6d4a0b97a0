// node:fs over the computer's filesystem engine: synchronous calls, the
// promise API (fs/promises, FileHandle) and the callback API, all on the
// same natives. Errors carry Node's code, errno, syscall and path.
import native from 'ac:native';
const { Buffer, toBuffer, encode, normalizeEncoding } = native.require('ac:buffer');
const { URL, fileURLToPath } = native.require('ac:url');
const { join: joinPath } = native.require('ac:path');

export const constants = {
  F_OK: 0, R_OK: 4, W_OK: 2, X_OK: 1,
  COPYFILE_EXCL: 1, COPYFILE_FICLONE: 2, COPYFILE_FICLONE_FORCE: 4,
  O_RDONLY: 0, O_WRONLY: 1, O_RDWR: 2, O_CREAT: 0o100, O_EXCL: 0o200, O_NOCTTY: 0o400,
  O_TRUNC: 0o1000, O_APPEND: 0o2000, O_DIRECTORY: 0o200000, O_NOFOLLOW: 0o400000, O_SYNC: 0o4010000, O_DSYNC: 0o10000,
  S_IFMT: 0o170000, S_IFREG: 0o100000, S_IFDIR: 0o40000, S_IFCHR: 0o20000, S_IFBLK: 0o60000,
  S_IFIFO: 0o10000, S_IFLNK: 0o120000, S_IFSOCK: 0o140000,
  S_IRWXU: 0o700, S_IRUSR: 0o400, S_IWUSR: 0o200, S_IXUSR: 0o100,
  S_IRWXG: 0o70, S_IRGRP: 0o40, S_IWGRP: 0o20, S_IXGRP: 0o10,
  S_IRWXO: 0o7, S_IROTH: 0o4, S_IWOTH: 0o2, S_IXOTH: 0o1,
  UV_DIRENT_UNKNOWN: 0, UV_DIRENT_FILE: 1, UV_DIRENT_DIR: 2, UV_DIRENT_LINK: 3, UV_DIRENT_FIFO: 4,
  UV_DIRENT_SOCKET: 5, UV_DIRENT_CHAR: 6, UV_DIRENT_BLOCK: 7,
};
export const { F_OK, R_OK, W_OK, X_OK } = constants;

function argTypeError(name, expected, value) {
  const e = new TypeError(`The "${name}" argument must be ${expected}. Received ${value === null ? 'null' : typeof value}`);
  e.code = 'ERR_INVALID_ARG_TYPE';
  return e;
}

/** A path argument as a string: string, Buffer/Uint8Array or file: URL. */
function toPath(p, name = 'path') {
  if (typeof p === 'string') {
    if (p.includes('\u0000')) {
      const e = new TypeError(`The argument '${name}' must be a string, Uint8Array, or URL without null bytes. Received ${JSON.stringify(p)}`);
      e.code = 'ERR_INVALID_ARG_VALUE';
      throw e;
    }
    return p;
  }
  if (p instanceof URL) return fileURLToPath(p);
  if (p instanceof Uint8Array) return toPath(native.utf8Decode(p), name);
  throw argTypeError(name, 'of type string or an instance of Buffer or URL', p);
}

function encodingOf(options, fallback) {
  if (typeof options === 'string') return options;
  if (options && typeof options === 'object' && options.encoding !== undefined) return options.encoding;
  return fallback;
}

function isUtf8(enc) {
  return enc === 'utf8' || enc === 'utf-8' || enc === 'UTF-8' || enc === 'UTF8';
}

/** Bytes to write: strings in `enc`, any ArrayBufferView as its bytes. */
function dataOf(data, enc) {
  if (typeof data === 'string') return enc && !isUtf8(enc) ? encode(data, enc) : data;
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw argTypeError('data', 'of type string or an instance of Buffer, TypedArray, or DataView', data);
}

function timeOf(t) {
  if (t instanceof Date) return t.getTime() / 1000;
  if (typeof t === 'string' && t !== '' && !isNaN(Number(t))) return Number(t);
  if (typeof t === 'number') return Number.isFinite(t) ? t : Date.now() / 1000;
  if (typeof t === 'bigint') return Number(t);
  throw argTypeError('time', 'of type number or an instance of Date', t);
}

const kType = Symbol('type');

class StatsBase {
  isFile() { return (this.mode & constants.S_IFMT) === constants.S_IFREG; }
  isDirectory() { return (this.mode & constants.S_IFMT) === constants.S_IFDIR; }
  isSymbolicLink() { return (this.mode & constants.S_IFMT) === constants.S_IFLNK; }
  isFIFO() { return (this.mode & constants.S_IFMT) === constants.S_IFIFO; }
  isSocket() { return (this.mode & constants.S_IFMT) === constants.S_IFSOCK; }
  isCharacterDevice() { return (this.mode & constants.S_IFMT) === constants.S_IFCHR; }
  isBlockDevice() { return (this.mode & constants.S_IFMT) === constants.S_IFBLK; }
}

export class Stats extends StatsBase {
  constructor(a) {
    super();
    [this.dev, this.ino, this.mode, this.nlink, this.uid, this.gid, this.rdev, this.size, this.blksize, this.blocks,
      this.atimeMs, this.mtimeMs, this.ctimeMs, this.birthtimeMs] = a;
    this.atime = new Date(this.atimeMs);
    this.mtime = new Date(this.mtimeMs);
    this.ctime = new Date(this.ctimeMs);
    this.birthtime = new Date(this.birthtimeMs);
  }
}

const TYPE_MODE = [0, constants.S_IFREG, constants.S_IFDIR, constants.S_IFLNK, constants.S_IFIFO, constants.S_IFSOCK, constants.S_IFCHR, constants.S_IFBLK];

export class Dirent extends StatsBase {
  constructor(name, type, parentPath) {
    super();
    this.name = name;
    this.parentPath = parentPath;
    this.path = parentPath;
    Object.defineProperty(this, kType, { value: type });
  }
  get mode() { return TYPE_MODE[this[kType]] || 0; }
}

// ---- synchronous API -------------------------------------------------------

export function statSync(path, options) {
  try {
    return new Stats(native.stat(toPath(path), true));
  } catch (e) {
    if (options && options.throwIfNoEntry === false && e.code === 'ENOENT') return undefined;
    throw e;
  }
}
export function lstatSync(path, options) {
  try {
    return new Stats(native.stat(toPath(path), false));
  } catch (e) {
    if (options && options.throwIfNoEntry === false && e.code === 'ENOENT') return undefined;
    throw e;
  }
}
export function fstatSync(fd) { return new Stats(native.fstat(fd)); }

export function existsSync(path) {
  try { native.stat(toPath(path), true); return true; } catch { return false; }
}

export function accessSync(path, mode = F_OK) { native.access(toPath(path), mode >>> 0); }

function readAllFd(fd) {
  const chunks = [];
  let total = 0;
  for (;;) {
    const buf = new Uint8Array(65536);
    const n = native.read(fd, buf, 0, buf.length, null);
    if (n === 0) break;
    chunks.push(buf.subarray(0, n));
    total += n;
  }
  return Buffer.concat(chunks, total);
}

export function readFileSync(path, options) {
  const enc = encodingOf(options, null);
  let bytes;
  if (path === 0 || path === '/dev/stdin') bytes = toBuffer(native.stdin());
  else if (typeof path === 'number') bytes = readAllFd(path);
  else if (isUtf8(enc)) return native.readFile(toPath(path), true);
  else bytes = toBuffer(native.readFile(toPath(path), false));
  return enc && enc !== 'buffer' ? bytes.toString(enc) : bytes;
}

export function writeFileSync(file, data, options) {
  const enc = encodingOf(options, 'utf8');
  const flag = (options && typeof options === 'object' && options.flag) || 'w';
  const mode = (options && typeof options === 'object' && options.mode) || 0o666;
  const bytes = dataOf(data, enc);
  if (typeof file === 'number') { writeAllFd(file, bytes); return; }
  if (file === '/dev/stdout' || file === '/dev/stderr') { native.writeOut(file === '/dev/stdout' ? 1 : 2, bytes); return; }
  native.writeFile(toPath(file, 'file'), bytes, String(flag), mode);
}

function writeAllFd(fd, bytes) {
  if (fd === 1 || fd === 2) { native.writeOut(fd, bytes); return; }
  native.write(fd, bytes, null);
}

export function appendFileSync(file, data, options) {
  const o = typeof options === 'string' ? { encoding: options } : { ...(options || {}) };
  if (!o.flag) o.flag = 'a';
  writeFileSync(file, data, o);
}

export function mkdirSync(path, options) {
  const o = typeof options === 'number' || typeof options === 'string' ? { mode: options } : options || {};
  const mode = typeof o.mode === 'string' ? parseInt(o.mode, 8) : o.mode === undefined ? 0o777 : o.mode;
  const first = native.mkdir(toPath(path), mode, !!o.recursive);
  return o.recursive ? first : undefined;
}

export function readdirSync(path, options) {
  const o = typeof options === 'string' ? { encoding: options } : options || {};
  const dir = toPath(path);
  const out = [];
  const walk = (d, prefix) => {
    const flat = native.readdir(d);
    for (let i = 0; i < flat.length; i += 2) {
      const name = flat[i];
      const type = flat[i + 1];
      const rel = prefix ? prefix + '/' + name : name;
      if (o.withFileTypes) out.push(new Dirent(name, type, prefix ? joinPath(dir, prefix) : dir));
      else out.push(o.encoding === 'buffer' ? Buffer.from(rel) : rel);
      if (o.recursive && type === 2) walk(joinPath(d, name), rel);
    }
  };
  walk(dir, '');
  return out;
}

export function unlinkSync(path) { native.unlink(toPath(path)); }

export function rmdirSync(path, options) {
  if (options && options.recursive) return native.rm(toPath(path), true, false);
  native.rmdir(toPath(path));
}

export function rmSync(path, options) {
  const o = options || {};
  native.rm(toPath(path), !!o.recursive, !!o.force);
}

export function renameSync(from, to) { native.rename(toPath(from, 'oldPath'), toPath(to, 'newPath')); }

export function copyFileSync(src, dest, mode = 0) {
  native.copyFile(toPath(src, 'src'), toPath(dest, 'dest'), (mode & constants.COPYFILE_EXCL) !== 0);
}

export function cpSync(src, dest, options) {
  const o = options || {};
  src = toPath(src, 'src');
  dest = toPath(dest, 'dest');
  const st = lstatSync(src);
  if (st.isDirectory()) {
    if (!o.recursive) {
      const e = new Error(`Recursive option is required to copy a directory: ${src}`);
      e.code = 'ERR_FS_EISDIR';
      throw e;
    }
    mkdirSync(dest, { recursive: true });
    for (const name of readdirSync(src)) cpSync(joinPath(src, name), joinPath(dest, name), o);
  } else if (st.isSymbolicLink()) {
    if (o.force !== false && existsSync(dest)) unlinkSync(dest);
    symlinkSync(readlinkSync(src), dest);
  } else {
    const excl = o.force === false || o.errorOnExist;
    try {
      copyFileSync(src, dest, excl ? constants.COPYFILE_EXCL : 0);
    } catch (e) {
      if (!(e.code === 'EEXIST' && !o.errorOnExist)) throw e;
    }
  }
}

export function symlinkSync(target, path) { native.symlink(toPath(target, 'target'), toPath(path)); }

export function readlinkSync(path, options) {
  const t = native.readlink(toPath(path));
  return encodingOf(options, 'utf8') === 'buffer' ? Buffer.from(t) : t;
}

export function linkSync(existing, newPath) { native.link(toPath(existing, 'existingPath'), toPath(newPath, 'newPath')); }

export function chmodSync(path, mode) {
  native.chmod(toPath(path), typeof mode === 'string' ? parseInt(mode, 8) : mode);
}
export function lchmodSync(path, mode) { chmodSync(path, mode); }
export function chownSync() { /* ownership is fixed per computer */ }
export function lchownSync() { /* as chownSync */ }

export function utimesSync(path, atime, mtime) { native.utimes(toPath(path), timeOf(atime), timeOf(mtime), true); }
export function lutimesSync(path, atime, mtime) { native.utimes(toPath(path), timeOf(atime), timeOf(mtime), false); }

export function truncateSync(path, len = 0) {
  if (typeof path === 'number') return native.ftruncate(path, len);
  native.truncate(toPath(path), len);
}

export function realpathSync(path, options) {
  const p = native.realpath(toPath(path));
  return encodingOf(options, 'utf8') === 'buffer' ? Buffer.from(p) : p;
}
realpathSync.native = realpathSync;

export function mkdtempSync(prefix) { return native.mkdtemp(toPath(prefix, 'prefix')); }

export function openSync(path, flags = 'r', mode = 0o666) {
  return native.open(toPath(path), flags, typeof mode === 'string' ? parseInt(mode, 8) : mode);
}
export function closeSync(fd) { native.close(fd); }

export function readSync(fd, buffer, offsetOrOptions, length, position) {
  let offset = offsetOrOptions;
  if (typeof offsetOrOptions === 'object' && offsetOrOptions !== null) ({ offset = 0, length = buffer.byteLength - offset, position = null } = offsetOrOptions);
  if (offset === undefined) offset = 0;
  if (length === undefined) length = buffer.byteLength - offset;
  const view = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  return native.read(fd, view, offset, length, typeof position === 'bigint' ? Number(position) : position);
}

export function writeSync(fd, data, offsetOrPosition, lengthOrEncoding, position) {
  if (typeof data === 'string') {
    const bytes = dataOf(data, typeof lengthOrEncoding === 'string' ? lengthOrEncoding : 'utf8');
    if (fd === 1 || fd === 2) { native.writeOut(fd, bytes); return typeof bytes === 'string' ? native.utf8Length(bytes) : bytes.length; }
    return native.write(fd, bytes, offsetOrPosition === undefined ? null : offsetOrPosition);
  }
  let view = dataOf(data);
  const offset = offsetOrPosition === undefined ? 0 : offsetOrPosition;
  const length = lengthOrEncoding === undefined ? view.length - offset : lengthOrEncoding;
  view = view.subarray(offset, offset + length);
  if (fd === 1 || fd === 2) { native.writeOut(fd, view); return view.length; }
  return native.write(fd, view, position === undefined ? null : position);
}

export function ftruncateSync(fd, len = 0) { native.ftruncate(fd, len); }
export function fsyncSync(fd) { native.fsync(fd); }
export function fdatasyncSync(fd) { native.fsync(fd); }

// ---- FileHandle and fs/promises ---------------------------------------------

export class FileHandle {
  #fd;
  constructor(fd) { this.#fd = fd; }
  get fd() { return this.#fd; }
  #check() {
    if (this.#fd < 0) {
      const e = new Error('file closed');
      e.code = 'EBADF';
      e.syscall = 'read';
      throw e;
    }
    return this.#fd;
  }
  async read(buffer, offset, length, position) {
    if (buffer === undefined || (typeof buffer === 'object' && !ArrayBuffer.isView(buffer))) {
      const o = buffer || {};
      buffer = o.buffer || Buffer.alloc(16384);
      offset = o.offset; length = o.length; position = o.position;
    } else if (typeof offset === 'object' && offset !== null) {
      ({ offset, length, position } = offset);
    }
    offset = offset || 0;
    if (length === undefined) length = buffer.byteLength - offset;
    const bytesRead = readSync(this.#check(), buffer, offset, length, position === undefined ? null : position);
    return { bytesRead, buffer };
  }
  async write(data, offsetOrPosition, lengthOrEncoding, position) {
    if (typeof offsetOrPosition === 'object' && offsetOrPosition !== null && !(typeof data === 'string')) {
      ({ offset: offsetOrPosition, length: lengthOrEncoding, position } = offsetOrPosition);
    }
    const bytesWritten = writeSync(this.#check(), data, offsetOrPosition, lengthOrEncoding, position);
    return { bytesWritten, buffer: data };
  }
  async readFile(options) {
    const b = readAllFd(this.#check());
    const enc = encodingOf(options, null);
    return enc ? b.toString(enc) : b;
  }
  async writeFile(data, options) {
    const bytes = dataOf(data, encodingOf(options, 'utf8'));
    native.write(this.#check(), bytes, null);
  }
  async appendFile(data, options) { return this.writeFile(data, options); }
  async stat() { return fstatSync(this.#check()); }
  async truncate(len = 0) { native.ftruncate(this.#check(), len); }
  async sync() { native.fsync(this.#check()); }
  async datasync() { native.fsync(this.#check()); }
  async chmod() { /* permission changes go through fs.chmod on the path */ }
  async close() {
    if (this.#fd >= 0) { const fd = this.#fd; this.#fd = -1; native.close(fd); }
  }
  async [Symbol.asyncDispose]() { await this.close(); }
  async *readLines() {
    const text = await this.readFile('utf8');
    const lines = text.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    yield* lines;
  }
}

class Dir {
  #entries; #path;
  constructor(path, entries) { this.#path = path; this.#entries = entries; }
  get path() { return this.#path; }
  readSync() { return this.#entries.shift() || null; }
  async read() { return this.readSync(); }
  closeSync() { this.#entries = []; }
  async close() { this.closeSync(); }
  async *[Symbol.asyncIterator]() { let d; while ((d = this.readSync())) yield d; }
  *[Symbol.iterator]() { let d; while ((d = this.readSync())) yield d; }
}

export function opendirSync(path) {
  const p = toPath(path);
  return new Dir(p, readdirSync(p, { withFileTypes: true }));
}

const wrap = (fn) => async function (...args) { return fn(...args); };

export const promises = {
  access: wrap(accessSync),
  appendFile: wrap(appendFileSync),
  chmod: wrap(chmodSync),
  chown: wrap(chownSync),
  copyFile: wrap(copyFileSync),
  cp: wrap(cpSync),
  lchmod: wrap(lchmodSync),
  lchown: wrap(lchownSync),
  link: wrap(linkSync),
  lstat: wrap(lstatSync),
  lutimes: wrap(lutimesSync),
  mkdir: wrap(mkdirSync),
  mkdtemp: wrap(mkdtempSync),
  open: async (path, flags = 'r', mode = 0o666) => new FileHandle(openSync(path, flags, mode)),
  opendir: wrap(opendirSync),
  readdir: wrap(readdirSync),
  readFile: async (path, options) => (path instanceof FileHandle ? path.readFile(options) : readFileSync(path, options)),
  readlink: wrap(readlinkSync),
  realpath: wrap(realpathSync),
  rename: wrap(renameSync),
  rm: wrap(rmSync),
  rmdir: wrap(rmdirSync),
  stat: wrap(statSync),
  symlink: wrap(symlinkSync),
  truncate: wrap(truncateSync),
  unlink: wrap(unlinkSync),
  utimes: wrap(utimesSync),
  writeFile: async (file, data, options) => (file instanceof FileHandle ? file.writeFile(data, options) : writeFileSync(file, data, options)),
  constants,
};

// ---- callback API -----------------------------------------------------------

function callbackify(fn) {
  return function (...args) {
    const cb = args.pop();
    if (typeof cb !== 'function') throw argTypeError('cb', 'of type function', cb);
    queueMicrotask(() => {
      let r;
      try { r = fn(...args); } catch (e) { cb(e); return; }
      cb(null, r);
    });
  };
}

export const callbacks = {};
for (const name of ['access', 'appendFile', 'chmod', 'chown', 'copyFile', 'cp', 'lchmod', 'lchown', 'link', 'lstat', 'lutimes',
  'mkdir', 'mkdtemp', 'open', 'opendir', 'readdir', 'readFile', 'readlink', 'realpath', 'rename', 'rm', 'rmdir', 'stat',
  'symlink', 'truncate', 'unlink', 'utimes', 'writeFile', 'close', 'fstat', 'ftruncate', 'fsync', 'fdatasync']) {
  callbacks[name] = callbackify({
    access: accessSync, appendFile: appendFileSync, chmod: chmodSync, chown: chownSync, copyFile: copyFileSync, cp: cpSync,
    lchmod: lchmodSync, lchown: lchownSync, link: linkSync, lstat: lstatSync, lutimes: lutimesSync, mkdir: mkdirSync,
    mkdtemp: mkdtempSync, open: openSync, opendir: opendirSync, readdir: readdirSync, readFile: readFileSync,
    readlink: readlinkSync, realpath: realpathSync, rename: renameSync, rm: rmSync, rmdir: rmdirSync, stat: statSync,
    symlink: symlinkSync, truncate: truncateSync, unlink: unlinkSync, utimes: utimesSync, writeFile: writeFileSync,
    close: closeSync, fstat: fstatSync, ftruncate: ftruncateSync, fsync: fsyncSync, fdatasync: fdatasyncSync,
  }[name]);
}
callbacks.exists = (path, cb) => queueMicrotask(() => cb(existsSync(path)));
callbacks.read = (fd, buffer, offset, length, position, cb) => queueMicrotask(() => {
  let n;
  try { n = readSync(fd, buffer, offset, length, position); } catch (e) { cb(e); return; }
  cb(null, n, buffer);
});
callbacks.write = (fd, data, ...rest) => {
  const cb = rest.pop();
  queueMicrotask(() => {
    let n;
    try { n = writeSync(fd, data, ...rest); } catch (e) { cb(e); return; }
    cb(null, n, data);
  });
};

export { normalizeEncoding };
