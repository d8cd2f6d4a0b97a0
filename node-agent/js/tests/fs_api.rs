//! node:fs over the engine: every call, Node's error shape, visibility
//! between JS and the engine, and isolation from the host.

mod common;

use agentcomputer_fs::{FileKind, Owner, ROOT_INO, WriteMode};
use common::*;
use serde_json::json;

#[tokio::test]
async fn write_read_append_with_encodings() {
    let c = computer();
    let r = run(
        &c.fs,
        "import { writeFile, readFile, appendFile } from 'node:fs/promises';\n\
         await writeFile('a.txt', 'héllo');\n\
         await appendFile('/workspace/a.txt', Buffer.from(' world'));\n\
         await writeFile('b.bin', 'AAEC/w==', 'base64');\n\
         await writeFile('c.txt', new Uint16Array([0x6968]));\n\
         await writeFile('d.txt', 'x', { flag: 'a' }); await writeFile('d.txt', 'y', { flag: 'a' });\n\
         export default async () => [await readFile('a.txt', 'utf8'), [...await readFile('b.bin')],\n\
           (await readFile('b.bin')).toString('hex'), await readFile('c.txt', { encoding: 'utf8' }),\n\
           Buffer.isBuffer(await readFile('a.txt')), await readFile('d.txt', 'utf8')];",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!(["héllo world", [0, 1, 2, 255], "000102ff", "hi", true, "xy"])
    );
}

#[tokio::test]
async fn files_written_by_js_are_visible_to_the_engine_and_back() {
    let c = computer();
    let dir = c.fs.mkdir(ROOT_INO, b"shared", 0o755, Owner::ROOT).unwrap();
    c.fs.write_all(
        dir.ino,
        b"from-engine.txt",
        b"engine wrote this",
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
    let r = run(
        &c.fs,
        "import fs from 'node:fs';\n\
         fs.writeFileSync('/workspace/shared/from-js.txt', 'js wrote this');\n\
         export default () => fs.readFileSync('shared/from-engine.txt', 'utf8');",
    )
    .await;
    assert_eq!(r.ok(), &json!("engine wrote this"));
    let a =
        c.fs.resolve(ROOT_INO, b"/shared/from-js.txt", true)
            .unwrap();
    assert_eq!(c.fs.read_all(a.ino).unwrap(), b"js wrote this");
    assert_eq!(a.perm, 0o644, "0o666 minus the 022 umask");
}

#[tokio::test]
async fn mkdir_readdir_stat_lstat() {
    let c = computer();
    let r = run(
        &c.fs,
        "import { mkdir, readdir, stat, lstat, writeFile, symlink } from 'node:fs/promises';\n\
         const first = await mkdir('x/y/z', { recursive: true });\n\
         const again = await mkdir('x/y/z', { recursive: true });\n\
         await writeFile('x/f.txt', '12345');\n\
         await symlink('f.txt', 'x/link');\n\
         const names = await readdir('x');\n\
         const typed = (await readdir('x', { withFileTypes: true })).map(d => [d.name, d.isFile(), d.isDirectory(), d.isSymbolicLink(), d.parentPath]);\n\
         const deep = await readdir('x', { recursive: true });\n\
         const s = await stat('x/link'); const l = await lstat('x/link'); const d = await stat('x');\n\
         export default () => ({ first, again: again ?? null, names, typed, deep: deep.sort(),\n\
           size: s.size, file: s.isFile(), link: l.isSymbolicLink(), dir: d.isDirectory(), mode: (s.mode & 0o777).toString(8),\n\
           mtime: s.mtime instanceof Date && Math.abs(s.mtimeMs - Date.now()) < 60000, nlink: d.nlink >= 2, ino: s.ino > 0 });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({
            "first": "/workspace/x", "again": null, "names": ["y", "f.txt", "link"],
            "typed": [["y", false, true, false, "x"], ["f.txt", true, false, false, "x"], ["link", false, false, true, "x"]],
            "deep": ["f.txt", "link", "y", "y/z"],
            "size": 5, "file": true, "link": true, "dir": true, "mode": "644", "mtime": true, "nlink": true, "ino": true
        })
    );
}

