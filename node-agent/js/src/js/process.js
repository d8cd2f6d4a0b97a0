// The `process` object: only the exec's env, argv, cwd and stdin; output
// goes to the exec's stdout/stderr streams.
import native from 'ac:native';
const { EventEmitter } = native.require('ac:events');
const { toBuffer } = native.require('ac:buffer');

function writer(fd) {
  return {
    fd,
    isTTY: false,
    columns: 80,
    writable: true,
    write(chunk, enc, cb) {
      if (typeof enc === 'function') { cb = enc; enc = undefined; }
      native.writeOut(fd, typeof chunk === 'string' ? chunk : chunk instanceof Uint8Array ? chunk : String(chunk));
      if (typeof cb === 'function') queueMicrotask(cb);
      return true;
    },
    end(chunk, enc, cb) { if (chunk !== undefined && typeof chunk !== 'function') this.write(chunk, enc); if (typeof cb === 'function') queueMicrotask(cb); },
    on() { return this; }, once() { return this; }, off() { return this; }, emit() { return false; },
  };
}

class Stdin extends EventEmitter {
  #data = null;
  #encoding = null;
  #done = false;
  fd = 0;
  isTTY = false;
  #take() {
    if (this.#done) return null;
    this.#done = true;
    const b = toBuffer(native.stdin());
    return this.#encoding ? b.toString(this.#encoding) : b;
  }
  setEncoding(enc) { this.#encoding = enc; return this; }
  resume() { this.#flow(); return this; }
  pause() { return this; }
  read() { return this.#take(); }
  on(name, fn) {
    super.on(name, fn);
    if (name === 'data' || name === 'readable' || name === 'end') this.#flow();
    return this;
  }
  #flow() {
    if (this.#data) return;
    this.#data = Promise.resolve().then(() => {
      const chunk = this.#take();
      if (chunk !== null && chunk.length) this.emit('data', chunk);
      this.emit('end');
      this.emit('close');
    });
  }
  async *[Symbol.asyncIterator]() {
    const chunk = this.#take();
    if (chunk !== null && chunk.length) yield chunk;
  }
}

const hrtime = (prev) => {
  const [s, ns] = native.hrtime();
  if (!prev) return [s, ns];
  let ds = s - prev[0];
  let dns = ns - prev[1];
  if (dns < 0) { ds -= 1; dns += 1e9; }
  return [ds, dns];
};
hrtime.bigint = () => { const [s, ns] = native.hrtime(); return BigInt(s) * 1000000000n + BigInt(ns); };

const started = Date.now();

class Process extends EventEmitter {
  env = native.env();
  argv = native.argv();
  argv0 = 'node';
  execArgv = [];
  execPath = '/usr/local/bin/node';
  platform = 'linux';
  arch = 'x64';
  pid = 1;
  ppid = 0;
  title = 'node';
  version = 'v20.0.0';
  versions = { node: '20.0.0', quickjs: 'ng' };
  release = { name: 'node' };
  exitCode = undefined;
  stdout = writer(1);
  stderr = writer(2);
  stdin = new Stdin();
  hrtime = hrtime;
  cwd() { return native.cwd(); }
  chdir(dir) { native.chdir(String(dir)); }
  exit(code) {
    if (code === undefined) code = this.exitCode === undefined ? 0 : this.exitCode;
    native.exit(Number(code) | 0);
  }
  abort() { native.exit(134); }
  nextTick(fn, ...args) { queueMicrotask(() => fn(...args)); }
  uptime() { return (Date.now() - started) / 1000; }
  memoryUsage() {
    const [rss, used] = native.memoryUsage();
    return { rss, heapTotal: rss, heapUsed: used, external: 0, arrayBuffers: 0 };
  }
  cpuUsage() { return { user: 0, system: 0 }; }
  umask() { return 0o022; }
  getuid() { return 0; }
  getgid() { return 0; }
  geteuid() { return 0; }
  getegid() { return 0; }
  emitWarning(w, type) {
    const text = typeof w === 'string' ? (type ? type : 'Warning') + ': ' + w : String(w && w.stack || w);
    native.writeOut(2, '(node) ' + text + '\n');
  }
}

export const process = new Process();
