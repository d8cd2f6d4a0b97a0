//! Web and Node globals: Buffer, TextEncoder/TextDecoder, URL,
//! structuredClone, crypto, path, and fetch behind the egress hook.

mod common;

use std::sync::{Arc, Mutex};

use agentcomputer_js::{FetchError, FetchRequest, FetchResponse, RunOptions};
use common::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn buffer() {
    let c = computer();
    let r = run(
        &c.fs,
        "const b = Buffer.from('héllo wörld');\n\
         const parts = Buffer.concat([Buffer.from('ab'), Buffer.from([99, 100]), new Uint8Array([101])]);\n\
         const sub = b.subarray(0, 5); sub[0] = 72;\n\
         const w = Buffer.alloc(8); w.writeUInt32BE(0xdeadbeef, 0); w.writeInt16LE(-2, 4);\n\
         export default () => ({\n\
           len: b.length, byteLength: Buffer.byteLength('héllo'), str: b.toString(), latin1: Buffer.from('é', 'latin1')[0],\n\
           b64: Buffer.from('hi there').toString('base64'), b64url: Buffer.from([251, 255]).toString('base64url'),\n\
           fromB64: Buffer.from('aGkgdGhlcmU=', 'base64').toString(), hex: Buffer.from('ff00', 'hex').toJSON(),\n\
           concat: parts.toString(), shared: b.toString('utf8', 0, 5), slice: b.slice(1, 3).toString('hex'),\n\
           eq: Buffer.from('a').equals(Buffer.from('a')), cmp: Buffer.compare(Buffer.from('a'), Buffer.from('b')),\n\
           idx: b.indexOf('w'), inc: b.includes('llo'), fill: Buffer.alloc(4, 'ab').toString(),\n\
           nums: [w.readUInt32BE(0), w.readInt16LE(4), w.toString('hex')], isBuf: Buffer.isBuffer(sub) && sub instanceof Uint8Array,\n\
           utf16: Buffer.from('hi', 'utf16le').toString('hex'), json: JSON.stringify(Buffer.from([1])) });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({
            "len": 13, "byteLength": 6, "str": "Héllo wörld", "latin1": 233,
            "b64": "aGkgdGhlcmU=", "b64url": "-_8", "fromB64": "hi there", "hex": {"type": "Buffer", "data": [255, 0]},
            "concat": "abcde", "shared": "Héll", "slice": "c3a9", "eq": true, "cmp": -1, "idx": 7, "inc": true,
            "fill": "abab", "nums": [3735928559u32, -2, "deadbeeffeff0000"], "isBuf": true, "utf16": "68006900",
            "json": "{\"type\":\"Buffer\",\"data\":[1]}"
        })
    );
}

#[tokio::test]
async fn text_encoding() {
    let c = computer();
    let r = run(
        &c.fs,
        "const enc = new TextEncoder(); const bytes = enc.encode('€uro');\n\
         const dec = new TextDecoder();\n\
         const streamed = dec.decode(bytes.subarray(0, 2), { stream: true }) + dec.decode(bytes.subarray(2));\n\
         let fatal = null; try { new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xff])) } catch (e) { fatal = e.name }\n\
         const into = new Uint8Array(4); const res = enc.encodeInto('a€b', into);\n\
         export default () => ({ bytes: [...bytes], round: dec.decode(bytes), streamed, lossy: new TextDecoder().decode(new Uint8Array([0x61, 0xff])),\n\
           fatal, into: [res.read, res.written], bom: new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x41])),\n\
           utf16: new TextDecoder('utf-16le').decode(new Uint8Array([0x68, 0, 0x69, 0])), enc: dec.encoding,\n\
           atob: atob(btoa('ok')) });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"bytes": [226, 130, 172, 117, 114, 111], "round": "€uro", "streamed": "€uro", "lossy": "a\u{fffd}",
                "fatal": "TypeError", "into": [2, 4], "bom": "A", "utf16": "hi", "enc": "utf-8", "atob": "ok"})
    );
}

#[tokio::test]
async fn url_and_search_params() {
    let c = computer();
    let r = run(
        &c.fs,
        "const u = new URL('https://user:pw@Example.com:8080/a/./b/../c?x=1&y=two#frag');\n\
         const parts = [u.href, u.origin, u.protocol, u.username, u.host, u.hostname, u.port, u.pathname, u.search, u.hash];\n\
         u.searchParams.append('z', 'a b'); u.pathname = '/new'; u.hash = '';\n\
         const rel = new URL('../up?q', 'http://h/a/b/c').href;\n\
         let bad = null; try { new URL('not a url') } catch (e) { bad = [e.name, e.code] }\n\
         const sp = new URLSearchParams({ a: '1', b: 'x&y' }); sp.set('a', '2'); sp.sort();\n\
         export default () => ({ parts, after: u.toString(), rel, bad, sp: sp.toString(), get: u.searchParams.get('y'),\n\
           all: [...new URLSearchParams('k=1&k=2').getAll('k')], can: [URL.canParse('x:'), URL.canParse('nope')],\n\
           json: JSON.stringify({ u: new URL('http://a/') }) });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({
            "parts": ["https://user:pw@example.com:8080/a/c?x=1&y=two#frag", "https://example.com:8080", "https:", "user",
                      "example.com:8080", "example.com", "8080", "/a/c", "?x=1&y=two", "#frag"],
            "after": "https://user:pw@example.com:8080/new?x=1&y=two&z=a+b",
            "rel": "http://h/a/up?q", "bad": ["TypeError", "ERR_INVALID_URL"], "sp": "a=2&b=x%26y", "get": "two",
            "all": ["1", "2"], "can": [true, false], "json": "{\"u\":\"http://a/\"}"
        })
    );
}