#[tokio::test]
async fn rm_rename_copy_symlink_readlink_link() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs/promises'; import { existsSync } from 'node:fs';\n\
         await fs.mkdir('t/a/b', { recursive: true });\n\
         for (let i = 0; i < 30; i++) await fs.writeFile(`t/a/b/f${i}`, 'x');\n\
         await fs.writeFile('one.txt', 'one'); await fs.chmod('one.txt', 0o600);\n\
         await fs.copyFile('one.txt', 'two.txt');\n\
         let excl = null; try { await fs.copyFile('one.txt', 'two.txt', fs.constants.COPYFILE_EXCL) } catch (e) { excl = e.code }\n\
         await fs.rename('two.txt', 't/three.txt');\n\
         await fs.symlink('/workspace/t/three.txt', 'abs-link');\n\
         await fs.link('one.txt', 'hard.txt');\n\
         const viaLink = await fs.readFile('abs-link', 'utf8');\n\
         const target = await fs.readlink('abs-link');\n\
         const nlink = (await fs.stat('one.txt')).nlink;\n\
         const copiedMode = ((await fs.stat('t/three.txt')).mode & 0o777).toString(8);\n\
         let notEmpty = null; try { await fs.rmdir('t') } catch (e) { notEmpty = e.code }\n\
         let isDir = null; try { await fs.rm('t') } catch (e) { isDir = e.code }\n\
         await fs.rm('t', { recursive: true });\n\
         await fs.rm('missing', { force: true });\n\
         await fs.unlink('hard.txt');\n\
         export default () => ({ excl, viaLink, target, nlink, copiedMode, notEmpty, isDir, t: existsSync('t'), hard: existsSync('hard.txt') });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"excl": "EEXIST", "viaLink": "one", "target": "/workspace/t/three.txt", "nlink": 2, "copiedMode": "600",
                "notEmpty": "ENOTEMPTY", "isDir": "EISDIR", "t": false, "hard": false})
    );
}

#[tokio::test]
async fn chmod_access_utimes_truncate_realpath_mkdtemp() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs/promises'; import { constants } from 'node:fs';\n\
         await fs.writeFile('s.sh', 'echo hi');\n\
         let noExec = null; try { await fs.access('s.sh', constants.X_OK) } catch (e) { noExec = e.code }\n\
         await fs.chmod('s.sh', 0o755);\n\
         await fs.access('s.sh', constants.X_OK);\n\
         await fs.utimes('s.sh', 1000, new Date(2000_000));\n\
         const st = await fs.stat('s.sh');\n\
         await fs.truncate('s.sh', 4);\n\
         await fs.mkdir('real/dir', { recursive: true }); await fs.symlink('real', 'alias');\n\
         const rp = await fs.realpath('alias/dir/../dir');\n\
         const tmp = await fs.mkdtemp('/tmp/work-');\n\
         export default async () => ({ noExec, mode: (st.mode & 0o777).toString(8), atime: st.atimeMs, mtime: st.mtimeMs,\n\
           text: await fs.readFile('s.sh', 'utf8'), rp, tmp: /^\\/tmp\\/work-[A-Za-z0-9]{6}$/.test(tmp),\n\
           tmpIsDir: (await fs.stat(tmp)).isDirectory() });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"noExec": "EACCES", "mode": "755", "atime": 1000000, "mtime": 2000000, "text": "echo",
                "rp": "/workspace/real/dir", "tmp": true, "tmpIsDir": true})
    );
}

#[tokio::test]
async fn file_handles_read_write_stat_close() {
    let c = computer();
    let r = run(
        &c.fs,
        "import { open, readFile } from 'node:fs/promises';\n\
         const w = await open('h.txt', 'w');\n\
         const { bytesWritten } = await w.write('hello ');\n\
         await w.write(Buffer.from('world'));\n\
         await w.write('!', 0);\n\
         const size = (await w.stat()).size;\n\
         await w.sync(); await w.close();\n\
         const h = await open('h.txt', 'r');\n\
         const buf = Buffer.alloc(5);\n\
         const first = await h.read(buf, 0, 5, null);\n\
         const second = await h.read({ buffer: Buffer.alloc(3), position: 8 });\n\
         const rest = await h.readFile('utf8');\n\
         let readOnly = null; try { await h.write('x') } catch (e) { readOnly = e.code }\n\
         await h.close();\n\
         let closed = null; try { await h.read(Buffer.alloc(1)) } catch (e) { closed = e.code }\n\
         const a = await open('h.txt', 'a'); await a.write('+'); await a.close();\n\
         let excl = null; try { await open('h.txt', 'wx') } catch (e) { excl = e.code }\n\
         export default async () => ({ bytesWritten, size, first: [first.bytesRead, buf.toString()],\n\
           second: [second.bytesRead, second.buffer.toString()], rest, readOnly, closed, excl, all: await readFile('h.txt', 'utf8') });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"bytesWritten": 6, "size": 11, "first": [5, "!ello"], "second": [3, "rld"], "rest": " world",
                "readOnly": "EBADF", "closed": "EBADF", "excl": "EEXIST", "all": "!ello world+"})
    );
}

