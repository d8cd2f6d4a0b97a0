// The parts of scripts/npm-mirror.sh that read JSON: node 20 or later,
// nothing but node's own modules (and, for `trim`, the semver package
// Verdaccio carries).
//
//   node mirror.mjs config MODE STORAGE UPSTREAM LOG_LEVEL
//       prints Verdaccio's configuration (JSON, which its YAML parser
//       reads): MODE "fill" proxies UPSTREAM and keeps what passes through;
//       MODE "serve" has no uplink at all
//   node mirror.mjs list LOCKFILE UPSTREAM
//       checks that a mirror can serve what the lockfile names (a version 2
//       or 3 lockfile, every package from the registry)
//   node mirror.mjs fetch LOCKFILE UPSTREAM MIRROR_URL [--check]
//       gets every package the lockfile names from the mirror and checks
//       each tarball against the lockfile's integrity; with --check also
//       that the mirror's metadata lists each version. Prints what is
//       missing and exits 1 if anything is.
//   node mirror.mjs stored LOCKFILE UPSTREAM STORAGE
//       checks, without the network, that STORAGE still holds the tarball
//       and the metadata of every package the lockfile names; prints what
//       is missing and exits 1 if anything is
//   node mirror.mjs trim STORAGE VERDACCIO_DIR
//       leaves in each stored package's metadata only the versions whose
//       tarball is stored, so that Verdaccio, which would fetch a missing
//       tarball from the address the metadata gives even with no uplink,
//       answers 404 instead
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [cmd, ...args] = process.argv.slice(2);
const die = (msg) => {
  console.error(`npm-mirror: ${msg}`);
  process.exit(1);
};
const withSlash = (url) => (url.endsWith("/") ? url : `${url}/`);

function config(mode, storage, upstream, level) {
  const rule = { access: "$all" };
  if (mode === "fill") rule.proxy = "upstream";
  const conf = {
    storage,
    // No one may add a user or publish: the mirror only serves.
    auth: { htpasswd: { file: "./htpasswd", max_users: -1 } },
    uplinks: mode === "fill" ? { upstream: { url: withSlash(upstream), timeout: "60s", max_fails: 10 } } : {},
    packages: { "@*/*": rule, "**": rule },
    web: { enable: false },
    log: { type: "stdout", format: "pretty", level, colors: false },
  };
  console.log(JSON.stringify(conf, null, 2));
}

// Whether an os/cpu list of package.json admits `value` (npm's rule:
// names allow, "!name" refuses).
function admits(list, value) {
  if (!Array.isArray(list) || list.length === 0) return true;
  if (list.includes(`!${value}`)) return false;
  const allowed = list.filter((v) => !v.startsWith("!"));
  return allowed.length === 0 || allowed.includes(value);
}

// The packages of a lockfile (v2 or v3) that come from the registry, as
// { name, version, path, integrity }; path is the tarball's, relative to
// the registry's URL.
function packagesOf(lockfile, upstream) {
  let lock;
  try {
    lock = JSON.parse(fs.readFileSync(lockfile, "utf8"));
  } catch (e) {
    die(`cannot read ${lockfile}: ${e.message}`);
  }
  if (!lock.packages) {
    die(`${lockfile} is lockfileVersion ${lock.lockfileVersion ?? "?"}: make a version 2 or 3 one with npm 7 or later (npm install --package-lock-only)`);
  }
  const registries = [withSlash(upstream), "https://registry.npmjs.org/"];
  const out = new Map();
  const foreign = [];
  for (const [where, entry] of Object.entries(lock.packages)) {
    // The project itself, workspaces and links, and packages that come
    // inside another package's tarball.
    if (where === "" || entry.link || entry.inBundle || !where.includes("node_modules/")) continue;
    // Optional packages for another platform: npm leaves them out here.
    if (!admits(entry.os, process.platform) || !admits(entry.cpu, process.arch)) continue;
    const name = entry.name ?? where.slice(where.lastIndexOf("node_modules/") + "node_modules/".length);
    const version = entry.version;
    let tarball;
    if (entry.resolved) {
      const registry = registries.find((r) => entry.resolved.startsWith(r));
      if (!registry) {
        foreign.push(`${name} (${entry.resolved})`);
        continue;
      }
      tarball = entry.resolved.slice(registry.length);
    } else if (version) {
      tarball = `${name}/-/${name.split("/").pop()}-${version}.tgz`;
    } else {
      foreign.push(`${name} (${where}: no version)`);
      continue;
    }
    out.set(`${name}@${version}`, { name, version, tarball, integrity: entry.integrity });
  }
  if (foreign.length) {
    die(`not from the npm registry, so a registry mirror cannot serve them:\n  ${foreign.join("\n  ")}`);
  }
  return [...out.values()];
}

// Whether `data` matches one of the hashes of an SRI string.
function matches(integrity, data) {
  if (!integrity) return true;
  return integrity.split(/\s+/).some((sri) => {
    const dash = sri.indexOf("-");
    const algo = sri.slice(0, dash);
    try {
      return createHash(algo).update(data).digest("base64") === sri.slice(dash + 1);
    } catch {
      return false;
    }
  });
}

