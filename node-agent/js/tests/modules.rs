//! Imports: files from the engine, JSON modules, built-ins, clear errors,
//! cycles and the graph limits.

mod common;

use agentcomputer_fs::{Fs, Owner, ROOT_INO, WriteMode};
use common::*;
use serde_json::json;

fn write(fs: &Fs, path: &str, text: &str) {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let mut parent = ROOT_INO;
    for comp in dir.split('/').filter(|c| !c.is_empty()) {
        parent = match fs.lookup(parent, comp.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => {
                fs.mkdir(parent, comp.as_bytes(), 0o755, Owner::ROOT)
                    .unwrap()
                    .ino
            }
        };
    }
    fs.write_all(
        parent,
        name.as_bytes(),
        text.as_bytes(),
        WriteMode::Truncate,
        0o644,
        Owner::ROOT,
    )
    .unwrap();
}

#[tokio::test]
async fn relative_and_absolute_imports_load_from_the_engine() {
    let c = computer();
    write(
        &c.fs,
        "lib/math.js",
        "export const add = (a, b) => a + b; export default 'math';",
    );
    write(
        &c.fs,
        "lib/use.mjs",
        "import { add } from './math.js'; export const three = add(1, 2);",
    );
    write(
        &c.fs,
        "other/x.js",
        "export { three } from '../lib/use.mjs';",
    );
    let r = run(
        &c.fs,
        "import name, { add } from './lib/math.js';\n\
         import { three } from '/workspace/other/x.js';\n\
         import { three as t2 } from 'file:///workspace/lib/use.mjs';\n\
         import * as noExt from './lib/math';\n\
         export default () => [name, add(2, 3), three, t2, noExt.default];",
    )
    .await;
    assert_eq!(r.ok(), &json!(["math", 5, 3, 3, "math"]));
}

#[tokio::test]
async fn imports_resolve_against_cwd_and_index_files() {
    let c = computer();
    write(&c.fs, "app/src/index.js", "export const where = 'index';");
    write(&c.fs, "app/main.js", "export { where } from './src';");
    let mut req = request("import { where } from './main.js'; export default () => where;");
    req.cwd = "/workspace/app".into();
    assert_eq!(run_req(&c.fs, req).await.ok(), &json!("index"));
}

#[tokio::test]
async fn json_modules() {
    let c = computer();
    write(
        &c.fs,
        "data/config.json",
        r#"{"name": "demo", "list": [1, 2]}"#,
    );
    write(&c.fs, "data/bad.json", "{ nope }");
    let r = run(
        &c.fs,
        "import cfg from './data/config.json' with { type: 'json' };\n\
         import again from '/workspace/data/config.json';\n\
         export default () => ({ cfg, same: JSON.stringify(cfg) === JSON.stringify(again) });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"cfg": {"name": "demo", "list": [1, 2]}, "same": true})
    );
    let r = run(&c.fs, "import bad from './data/bad.json';").await;
    assert!(r.err().contains("invalid JSON at line 1"), "{}", r.err());
}

#[tokio::test]
async fn missing_modules_and_bare_specifiers_are_clear_errors() {
    let c = computer();
    let r = run(&c.fs, "import x from './nope.js';").await;
    assert_eq!(
        r.err(),
        "Error: Cannot find module '/workspace/nope.js' imported from /workspace/[eval]"
    );
    let r = run(&c.fs, "import _ from 'lodash';").await;
    assert!(
        r.err().contains("Cannot find package 'lodash'"),
        "{}",
        r.err()
    );
    let r = run(&c.fs, "import x from 'node:nope';").await;
    assert!(
        r.err().contains("No such built-in module: node:nope"),
        "{}",
        r.err()
    );
    // Internal modules are not reachable from user code.
    let r = run(&c.fs, "import native from 'ac:native';").await;
    assert!(
        r.err().contains("Cannot find module 'ac:native'"),
        "{}",
        r.err()
    );
    let r = run(
        &c.fs,
        "try { await import('./missing.js') } catch (e) { console.log(e.code) }",
    )
    .await;
    r.ok();
    assert_eq!(r.stdout, "ERR_MODULE_NOT_FOUND\n");
}