#[tokio::test]
async fn errors_carry_node_fields() {
    let c = computer();
    let r = run(
        &c.fs,
        "import { readFile, mkdir, rename } from 'node:fs/promises';\n\
         const errs = [];\n\
         try { await readFile('/workspace/missing.txt') } catch (e) { errs.push([e.message, e.code, e.errno, e.syscall, e.path, e instanceof Error]) }\n\
         await mkdir('d');\n\
         try { await mkdir('d') } catch (e) { errs.push([e.message, e.code, e.errno, e.syscall, e.path]) }\n\
         try { await readFile('d') } catch (e) { errs.push([e.code, e.syscall]) }\n\
         try { await rename('nope', 'x') } catch (e) { errs.push([e.message, e.dest]) }\n\
         export default () => errs;",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!([
            [
                "ENOENT: no such file or directory, open '/workspace/missing.txt'",
                "ENOENT",
                -2,
                "open",
                "/workspace/missing.txt",
                true
            ],
            [
                "EEXIST: file already exists, mkdir 'd'",
                "EEXIST",
                -17,
                "mkdir",
                "d"
            ],
            ["EISDIR", "read"],
            [
                "ENOENT: no such file or directory, rename 'nope' -> 'x'",
                "x"
            ]
        ])
    );
}

#[tokio::test]
async fn the_host_is_invisible() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs/promises';\n\
         const codes = [];\n\
         for (const p of ['/etc/passwd', '../../etc/passwd', '/workspace/../../../etc/passwd', '/proc/self/environ', '/root']) {\n\
           try { await fs.readFile(p); codes.push('READ ' + p) } catch (e) { codes.push(e.code) }\n\
         }\n\
         let mk = null; try { await fs.mkdir('/etc') } catch (e) { mk = e.code }\n\
         let up = null; try { await fs.writeFile('../../escape.txt', 'x') } catch (e) { up = e.code }\n\
         await fs.writeFile('../../workspace/back-inside.txt', 'stays inside');\n\
         export default async () => ({ codes, mk, root: await fs.readdir('/'), inside: await fs.readFile('/workspace/back-inside.txt', 'utf8'), up,\n\
           envKeys: Object.keys(process.env).length });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"codes": ["ENOENT", "ENOENT", "ENOENT", "ENOENT", "ENOENT"], "mk": "EACCES",
                "root": ["tmp", "workspace"], "inside": "stays inside", "up": "EACCES", "envKeys": 0})
    );
    // `..` past /workspace reaches only the read-only `/` holding the mounts.
    assert!(c.fs.resolve(ROOT_INO, b"/escape.txt", true).is_err());
    let a = c.fs.resolve(ROOT_INO, b"/back-inside.txt", true).unwrap();
    assert_eq!(a.kind, FileKind::RegularFile);
}

#[tokio::test]
async fn tmp_is_private_scratch_per_exec() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs/promises';\n\
         await fs.writeFile('/tmp/scratch.txt', 'temp');\n\
         let xdev = null; try { await fs.rename('/tmp/scratch.txt', '/workspace/moved.txt') } catch (e) { xdev = e.code }\n\
         await fs.copyFile('/tmp/scratch.txt', '/workspace/copied.txt');\n\
         process.chdir('/tmp'); await fs.writeFile('rel.txt', 'r');\n\
         export default async () => ({ xdev, list: (await fs.readdir('/tmp')).sort(), cwd: process.cwd() });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"xdev": "EXDEV", "list": ["rel.txt", "scratch.txt"], "cwd": "/tmp"})
    );
    // The copy reached the computer; the scratch space did not survive.
    assert!(c.fs.resolve(ROOT_INO, b"/copied.txt", true).is_ok());
    assert!(c.fs.resolve(ROOT_INO, b"/tmp", true).is_err());
    let r = run(
        &c.fs,
        "import fs from 'node:fs/promises'; export default async () => fs.readdir('/tmp');",
    )
    .await;
    assert_eq!(r.ok(), &json!([]));
}

