// git: the computer's git, `import git from 'git'`. Every call runs a git
// command line through the same Rust porcelain as the shell's `git`
// (crate agentcomputer-git), on the repositories under /workspace; this
// file only builds argument lists and parses what git prints.
import native from 'ac:native';
const { process } = native.require('ac:process');
const { resolve } = native.require('ac:path');

// Field and record separators of `log`: bytes no commit text holds.
const FS = '\x00';
// One commit's fields; the message comes last and takes the rest, so no
// byte inside it can start a field or a commit of its own.
const COMMIT_FORMAT = '--format=%P%x00%an%x00%ae%x00%at%x00%cn%x00%ce%x00%ct%x00%B';

function where(opts) {
  const dir = opts && (opts.dir !== undefined ? opts.dir : opts.cwd);
  return dir === undefined ? process.cwd() : String(dir);
}

function exec(args, opts = {}) {
  if (!Array.isArray(args)) throw new TypeError('git: the arguments must be an array of strings');
  const env = Object.assign({}, process.env, opts.env || {});
  const pairs = [];
  for (const k of Object.keys(env)) if (env[k] !== undefined) pairs.push([k, String(env[k])]);
  const [code, stdout, stderr] = native.gitRun(args.map(String), where(opts), pairs);
  return { code, stdout, stderr };
}

function fail(args, r) {
  const text = r.stderr.trim() || r.stdout.trim() || `git ${args[0]} exited with code ${r.code}`;
  const e = new Error(text);
  e.code = r.code;
  e.stdout = r.stdout;
  e.stderr = r.stderr;
  e.args = args;
  return e;
}

// Runs `git ARGS` and throws on a non-zero exit; gives stdout.
function check(args, opts) {
  const r = exec(args, opts);
  if (r.code !== 0) throw fail(args, r);
  return r.stdout;
}

const lines = (s) => s.split('\n').filter((l) => l !== '');

// A path as `status --porcelain` prints it: C-quoted when it has special bytes.
function unquote(p) {
  if (!p.startsWith('"') || !p.endsWith('"') || p.length < 2) return p;
  const bytes = [];
  const body = p.slice(1, -1);
  const esc = { n: 10, t: 9, r: 13, a: 7, b: 8, f: 12, v: 11, '\\': 92, '"': 34 };
  let text = '';
  const flush = () => { for (const b of native.utf8Encode(text)) bytes.push(b); text = ''; };
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== '\\') { text += c; continue; }
    flush();
    const n = body[++i];
    if (n >= '0' && n <= '7') { bytes.push(parseInt(body.substr(i, 3), 8)); i += 2; }
    else bytes.push(esc[n] !== undefined ? esc[n] : n.charCodeAt(0));
  }
  flush();
  return native.utf8Decode(new Uint8Array(bytes));
}

function parseStatus(out) {
  const entries = [];
  for (const l of lines(out)) {
    if (l.startsWith('## ')) continue;
    const index = l[0];
    const worktree = l[1];
    let path = l.slice(3);
    let from;
    const arrow = path.indexOf(' -> ');
    if ((index === 'R' || index === 'C') && arrow >= 0) {
      from = unquote(path.slice(0, arrow));
      path = path.slice(arrow + 4);
    }
    const e = { path: unquote(path), index, worktree };
    if (from !== undefined) e.from = from;
    entries.push(e);
  }
  return entries;
}

const CONFLICT = new Set(['DD', 'AU', 'UD', 'UA', 'DU', 'AA', 'UU']);

/** The commit `oid` (40 hex digits, from `log --format=%H`) as an object. */
function commitOf(oid, opts) {
  const out = check(['show', '-s', COMMIT_FORMAT, oid], opts);
  const f = out.split(FS);
  const [parents, an, ae, at, cn, ce, ct] = f;
  return {
    oid,
    message: f.slice(7).join(FS).replace(/\n$/, '').replace(/\n$/, ''),
    parents: parents ? parents.split(' ') : [],
    author: { name: an, email: ae, timestamp: Number(at) },
    committer: { name: cn, email: ce, timestamp: Number(ct) },
  };
}