#[tokio::test]
async fn cycles_work_as_es_modules_require() {
    let c = computer();
    write(
        &c.fs,
        "a.js",
        "import { b } from './b.js'; export const a = 'a'; export const fromB = () => b;",
    );
    write(
        &c.fs,
        "b.js",
        "import { a, fromB } from './a.js'; export const b = 'b'; export const seeA = () => a + fromB();",
    );
    let r = run(
        &c.fs,
        "import { seeA } from './b.js'; export default () => seeA();",
    )
    .await;
    assert_eq!(r.ok(), &json!("ab"));
}

#[tokio::test]
async fn dynamic_import_and_top_level_await_in_imports() {
    let c = computer();
    write(
        &c.fs,
        "slow.js",
        "export const v = await new Promise(r => setTimeout(() => r('late'), 5));",
    );
    let r = run(
        &c.fs,
        "const m = await import('./slow.js'); export default () => m.v;",
    )
    .await;
    assert_eq!(r.ok(), &json!("late"));
}

#[tokio::test]
async fn the_import_depth_is_limited() {
    let c = computer();
    let depth = agentcomputer_js::MAX_MODULE_DEPTH + 5;
    for i in 0..depth {
        write(
            &c.fs,
            &format!("chain/m{i}.js"),
            &format!("import './m{}.js'; export const n = {i};", i + 1),
        );
    }
    write(
        &c.fs,
        &format!("chain/m{depth}.js"),
        "export const end = true;",
    );
    let r = run(&c.fs, "import './chain/m0.js';").await;
    assert!(r.err().contains("module graph too deep"), "{}", r.err());
    // A chain within the limit loads.
    write(&c.fs, "chain/m20.js", "export const end = true;");
    let r = run(
        &c.fs,
        "import { n } from './chain/m0.js'; export default () => n;",
    )
    .await;
    assert_eq!(r.ok(), &json!(0));
}

#[tokio::test]
async fn builtins_by_every_name() {
    let c = computer();
    let r = run(
        &c.fs,
        "import path from 'path'; import { join } from 'node:path'; import posix from 'node:path/posix';\n\
         import fs from 'fs'; import { readFile } from 'fs/promises'; import { promises } from 'node:fs';\n\
         import { Buffer as B } from 'node:buffer'; import { URL as U } from 'node:url'; import EE from 'node:events';\n\
         import util from 'node:util'; import os from 'node:os'; import * as crypto from 'node:crypto';\n\
         import { setTimeout as sleep } from 'node:timers/promises'; import proc from 'node:process';\n\
         await sleep(1);\n\
         export default () => [path.join('a', 'b'), join('/x', '..', 'y'), posix.sep, typeof fs.readFileSync,\n\
           readFile === promises.readFile, B === Buffer, U === URL, typeof new EE().on, util.format('%d', 3),\n\
           os.tmpdir(), crypto.randomUUID().length, proc === process];",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!([
            "a/b", "/y", "/", "function", true, true, true, "function", "3", "/tmp", 36, true
        ])
    );
}

#[tokio::test]
async fn require_gives_the_builtins() {
    let c = computer();
    let r = run(
        &c.fs,
        "const fs = require('fs'); const path = require('node:path'); const { readFile } = require('fs/promises');\n\
         import { createRequire } from 'node:module';\n\
         fs.writeFileSync('r.txt', 'req');\n\
         let file = null; try { require('./r.txt') } catch (e) { file = e.code }\n\
         let missing = null; try { require('left-pad') } catch (e) { missing = e.code }\n\
         export default async () => [path.join('a', 'b'), await readFile('r.txt', 'utf8'), createRequire(import.meta.url)('os').EOL, file, missing];",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!(["a/b", "req", "\n", "ERR_REQUIRE_ESM", "MODULE_NOT_FOUND"])
    );
}