#[tokio::test]
async fn sync_and_callback_apis() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs'; import { promisify } from 'node:util';\n\
         fs.mkdirSync('cb/inner', { recursive: true });\n\
         fs.writeFileSync('cb/a.txt', 'sync');\n\
         fs.appendFileSync('cb/a.txt', '+more');\n\
         const viaCb = await new Promise((res, rej) => fs.readFile('cb/a.txt', 'utf8', (e, d) => e ? rej(e) : res(d)));\n\
         const missing = await new Promise(res => fs.stat('cb/nope', (e) => res(e.code)));\n\
         const exists = await new Promise(res => fs.exists('cb/a.txt', res));\n\
         const readdir = promisify(fs.readdir);\n\
         const fd = fs.openSync('cb/a.txt', 'r'); const b = Buffer.alloc(4); fs.readSync(fd, b, 0, 4, 0); fs.closeSync(fd);\n\
         export default async () => ({ viaCb, missing, exists, list: await readdir('cb'), head: b.toString(),\n\
           st: fs.statSync('cb/nope', { throwIfNoEntry: false }) ?? null, ex: fs.existsSync('cb'), json: fs.statSync('cb').isDirectory() });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"viaCb": "sync+more", "missing": "ENOENT", "exists": true, "list": ["inner", "a.txt"], "head": "sync",
                "st": null, "ex": true, "json": true})
    );
}

#[tokio::test]
async fn quota_errors_reach_js_as_enospc() {
    let dir = tempfile::tempdir().unwrap();
    let limits = agentcomputer_fs::Limits {
        max_bytes: 64 * 1024,
        max_inodes: 1000,
    };
    let fs = agentcomputer_fs::Fs::create(&dir.path().join("small.db"), limits).unwrap();
    let r = run(
        &fs,
        "import { writeFile } from 'node:fs/promises';\n\
         try { await writeFile('big.bin', Buffer.alloc(1 << 20)) } catch (e) { console.log(e.code, e.syscall) }",
    )
    .await;
    r.ok();
    assert_eq!(r.stdout, "ENOSPC open\n");
}

/// A path ending in `/` names a directory, as on Linux: calls on `file/`
/// fail as Node on Linux fails, and never act on `file`.
#[tokio::test]
async fn a_trailing_slash_names_a_directory() {
    let c = computer();
    let r = run(
        &c.fs,
        "import fs from 'node:fs';\n\
         fs.writeFileSync('f', 'data'); fs.mkdirSync('d/');\n\
         const code = (f) => { try { f(); return 'ok' } catch (e) { return e.code } };\n\
         export default () => [\n\
           code(() => fs.writeFileSync('new/', 'x')),\n\
           code(() => fs.readFileSync('f/')),\n\
           code(() => fs.statSync('f/')),\n\
           code(() => fs.unlinkSync('f/')),\n\
           code(() => fs.renameSync('f/', 'g')),\n\
           code(() => fs.renameSync('f', 'g/')),\n\
           code(() => fs.symlinkSync('f', 'n/')),\n\
           code(() => fs.symlinkSync('f', 'd/')),\n\
           code(() => fs.linkSync('f', 'n/')),\n\
           fs.readFileSync('f', 'utf8'),\n\
           code(() => fs.renameSync('d/', 'e/')),\n\
           code(() => fs.rmdirSync('e/')),\n\
           fs.readdirSync('.'),\n\
         ];",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!([
            "EISDIR",
            "ENOTDIR",
            "ENOTDIR",
            "ENOTDIR",
            "ENOTDIR",
            "ENOTDIR",
            "ENOENT",
            "EEXIST",
            "ENOENT",
            "data",
            "ok",
            "ok",
            ["f"]
        ])
    );
}