function authorEnv(author) {
  if (author === undefined) return {};
  if (typeof author === 'string') {
    const m = /^(.*?)\s*<([^>]*)>\s*$/.exec(author);
    if (!m) throw new TypeError('git.commit: author must be "Name <email>" or { name, email }');
    return { GIT_AUTHOR_NAME: m[1], GIT_AUTHOR_EMAIL: m[2] };
  }
  const env = {};
  if (author.name !== undefined) env.GIT_AUTHOR_NAME = String(author.name);
  if (author.email !== undefined) env.GIT_AUTHOR_EMAIL = String(author.email);
  if (author.timestamp !== undefined) env.GIT_AUTHOR_DATE = `@${Math.floor(Number(author.timestamp))} +0000`;
  return env;
}

const list = (v) => (v === undefined ? [] : Array.isArray(v) ? v.map(String) : [String(v)]);

/** `git ARGS…`: `{ code, stdout, stderr }`; never throws for a non-zero exit. */
export async function run(args, opts = {}) {
  return exec(args, opts);
}

/** `git init [-b initialBranch] [dir]`, relative to `cwd`; gives `{ dir }`, absolute. */
export async function init(opts = {}) {
  const cwd = opts.cwd === undefined ? process.cwd() : String(opts.cwd);
  const args = ['init', '-q'];
  if (opts.initialBranch !== undefined) args.push('-b', String(opts.initialBranch));
  if (opts.dir !== undefined) args.push(String(opts.dir));
  check(args, { cwd, env: opts.env });
  return { dir: resolve(cwd, opts.dir === undefined ? '.' : String(opts.dir)) };
}

/** `git add`: paths (a string or an array), or `{ all: true }` (`-A`), or `{ paths, dir }`. */
export async function add(paths, opts = {}) {
  if (paths && typeof paths === 'object' && !Array.isArray(paths)) { opts = paths; paths = opts.paths; }
  const args = ['add'];
  if (opts.all) args.push('-A');
  if (opts.force) args.push('-f');
  const ps = list(paths);
  if (!opts.all && ps.length === 0) throw new TypeError('git.add: give paths or { all: true }');
  if (ps.length) args.push('--', ...ps);
  check(args, opts);
}

/** `git commit`: gives `{ oid }` of the new commit. */
export async function commit(opts = {}) {
  if (typeof opts === 'string') opts = { message: opts };
  if (opts.message === undefined) throw new TypeError('git.commit: message is required');
  const args = ['commit', '-q', '-m', String(opts.message)];
  if (opts.all) args.push('-a');
  if (opts.allowEmpty) args.push('--allow-empty');
  if (opts.amend) args.push('--amend');
  const env = Object.assign({}, opts.env || {}, authorEnv(opts.author));
  check(args, { ...opts, env });
  return { oid: check(['rev-parse', 'HEAD'], opts).trim() };
}

/** `git status --porcelain`: `[{ path, index, worktree, from? }]` (git's two status letters; `?` untracked). */
export async function status(opts = {}) {
  const u = opts.untracked === undefined ? 'all' : String(opts.untracked);
  return parseStatus(check(['status', '--porcelain', `--untracked-files=${u}`], opts));
}

/** `git log`: `[{ oid, message, parents, author, committer }]`, newest first. */
export async function log(opts = {}) {
  // The ids first (nothing in a commit can forge one), then each commit.
  const args = ['log', '--format=%H'];
  const n = opts.n !== undefined ? opts.n : opts.depth;
  if (n !== undefined) args.push(`--max-count=${Math.floor(Number(n))}`);
  if (opts.ref !== undefined) args.push(String(opts.ref));
  const ps = list(opts.path !== undefined ? opts.path : opts.paths);
  if (ps.length) args.push('--', ...ps);
  const oids = lines(check(args, opts)).filter((l) => /^[0-9a-f]{40}$/.test(l));
  return oids.map((oid) => commitOf(oid, opts));
}

/** `git diff`: patch text, or the changed paths with `nameOnly`. */
export async function diff(opts = {}) {
  const args = ['diff'];
  if (opts.cached || opts.staged) args.push('--cached');
  if (opts.nameOnly) args.push('--name-only');
  if (opts.from !== undefined) args.push(String(opts.from));
  if (opts.to !== undefined) {
    if (opts.from === undefined) throw new TypeError('git.diff: to needs from');
    args.push(String(opts.to));
  }
  const ps = list(opts.paths);
  if (ps.length) args.push('--', ...ps);
  const out = check(args, opts);
  return opts.nameOnly ? lines(out).map(unquote) : out;
}

/**
 * `git branch`: without a name, the branch names (`[string]`); with one,
 * creates it at `start` (default HEAD; `force` moves an existing one);
 * `{ delete: name, force }` deletes one.
 */