#[tokio::test]
async fn structured_clone_crypto_path() {
    let c = computer();
    let r = run(
        &c.fs,
        "import path from 'node:path';\n\
         const src = { d: new Date(5), m: new Map([[1, { deep: [1] }]]), s: new Set(['x']), re: /a+/gi, bytes: new Uint8Array([1, 2]) };\n\
         src.self = src;\n\
         const c = structuredClone(src);\n\
         let fnErr = null; try { structuredClone({ f() {} }) } catch (e) { fnErr = e.name }\n\
         const rnd = crypto.getRandomValues(new Uint8Array(32));\n\
         export default () => ({\n\
           clone: [c !== src, c.self === c, c.d.getTime(), c.m.get(1).deep[0], c.m.get(1) !== src.m.get(1), c.s.has('x'), String(c.re), [...c.bytes]],\n\
           fnErr, uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID()),\n\
           random: rnd.some(b => b !== 0) && crypto.randomUUID() !== crypto.randomUUID(),\n\
           path: [path.resolve('a/../b'), path.relative('/a/b/c', '/a/d'), path.dirname('/x/y/'), path.basename('/x/y.txt', '.txt'),\n\
                  path.extname('f.tar.gz'), path.normalize('a//b/../c/.'), path.join('/', '..', 'x'), path.isAbsolute('x'),\n\
                  path.parse('/home/u/f.txt'), path.format({ dir: '/d', name: 'n', ext: '.e' })] });",
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({
            "clone": [true, true, 5, 1, true, true, "/a+/gi", [1, 2]], "fnErr": "DataCloneError", "uuid": true, "random": true,
            "path": ["/workspace/b", "../../d", "/x", "y", ".gz", "a/c", "/x", false,
                     {"root": "/", "dir": "/home/u", "base": "f.txt", "ext": ".txt", "name": "f"}, "/d/n.e"]
        })
    );
}

#[tokio::test]
async fn fetch_is_denied_by_default() {
    let c = computer();
    let r = run(
        &c.fs,
        "try { await fetch('https://example.com/') } catch (e) { console.log(e.name + ': ' + e.message, e.code) }\n\
         await fetch('http://169.254.169.254/latest/meta-data/');",
    )
    .await;
    assert_eq!(
        r.stdout,
        "TypeError: fetch: egress denied by the computer's policy EGRESS_DENIED\n"
    );
    assert_eq!(
        r.err(),
        "TypeError: fetch: egress denied by the computer's policy"
    );
}

#[tokio::test]
async fn fetch_goes_through_a_supplied_fetcher() {
    let c = computer();
    let seen: Arc<Mutex<Vec<FetchRequest>>> = Arc::default();
    let log = seen.clone();
    let fetcher = move |req: FetchRequest| -> Result<FetchResponse, FetchError> {
        log.lock().unwrap().push(req.clone());
        if req.url.starts_with("https://allowed.test/") {
            Ok(FetchResponse {
                status: 201,
                status_text: "Created".into(),
                headers: vec![("content-type".into(), "application/json".into())],
                body: br#"{"echo": true}"#.to_vec(),
                url: req.url.clone(),
            })
        } else {
            Err(FetchError::Denied(format!(
                "fetch: egress to {} denied by the computer's policy",
                req.url
            )))
        }
    };
    let options = RunOptions {
        fetcher: Arc::new(fetcher),
        ..RunOptions::default()
    };
    let r = run_with(
        &c.fs,
        request(
            "const res = await fetch('https://allowed.test/api', { method: 'post', headers: { 'X-Token': 't' }, body: JSON.stringify({ a: 1 }) });\n\
             let denied = null; try { await fetch('https://other.test/') } catch (e) { denied = e.message }\n\
             export default async () => ({ status: res.status, ok: res.ok, statusText: res.statusText,\n\
               type: res.headers.get('Content-Type'), body: await res.json(), denied });",
        ),
        options,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        r.ok(),
        &json!({"status": 201, "ok": true, "statusText": "Created", "type": "application/json", "body": {"echo": true},
                "denied": "fetch: egress to https://other.test/ denied by the computer's policy"})
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].body, br#"{"a":1}"#);
    assert!(
        seen[0]
            .headers
            .contains(&("x-token".to_string(), "t".to_string()))
    );
}

#[tokio::test]
async fn globals_do_not_leak_between_execs() {
    let c = computer();
    run(
        &c.fs,
        "globalThis.leak = 1; Buffer.poisoned = true; Array.prototype.evil = 1;",
    )
    .await
    .ok();
    let r = run(
        &c.fs,
        "export default () => [typeof leak, Buffer.poisoned ?? null, [].evil ?? null]",
    )
    .await;
    assert_eq!(r.ok(), &json!(["undefined", null, null]));
}