async function fetchAll(lockfile, upstream, mirror, check) {
  const pkgs = packagesOf(lockfile, upstream);
  mirror = withSlash(mirror);
  const missing = [];
  let bytes = 0;
  async function one(p) {
    const id = `${p.name}@${p.version}`;
    try {
      const res = await fetch(mirror + p.tarball);
      if (!res.ok) return missing.push(`${id}: ${res.status} ${res.statusText} for ${mirror}${p.tarball}`);
      const data = Buffer.from(await res.arrayBuffer());
      if (!matches(p.integrity, data)) return missing.push(`${id}: the tarball does not match the lockfile's integrity`);
      bytes += data.length;
      if (check) {
        const meta = await fetch(mirror + p.name.replace("/", "%2f"));
        const versions = meta.ok ? (await meta.json()).versions ?? {} : {};
        if (!versions[p.version]) missing.push(`${id}: the mirror's metadata of ${p.name} does not list ${p.version}`);
      }
    } catch (e) {
      missing.push(`${id}: ${e.cause?.message ?? e.message}`);
    }
  }
  const queue = [...pkgs];
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (queue.length) await one(queue.shift());
  }));
  if (missing.length) {
    die(`${missing.length} of ${pkgs.length} packages not in the mirror:\n  ${missing.sort().join("\n  ")}`);
  }
  console.error(`npm-mirror: ${pkgs.length} packages, ${(bytes / 1048576).toFixed(1)} MiB of tarballs${check ? ", all served by the mirror alone" : ""}`);
}

function trim(storage, verdaccioDir) {
  const semver = createRequire(path.join(verdaccioDir, "node_modules", "verdaccio", "package.json"))("semver");
  const dirs = [];
  for (const d of fs.readdirSync(storage, { withFileTypes: true })) {
    if (!d.isDirectory() || d.name.startsWith(".")) continue;
    const p = path.join(storage, d.name);
    if (d.name.startsWith("@")) {
      for (const s of fs.readdirSync(p, { withFileTypes: true })) if (s.isDirectory()) dirs.push(path.join(p, s.name));
    } else {
      dirs.push(p);
    }
  }
  for (const dir of dirs) {
    const file = path.join(dir, "package.json");
    if (!fs.existsSync(file)) continue;
    const meta = JSON.parse(fs.readFileSync(file, "utf8"));
    const stored = new Set(fs.readdirSync(dir).filter((f) => f.endsWith(".tgz")));
    const versions = {};
    for (const [v, m] of Object.entries(meta.versions ?? {})) {
      const tarball = m?.dist?.tarball;
      if (tarball && stored.has(path.posix.basename(new URL(tarball).pathname))) versions[v] = m;
    }
    if (Object.keys(versions).length === 0) {
      fs.rmSync(file);
      continue;
    }
    const kept = Object.keys(versions);
    const tags = {};
    for (const [tag, v] of Object.entries(meta["dist-tags"] ?? {})) if (versions[v]) tags[tag] = v;
    if (!tags.latest) tags.latest = semver.maxSatisfying(kept, "*") ?? semver.rsort(kept)[0];
    const time = {};
    for (const [k, t] of Object.entries(meta.time ?? {})) if (versions[k] || k === "created" || k === "modified") time[k] = t;
    const distfiles = {};
    for (const [f, d] of Object.entries(meta._distfiles ?? {})) if (stored.has(f)) distfiles[f] = d;
    const next = { ...meta, versions, "dist-tags": tags, time, _distfiles: distfiles, _uplinks: {} };
    const text = JSON.stringify(next, null, "\t");
    if (text === JSON.stringify(meta, null, "\t")) continue;
    fs.writeFileSync(`${file}.trim`, text);
    fs.renameSync(`${file}.trim`, file);
  }
}

function stored(lockfile, upstream, storage) {
  const missing = [];
  for (const p of packagesOf(lockfile, upstream)) {
    const dir = path.join(storage, ...p.name.split("/"));
    const tgz = path.join(dir, path.posix.basename(p.tarball));
    let meta = null;
    try {
      meta = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
    } catch {}
    if (!fs.existsSync(tgz) || !meta?.versions?.[p.version]) missing.push(`${p.name}@${p.version}`);
  }
  if (missing.length) {
    console.error(`npm-mirror: ${storage} no longer holds ${missing.join(", ")}`);
    process.exit(1);
  }
}

switch (cmd) {
  case "config":
    config(...args);
    break;
  case "list":
    packagesOf(args[0], args[1]);
    break;
  case "fetch":
    await fetchAll(args[0], args[1], args[2], args[3] === "--check");
    break;
  case "stored":
    stored(...args);
    break;
  case "trim":
    trim(...args);
    break;
  default:
    die(`unknown helper command ${cmd}`);
}