export async function branch(name, opts = {}) {
  if (name && typeof name === 'object') { opts = name; name = opts.name; }
  if (opts.delete !== undefined) {
    check(['branch', opts.force ? '-D' : '-d', String(opts.delete)], opts);
    return;
  }
  if (name === undefined) {
    return lines(check(['branch', '--list'], opts))
      .map((l) => l.slice(2))
      .filter((l) => !l.startsWith('('));
  }
  const args = ['branch'];
  if (opts.force) args.push('-f');
  args.push(String(name));
  if (opts.start !== undefined) args.push(String(opts.start));
  check(args, opts);
}

/** `git checkout [-b] REF` (`{ create: true }` makes the branch; `force` drops local changes). */
export async function checkout(ref, opts = {}) {
  if (ref && typeof ref === 'object') { opts = ref; ref = opts.ref; }
  const args = ['checkout', '-q'];
  if (opts.force) args.push('-f');
  if (opts.create) args.push('-b');
  args.push(String(ref));
  if (opts.create && opts.start !== undefined) args.push(String(opts.start));
  check(args, opts);
}

/**
 * `git merge REF`: `{ oid, conflicts: [] }` when it committed (or fast-forwarded),
 * `{ conflicts: [paths] }` when it stopped on conflicts (the work tree has the
 * markers; resolve, add and commit, or `run(['merge', '--abort'])`).
 */
export async function merge(ref, opts = {}) {
  if (ref && typeof ref === 'object') { opts = ref; ref = opts.ref; }
  const args = ['merge'];
  if (opts.noFastForward || opts.noFf) args.push('--no-ff');
  if (opts.fastForwardOnly || opts.ffOnly) args.push('--ff-only');
  if (opts.message !== undefined) args.push('-m', String(opts.message));
  args.push(String(ref));
  const r = exec(args, opts);
  if (r.code === 0) return { oid: check(['rev-parse', 'HEAD'], opts).trim(), conflicts: [] };
  if (r.code === 1) {
    const s = exec(['status', '--porcelain', '--untracked-files=no'], opts);
    const conflicts = s.code === 0
      ? parseStatus(s.stdout).filter((e) => CONFLICT.has(e.index + e.worktree)).map((e) => e.path)
      : [];
    if (conflicts.length) return { conflicts };
  }
  throw fail(args, r);
}

/**
 * `git tag`: without a name, the tag names; with one, tags `ref` (default
 * HEAD), annotated when there is a `message`; `{ delete: name }` deletes one.
 */
export async function tag(name, opts = {}) {
  if (name && typeof name === 'object') { opts = name; name = opts.name; }
  if (opts.delete !== undefined) {
    check(['tag', '-d', String(opts.delete)], opts);
    return;
  }
  if (name === undefined) return lines(check(['tag', '--list'], opts));
  const args = ['tag'];
  if (opts.force) args.push('-f');
  if (opts.message !== undefined) args.push('-m', String(opts.message));
  args.push(String(name));
  if (opts.ref !== undefined) args.push(String(opts.ref));
  check(args, opts);
}

/** `git reset --MODE [REF]` (mode `soft`, `mixed` (default) or `hard`), or `git reset [REF] -- paths`. */
export async function reset(opts = {}) {
  if (typeof opts === 'string') opts = { ref: opts };
  const args = ['reset', '-q'];
  const ps = list(opts.paths);
  if (!ps.length) {
    const mode = opts.mode === undefined ? 'mixed' : String(opts.mode);
    if (!['soft', 'mixed', 'hard'].includes(mode)) throw new TypeError(`git.reset: unknown mode '${mode}'`);
    args.push(`--${mode}`);
  }
  if (opts.ref !== undefined) args.push(String(opts.ref));
  if (ps.length) args.push('--', ...ps);
  check(args, opts);
}

/** The current branch's name, or `null` when HEAD is detached. */
export async function currentBranch(opts = {}) {
  const b = check(['branch', '--show-current'], opts).trim();
  return b === '' ? null : b;
}

/** The object id `ref` names (`HEAD`, a branch, a tag, `HEAD~1`, …). */
export async function resolveRef(ref, opts = {}) {
  if (ref && typeof ref === 'object') { opts = ref; ref = opts.ref; }
  return check(['rev-parse', '--verify', String(ref === undefined ? 'HEAD' : ref)], opts).trim();
}

export default {
  run, init, add, commit, status, log, diff, branch, checkout, merge, tag, reset, currentBranch, resolveRef,
};
